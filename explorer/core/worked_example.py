"""The built-in ``worked-example`` model: the single-head walkthrough of the seed article
"Exploring the Intricacies of Encoder, Multi-Head Attention, and Positional Encoding".

Four words, one-hot embeddings of dimension 4, no positions, no norm, no biases, one layer with
one head of d_head = 4, bidirectional (encoder) attention and no FFN. With W_Q, W_K, W_V from the
article, the captured q, k, scores, pattern and head output reproduce its matrices for
"Today is sunday". W_O is the identity, so the attention output equals the head's output.
"""

from __future__ import annotations

import torch

from explorer.core.config import ModelConfig
from explorer.core.model import Transformer
from explorer.core.tokenize.base import VocabTokenizer

NAME = "worked-example"
PROMPT = "Today is sunday"
VOCABULARY = ["Today", "is", "sunday", "saturday"]

# Row i of each matrix is what input dimension i contributes: Q = X @ W_Q (X one-hot rows).
W_Q = [[0.694, 0.555, 0.236, -0.082],
       [0.877, -0.625, -0.570, -0.745],
       [0.984, 0.600, 0.264, -0.565],
       [0.421, -0.045, 0.145, -0.717]]
W_K = [[-0.409, -0.828, 0.788, -0.419],
       [0.863, 0.552, 0.022, 0.992],
       [0.164, 0.506, 0.283, -0.291],
       [-0.992, -0.450, -0.289, 0.570]]
W_V = [[-0.373, -0.581, 0.068, -0.877],
       [-0.229, -0.712, -0.348, -0.073],
       [0.380, -0.246, -0.266, 0.453],
       [0.866, -0.687, 0.660, 0.545]]


def config() -> ModelConfig:
    return ModelConfig(arch="worked-example", vocab_size=4, n_ctx=16, d_model=4, n_layers=1, n_heads=1, d_head=4,
                       d_ff=0, attn_only=True, norm="none", positions="none", causal=False,
                       attn_bias=False, mlp_bias=False, tie_embeddings=True, final_norm=False)


def build() -> tuple[Transformer, VocabTokenizer]:
    model = Transformer(config())
    with torch.no_grad():
        model.embed.weight.copy_(torch.eye(4))
        attn = model.blocks[0].attn
        # nn.Linear computes x @ weight.T, so its weight is the transpose of the article's matrix
        attn.W_Q.weight.copy_(torch.tensor(W_Q).T)
        attn.W_K.weight.copy_(torch.tensor(W_K).T)
        attn.W_V.weight.copy_(torch.tensor(W_V).T)
        attn.W_O.weight.copy_(torch.eye(4))
    return model.eval(), VocabTokenizer(VOCABULARY, split="words", name="worked-example words")
