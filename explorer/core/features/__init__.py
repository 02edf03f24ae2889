"""Learned features: sparse autoencoders and transcoders opened from SAELens directories (Qt-free).

* ``sae.py``       open and check a directory (``cfg.json`` + ``sae_weights.safetensors``) before reading
                   its weights; :class:`SAE` encodes and decodes in torch, attached to a Trace key
* ``hooks.py``     TransformerLens hook names -> the Trace key and forward-pass site an SAE reads
* ``analysis.py``  pure functions behind a Features panel: top features of a token, tokens x features,
                   a feature along the prompt, what a feature writes, reconstruction error per token
* ``steering.py``  steering vectors (a feature's decoder direction, a neuron's output weights, a .npy
                   file, a contrast pair's mean difference) and their interventions
"""
