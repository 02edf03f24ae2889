"""Hugging Face BERT, RoBERTa and DistilBERT checkpoints (encoders) -> our ``Transformer``.

* BERT: word + learned position + token-type embeddings (one segment: type 0 everywhere), a
  LayerNorm over their sum, then post-norm blocks (``x = LN(x + attention(x))``,
  ``x = LN(x + FFN(x))``) with bidirectional attention (every token sees every token), an exact
  GELU FFN, no final norm. ``BertForMaskedLM`` adds its MLM head: dense d -> d, GELU, LayerNorm,
  then the (tied) un-embedding plus a bias.
* RoBERTa: BERT's layout; its positions count from ``pad_token_id + 1`` (2), so the position
  table's first rows are never used by a prompt without padding and are dropped (the context is
  ``max_position_embeddings - 2``). A ``<pad>`` token typed into a prompt would get RoBERTa's
  padding position there; here it counts like any token, which a note says.
* DistilBERT: the same without token types (``sa_layer_norm`` / ``output_layer_norm`` are the two
  post-norms; ``vocab_transform`` / ``vocab_layer_norm`` / ``vocab_projector`` the MLM head).

A ``BertModel`` (such as all-MiniLM-L6-v2, a sentence encoder) has no MLM head: the un-embedding
is then tied to the token embeddings so that the panels have logits to show, and a note says that
those logits are not an output the model was trained to produce. The pooler (a [CLS] sentence
head) and a next-sentence head are not part of the per-token computation and are left out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from explorer.core.checkpoint.convert import Tensors, activation, expected_shapes, get_int
from explorer.core.checkpoint.family import Family, FromWeightsFn, layout_only
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

NO_HEAD_NOTE = ("This checkpoint is an encoder without its masked-LM head: the logits shown are the last hidden "
                "states against the token embeddings, which the model was not trained to produce.")
_DROPPED = (".position_ids", "pooler.dense.weight", "pooler.dense.bias", "cls.seq_relationship.weight",
            "cls.seq_relationship.bias")


def _renamed(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Old TensorFlow-converted names (LayerNorm.gamma / beta) as today's; buffers and sentence heads dropped."""
    out = {}
    for name, tensor in weights.items():
        if name.endswith(_DROPPED):
            continue
        out[name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")] = tensor
    return out


def position_offset(hf: dict[str, Any], family: str) -> int:
    """RoBERTa's first position row: pad_token_id + 1 (0 for the others)."""
    if family != "roberta":
        return 0
    pad = get_int(hf, family, "pad_token_id", 1)
    if not 0 <= pad < 1024:
        raise CheckpointError(f"roberta config.json: pad_token_id {pad} is out of range")
    return pad + 1


def _check_sizes(family: str, d_ff: int, types: int) -> None:
    """Sizes an encoder block cannot do without: a feed-forward layer, and (BERT) a token-type table."""
    key = "hidden_dim" if family == "distilbert" else "intermediate_size"
    if d_ff < 1:
        raise CheckpointError(f"{family} config.json: {key} should be at least 1 (got {d_ff}): an encoder block "
                              "always has a feed-forward layer")
    if family == "bert" and types < 1:
        raise CheckpointError(f"{family} config.json: type_vocab_size should be at least 1 (got {types}): BERT adds "
                              "a token-type embedding to every token")


def bert_config(hf: dict[str, Any], family: str, has_head: bool) -> ModelConfig:
    if family in ("bert", "roberta"):
        d, n_heads = get_int(hf, family, "hidden_size"), get_int(hf, family, "num_attention_heads")
        layers, d_ff = get_int(hf, family, "num_hidden_layers"), get_int(hf, family, "intermediate_size")
        n_ctx = get_int(hf, family, "max_position_embeddings", 512) - position_offset(hf, family)
        act = activation(hf, family, "gelu")
        types, eps = get_int(hf, family, "type_vocab_size", 2), hf.get("layer_norm_eps", 1e-12)
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise CheckpointError(f"bert: position_embedding_type {hf.get('position_embedding_type')!r} is not "
                                  "supported (only 'absolute' is)")
        if hf.get("is_decoder"):
            raise CheckpointError("bert: a BERT decoder (is_decoder: true) is not supported; encoders are")
    else:
        d, n_heads = get_int(hf, family, "dim"), get_int(hf, family, "n_heads")
        layers, d_ff = get_int(hf, family, "n_layers"), get_int(hf, family, "hidden_dim")
        n_ctx, types, eps = get_int(hf, family, "max_position_embeddings", 512), 0, 1e-12
        act = activation({"hidden_act": hf.get("activation", "gelu")}, family, "gelu")
        if hf.get("sinusoidal_pos_embds"):
            raise CheckpointError("distilbert: sinusoidal position embeddings are not supported (learned ones are)")
    if n_heads <= 0 or d % n_heads:
        raise CheckpointError(f"{family}: the width ({d}) is not a multiple of the number of heads ({n_heads})")
    _check_sizes(family, d_ff, types)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise CheckpointError(f"{family} config.json: layer_norm_eps should be a small positive number (got {eps!r})")
    return ModelConfig(
        arch=family, vocab_size=get_int(hf, family, "vocab_size"), n_ctx=n_ctx, d_model=d, n_layers=layers,
        n_heads=n_heads, d_head=d // n_heads, d_ff=d_ff, norm="layernorm", norm_placement="post",
        norm_eps=float(eps), final_norm=False, positions="learned", activation=act, causal=False,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)) or not has_head,
        token_types=types, embed_norm=True, mlm_head=has_head)


def convert_bert(weights: dict[str, torch.Tensor], cfg: ModelConfig, family: str = "bert",
                 offset: int = 0) -> dict[str, torch.Tensor]:
    shapes, t = expected_shapes(cfg), Tensors(_renamed(weights), family)
    p = f"{family}." if any(k.startswith(f"{family}.") for k in t.sd) else ""
    n_pos, d = shapes["pos_embed.weight"]
    positions = t.take(f"{p}embeddings.position_embeddings.weight", (n_pos + offset, d))[offset:]
    out = {"embed.weight": t.take(f"{p}embeddings.word_embeddings.weight", shapes["embed.weight"]),
           "pos_embed.weight": positions,
           "type_embed.weight": t.take(f"{p}embeddings.token_type_embeddings.weight", shapes["type_embed.weight"])}
    for kind in ("weight", "bias"):
        out[f"ln_embed.{kind}"] = t.take(f"{p}embeddings.LayerNorm.{kind}", shapes[f"ln_embed.{kind}"])
    names = {"attention.self.query": "attn.W_Q", "attention.self.key": "attn.W_K", "attention.self.value": "attn.W_V",
             "attention.output.dense": "attn.W_O", "attention.output.LayerNorm": "ln1",
             "intermediate.dense": "mlp.W_in", "output.dense": "mlp.W_out", "output.LayerNorm": "ln2"}
    for i in range(cfg.n_layers):
        for theirs, ours in names.items():
            for kind in ("weight", "bias"):
                key = f"blocks.{i}.{ours}.{kind}"
                out[key] = t.take(f"{p}encoder.layer.{i}.{theirs}.{kind}", shapes[key])
    heads = {"bert": {"dense": "cls.predictions.transform.dense", "norm": "cls.predictions.transform.LayerNorm",
                      "bias": "cls.predictions.bias", "decoder": "cls.predictions.decoder"},
             "roberta": {"dense": "lm_head.dense", "norm": "lm_head.layer_norm", "bias": "lm_head.bias",
                         "decoder": "lm_head.decoder"}}
    _head(t, out, shapes, cfg, heads[family])
    return out


def convert_distilbert(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    shapes, t = expected_shapes(cfg), Tensors(_renamed(weights), "distilbert")
    p = "distilbert." if any(k.startswith("distilbert.") for k in t.sd) else ""
    out = {"embed.weight": t.take(f"{p}embeddings.word_embeddings.weight", shapes["embed.weight"]),
           "pos_embed.weight": t.take(f"{p}embeddings.position_embeddings.weight", shapes["pos_embed.weight"])}
    for kind in ("weight", "bias"):
        out[f"ln_embed.{kind}"] = t.take(f"{p}embeddings.LayerNorm.{kind}", shapes[f"ln_embed.{kind}"])
    names = {"attention.q_lin": "attn.W_Q", "attention.k_lin": "attn.W_K", "attention.v_lin": "attn.W_V",
             "attention.out_lin": "attn.W_O", "sa_layer_norm": "ln1", "ffn.lin1": "mlp.W_in",
             "ffn.lin2": "mlp.W_out", "output_layer_norm": "ln2"}
    for i in range(cfg.n_layers):
        for theirs, ours in names.items():
            for kind in ("weight", "bias"):
                key = f"blocks.{i}.{ours}.{kind}"
                out[key] = t.take(f"{p}transformer.layer.{i}.{theirs}.{kind}", shapes[key])
    _head(t, out, shapes, cfg, {"dense": "vocab_transform", "norm": "vocab_layer_norm",
                                "bias": "vocab_projector.bias", "decoder": "vocab_projector"})
    return out


def _head(t: Tensors, out: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]], cfg: ModelConfig,
          names: dict[str, str]) -> None:
    """The MLM head's tensors (when the config has one) and the un-embedding; then nothing may be left."""
    if cfg.mlm_head:
        for kind in ("weight", "bias"):
            out[f"mlm.dense.{kind}"] = t.take(f"{names['dense']}.{kind}", shapes[f"mlm.dense.{kind}"])
            out[f"mlm.norm.{kind}"] = t.take(f"{names['norm']}.{kind}", shapes[f"mlm.norm.{kind}"])
        decoder_bias = f"{names['decoder']}.bias"
        if names["bias"] in t.sd:
            out["mlm.bias"] = t.take(names["bias"], shapes["mlm.bias"])
            if names["bias"] != decoder_bias:
                t.sd.pop(decoder_bias, None)  # the same tensor, saved twice by some writers
        else:
            out["mlm.bias"] = t.take(decoder_bias, shapes["mlm.bias"])
    decoder = f"{names['decoder']}.weight"
    out["unembed.weight"] = t.unembedding(out, cfg, shapes, decoder)
    t.finish()


def _has_head(weights: dict[str, torch.Tensor], marker: str) -> bool:
    return any(k.startswith(marker) for k in weights)


def encoder_config(hf: dict[str, Any], family: str) -> tuple[ModelConfig, list[str]]:
    """The config with the masked-LM head; ``without_head`` drops it when the tensors have none."""
    offset = position_offset(hf, family)
    notes = [f"RoBERTa numbers positions from {offset}; a padding token (id {offset - 1}) typed into the prompt "
             "would get RoBERTa's padding position there, here it counts as an ordinary position."] if offset else []
    return bert_config(hf, family, has_head=True), notes


def without_head(family: str) -> FromWeightsFn:
    """Whether the tensors hold the masked-LM head; if not, the config without it and a note saying so."""
    marker = {"bert": "cls.predictions.", "roberta": "lm_head.", "distilbert": "vocab_transform."}[family]

    def check(cfg: ModelConfig, notes: list[str], weights: dict[str, torch.Tensor]) -> tuple[ModelConfig, list[str]]:
        if _has_head(weights, marker):
            return cfg, notes
        return dataclasses.replace(cfg, mlm_head=False, tie_embeddings=True), [NO_HEAD_NOTE, *notes]
    return check


FAMILIES = (
    Family("bert", "bert", lambda hf: encoder_config(hf, "bert"),
           lambda w, c, hf: convert_bert(w, c, "bert", position_offset(hf, "bert")), from_weights=without_head("bert")),
    Family("roberta", "roberta", lambda hf: encoder_config(hf, "roberta"),
           lambda w, c, hf: convert_bert(w, c, "roberta", position_offset(hf, "roberta")),
           from_weights=without_head("roberta")),
    Family("distilbert", "distilbert", lambda hf: encoder_config(hf, "distilbert"), layout_only(convert_distilbert),
           from_weights=without_head("distilbert")),
)
