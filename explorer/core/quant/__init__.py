"""Weights kept as the file stores them (GGUF blocks, half precision), and what a model takes in memory.

* ``dequant``: GGUF blocks -> numbers in torch, equal to ``gguf``'s numpy dequantiser bit for bit;
* ``packed``: a linear layer or embedding holding its weight as bytes, expanded into the compute
  precision when it runs, the expanded weights kept in an LRU cache inside the memory budget;
* ``plan``: before loading, the memory each way of holding the weights takes, and the one that fits.
"""
