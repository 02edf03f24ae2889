"""The open model's architecture as boxes and edges, read from its ``ModelConfig``.

``build_diagram(cfg, n)`` lists what the forward pass (``explorer/core/model.py``) does, in its order:
the embedding (and positions where they are added), each block (its norms where they sit, attention
with its heads, K/V heads, positions, mask, window and cap, the residual adds, the FFN), the final
norm and the un-embedding. Each box carries its real shape at ``n`` tokens, the Trace key it shows,
the panel that shows that key in full, and a place in a grid (``column`` 0 is the residual stream,
1 and 2 the sublayers beside it; a parallel block puts attention and the FFN side by side).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from explorer.core.config import ModelConfig
from explorer.core.diagram.experts_boxes import experts_boxes
from explorer.core.diagram.mixer_text import MIXER_TITLES, mixer_details

# the panel ids a box links to (the same strings as the UI's panel registry, explorer/ui/panels/registry.py)
TOKENS, EMBED, ATTN, NEURONS, RESID, MASKED = "tokenization", "embeddings", "attention", "neurons", "residual", "masked"
EXPERTS = "experts"  # the mixture-of-experts boxes (router, experts, shared expert): the Experts panel
ACTIVATION_NAMES = {"gelu_tanh": "GELU (tanh)", "gelu": "GELU", "relu": "ReLU", "silu": "SiLU", "relu2": "ReLU²"}


@dataclass(frozen=True)
class Box:
    """One step of the forward pass."""

    id: str  # "embed", "L3.attn.scores", "unembed", ...
    kind: str  # tokens, embed, type_embed, positions, norm, qkv, scores, mix, add, ffn_in, ffn_out, mlm_head, unembed,
    #            mixer (a recurrent layer's scan: its effective attention), per_layer (Gemma 4), scale (layer scalar)
    title: str
    shape: tuple[int, ...]  # at the current n
    shape_text: str  # "n × d_model = 7 × 64"
    key: str | None  # the Trace key it shows (None: the token ids)
    panel: str  # the id of the panel that shows it in full
    layer: int | None = None
    column: int = 0
    row: int = 0
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str = "flow"  # flow: into the next step; residual: the stream carried past a sublayer


@dataclass(frozen=True)
class Diagram:
    config: ModelConfig
    n: int
    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    by_id: dict[str, Box] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.by_id.update({b.id: b for b in self.boxes})

    def box(self, box_id: str) -> Box:
        return self.by_id[box_id]

    def block(self, layer: int) -> list[Box]:
        return [b for b in self.boxes if b.layer == layer]

    def head(self) -> list[Box]:
        """The boxes before the first block."""
        out = []
        for b in self.boxes:
            if b.layer is not None:
                break
            out.append(b)
        return out

    def tail(self) -> list[Box]:
        """The boxes after the last block."""
        last = max(i for i, b in enumerate(self.boxes) if b.layer is not None)
        return list(self.boxes[last + 1:])


def norm_name(cfg: ModelConfig) -> str:
    name = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm", "none": "no norm"}[cfg.norm]
    if cfg.norm == "rmsnorm" and cfg.norm_offset:
        name += f" ({cfg.norm_offset:g} + w)"
    return name if cfg.norm_affine else name + " (no weights)"


def norm_key(cfg: ModelConfig, site: str) -> str:
    return f"{site}.{'var' if cfg.norm == 'layernorm' else 'mean_square'}"


def _shape(names: str, values: tuple[int, ...]) -> str:
    return f"{names} = {' × '.join(str(v) for v in values)}"


def attention_details(cfg: ModelConfig, layer: int) -> tuple[str, ...]:
    """What this layer's attention does besides q·k: heads, K/V heads, positions, mask, window, scale, cap."""
    plan = cfg.layer(layer)
    H, kv = plan.n_heads, plan.n_kv_heads
    lines = [f"{H} head{'s' if H > 1 else ''} of d_head {plan.d_head}"
             + ("" if kv == H else f", {kv} K/V head{'s' if kv > 1 else ''} "
                f"({'multi-query' if kv == 1 else 'grouped-query'}: {H // kv} queries share one)")]
    if cfg.kv_lora_rank is not None:
        lines.append(f"latent attention: K/V from a {cfg.kv_lora_rank}-number latent per token"
                     + (f", q from a {cfg.q_lora_rank}-number one" if cfg.q_lora_rank else "")
                     + f"; values of d {plan.d_head_v}")
    if plan.qk_norm != "none":
        lines.append(f"q/k norms ({norm_name(cfg)}, {plan.qk_norm})")
    if cfg.alibi:
        lines.append("ALiBi: a per-head penalty −m·(i − j) on the scores"
                     + (" (before the scale)" if cfg.alibi_before_scale else ""))
    elif plan.rotary:
        dims = plan.rotary_dim or cfg.rotary_dim or plan.d_head
        base = cfg.rotary_base_local if plan.local_rope else cfg.rotary_base
        scaled = cfg.rope and not plan.local_rope
        lines.append(f"rotary: q, k turned by position ({dims} of {plan.d_head} dims, base {base:g}"
                     + (", interleaved" if cfg.rotary_interleaved else "")
                     + (f", {cfg.rope.get('rope_type')} scaling" if scaled else "") + ")")
    elif cfg.positions == "rotary":
        lines.append("no rotary on this layer (NoPE)" + (": q sharpened by position" if plan.temperature else ""))
    scale = "1/√d_head" if cfg.attn_scale is None else f"{cfg.attn_scale:g}"
    lines.append(f"scale {scale}")
    mask = "causal" if cfg.causal else "bidirectional (no mask)"
    reach = {"sliding": f", sliding window {plan.window}", "chunked": f", within chunks of {plan.window}"}
    lines.append(mask + reach.get(plan.attention, ""))
    if cfg.attn_softcap is not None:
        lines.append(f"soft cap {cfg.attn_softcap:g}·tanh(s/{cfg.attn_softcap:g})")
    if cfg.attn_sinks:
        lines.append("a learned sink per head takes a share of each row's softmax")
    if plan.kv_from is not None:
        lines.append(f"no keys or values of its own: those of layer {plan.kv_from}")
    elif plan.k_eq_v:
        lines.append("values are the keys' projection (K = V)")
    if cfg.v_norm and plan.kv_from is None:
        lines.append("each head's v RMS-normed")
    if cfg.attn_output_gate:
        lines.append("each head's output times sigmoid(x·W_gate): an output gate")
    return tuple(lines)


def ffn_details(cfg: ModelConfig, layer: int | None = None) -> tuple[str, ...]:
    act = ACTIVATION_NAMES[cfg.activation]
    d_ff = cfg.layer(layer).d_ff if layer is not None else cfg.d_ff
    if cfg.gated_ffn:
        return (f"gated: {act}(x·W_gate) ⊙ (x·W_up)", f"d_ff {d_ff}")
    return (f"{act}(x·W_in)", f"d_ff {d_ff}")


class _Builder:
    def __init__(self, cfg: ModelConfig, n: int) -> None:
        self.cfg, self.n = cfg, n
        self.boxes: list[Box] = []
        self.edges: list[Edge] = []
        self.row = 0

    def add(self, box_id: str, kind: str, title: str, shape: tuple[int, ...], names: str, key: str | None,
            panel: str, layer: int | None = None, column: int = 0, details: tuple[str, ...] = (),
            after: str | tuple[str, ...] | None = None, same_row: bool = False) -> str:
        if not same_row:
            self.row += 1
        self.boxes.append(Box(box_id, kind, title, shape, _shape(names, shape), key, panel, layer, column,
                              self.row, details))
        for source in (after,) if isinstance(after, str) else after or ():
            self.edges.append(Edge(source, box_id))
        return box_id

    def by_id_row(self, box_id: str) -> int:
        return next(b.row for b in self.boxes if b.id == box_id)

    def residual(self, source: str, target: str) -> None:
        self.edges.append(Edge(source, target, "residual"))


def build_diagram(cfg: ModelConfig, n: int) -> Diagram:
    """The boxes and edges of ``cfg``'s forward pass at ``n`` tokens."""
    b = _Builder(cfg, n)
    d, V = cfg.d_model, cfg.vocab_size
    last = b.add("tokens", "tokens", "Tokens → ids", (n,), "n", None, TOKENS,
                 details=("the text split into vocabulary pieces",))
    details = [f"a row of the {V} × {cfg.d_embed or d} table per token"]
    if cfg.embed_scale != 1.0:
        details.append(f"rows times {cfg.embed_scale:.4g}")
    if cfg.d_embed and cfg.d_embed != d:
        details.append(f"projected in from {cfg.d_embed} to {d}")
    last = b.add("embed", "embed", "Token embedding", (n, d), "n × d_model", "embed", EMBED,
                 details=tuple(details), after=last)
    extra = []
    if cfg.token_types:
        extra.append(b.add("type_embed", "type_embed", "Token-type embedding", (n, d), "n × d_model",
                           "type_embed", EMBED, column=1, details=("segment 0, added to every token",),
                           same_row=True))
    if cfg.positions in ("learned", "sinusoidal") and not cfg.alibi:
        extra.append(b.add("positions", "positions", f"{cfg.positions.capitalize()} positions", (n, d),
                           "n × d_model", "pos_embed", EMBED, column=2 if cfg.token_types else 1,
                           details=("a vector per position, added to the token's row",), same_row=True))
    for source in extra:
        b.edges.append(Edge(source, "embed"))
    if cfg.embed_norm and cfg.norm != "none":
        last = b.add("embed_norm", "norm", norm_name(cfg), (n,), "n", norm_key(cfg, "ln_embed"), RESID,
                     details=("over the summed embeddings",), after=last)
    for layer in range(cfg.n_layers):
        last = _block(b, layer, last)
    if cfg.final_norm and cfg.norm != "none":
        last = b.add("final_norm", "norm", f"Final {norm_name(cfg)}", (n,), "n", norm_key(cfg, "ln_final"), RESID,
                     after=last)
    if cfg.mlm_head:
        last = b.add("mlm_head", "mlm_head", "Masked-LM head", (n, d), "n × d_model", None, MASKED,
                     details=(f"dense, {ACTIVATION_NAMES[cfg.activation]}, {norm_name(cfg)}",), after=last)
    details = ["tied: the embedding table read backwards" if cfg.tie_embeddings else "its own V × d_model matrix"]
    if cfg.unembed_bias or cfg.mlm_head:
        details.append("plus a bias per vocabulary entry")
    if cfg.logit_scale != 1.0:
        details.append(f"logits times {cfg.logit_scale:.4g}")
    if cfg.final_softcap is not None:
        details.append(f"soft cap {cfg.final_softcap:g}·tanh(z/{cfg.final_softcap:g})")
    b.add("unembed", "unembed", "Un-embedding → logits", (n, V), "n × vocab", "logits",
          MASKED if cfg.mlm_head else RESID, details=tuple(details), after=last)
    return Diagram(cfg, n, tuple(b.boxes), tuple(b.edges))


def _norm(b: _Builder, layer: int, site: str, title: str, column: int, after: str | None,
          same_row: bool = False) -> str | None:
    cfg = b.cfg
    if cfg.norm == "none":
        return after
    return b.add(f"L{layer}.{site}", "norm", title, (b.n,), "n", f"blocks.{layer}.{norm_key(cfg, site)}", RESID,
                 layer, column, after=after, same_row=same_row)


def _attention(b: _Builder, layer: int, column: int, after: str | None, same_row: bool = False) -> str:
    cfg, n, p, plan = b.cfg, b.n, f"blocks.{layer}.", b.cfg.layer(layer)
    if plan.is_recurrent:
        return _mixer(b, layer, column, after, same_row)
    H, dh, dv = plan.n_heads, plan.d_head, plan.d_head_v
    kv = H if cfg.kv_lora_rank is not None else plan.n_kv_heads  # latent attention: a K and V per head
    qkv = b.add(f"L{layer}.attn.qkv", "qkv", "Q, K, V projections" if plan.kv_from is None else "Q projection",
                (H, n, dh), "heads × n × d_head", p + "attn.q", ATTN, layer, column,
                details=(f"q: {H} × {n} × {dh}, " + (f"k and v: {kv} × {n} × {dh}" if dv == dh else
                                                     f"k: {kv} × {n} × {dh}, v: {kv} × {n} × {dv}"),),
                after=after, same_row=same_row)
    scores = b.add(f"L{layer}.attn.scores", "scores", "Scores → softmax", (H, n, n), "heads × n × n",
                   p + "attn.pattern", ATTN, layer, column, details=attention_details(cfg, layer), after=qkv)
    mix = b.add(f"L{layer}.attn.mix", "mix", "Weighted sum of values, heads × W_O", (n, cfg.d_model),
                "n × d_model", p + "attn.out", RESID, layer, column,
                details=(f"each head: pattern @ v ({H} × {n} × {plan.d_head_v})"
                         + (" times its gate" if cfg.attn_output_gate else "") + ", then concatenated"
                         + (", plus the Mamba-2 scan's output beside it" if plan.parallel_ssm else ""),),
                after=scores)
    if plan.parallel_ssm:  # Falcon-H1: a Mamba-2 scan on the same input, its output added to the attention's
        from explorer.core.mixers.effective import scan_heads

        end_row, b.row = b.row, b.by_id_row(qkv)  # beside the attention's first box
        b.add(f"L{layer}.mixer", "mixer", "Mamba-2 beside the attention", (scan_heads(cfg, layer), n, n),
              "heads × n × n", p + "mixer.effective_attention", ATTN, layer, column + 1,
              details=mixer_details(cfg, layer, "mamba2"), after=after, same_row=True)
        b.row = end_row
        b.edges.append(Edge(f"L{layer}.mixer", mix))
    return mix


def _mixer(b: _Builder, layer: int, column: int, after: str | None, same_row: bool = False) -> str:
    """A recurrent or convolutional layer: its scan (the box opens its effective attention) and its output."""
    from explorer.core.mixers.effective import head_count

    cfg, n, p = b.cfg, b.n, f"blocks.{layer}."
    mixer = cfg.layer(layer).mixer
    maps = head_count(cfg, layer)
    scan = b.add(f"L{layer}.mixer", "mixer", MIXER_TITLES[mixer], (maps, n, n),
                 ("channels" if mixer == "short_conv" else "heads") + " × n × n", p + "mixer.effective_attention",
                 ATTN, layer, column, details=mixer_details(cfg, layer), after=after, same_row=same_row)
    return b.add(f"L{layer}.mixer.out", "mix", "Output projection", (n, cfg.d_model), "n × d_model",
                 p + "attn.out", RESID, layer, column, details=("what the layer adds to the stream",), after=scan)


def _ffn(b: _Builder, layer: int, column: int, after: str | None, same_row: bool = False) -> str:
    cfg, n, p = b.cfg, b.n, f"blocks.{layer}."
    if cfg.layer(layer).is_moe:
        return experts_boxes(b, layer, column, after, same_row, ACTIVATION_NAMES[cfg.activation])
    neurons = b.add(f"L{layer}.ffn.in", "ffn_in", "FFN neurons" + (" (gated)" if cfg.gated_ffn else ""),
                    (n, cfg.layer(layer).d_ff), "n × d_ff", p + "mlp.post", NEURONS, layer, column,
                    details=ffn_details(cfg, layer), after=after, same_row=same_row)
    return b.add(f"L{layer}.ffn.out", "ffn_out", "FFN down", (n, cfg.d_model), "n × d_model", p + "mlp.out",
                 RESID, layer, column, after=neurons)


def _stream_key(b: _Builder, layer: int) -> str:
    return f"blocks.{layer + 1}.resid_pre" if layer + 1 < b.cfg.n_layers else "resid_final"


def _block(b: _Builder, layer: int, stream: str) -> str:
    cfg, n, d = b.cfg, b.n, b.cfg.d_model
    name = norm_name(cfg)
    out_key = _stream_key(b, layer)
    if cfg.parallel_residual:
        first = _norm(b, layer, "ln1", name + (" (shared)" if cfg.shared_norm or not cfg.has_ffn else ""), 1, stream)
        second = first
        if cfg.has_ffn and not cfg.shared_norm:
            second = _norm(b, layer, "ln2", name, 2, stream, same_row=True)
        row = b.row
        attn = _attention(b, layer, 1, first)
        ends = [attn]
        if cfg.has_ffn:
            b.row = row
            ends.append(_ffn(b, layer, 2, second))
            b.row = row + 3
        add = b.add(f"L{layer}.add", "add", "+ attention + FFN (side by side)" if cfg.has_ffn else "+ attention",
                    (n, d), "n × d_model", out_key, RESID, layer, 0, after=tuple(ends))
        b.residual(stream, add)
        return add
    post = cfg.norm_placement == "post"
    pre = cfg.norm_placement in ("pre", "sandwich")
    plan = cfg.layer(layer)
    mid = stream
    if plan.mixer != "none":  # (Nemotron-H: a block that is only an FFN)
        into = _norm(b, layer, "ln1", name, 1, stream) if pre else stream
        attn = _attention(b, layer, 1, into)
        if cfg.norm_placement in ("sandwich", "output"):
            attn = _norm(b, layer, "ln1_out", f"{name} (after {'attention' if plan.is_attention else 'the mixer'})", 1,
                         attn)
        mid = b.add(f"L{layer}.add1", "add", "+ residual", (n, d), "n × d_model",
                    f"blocks.{layer}.resid_mid" if plan.has_ffn else out_key, RESID, layer, 0, after=attn)
        b.residual(stream, mid)
        if post:
            mid = _norm(b, layer, "ln1", f"{name} (after the add)", 0, mid)
    if not plan.has_ffn:
        return _block_end(b, layer, mid)
    into = _norm(b, layer, "ln2", name, 1, mid) if pre else mid
    ffn = _ffn(b, layer, 1, into)
    if cfg.norm_placement in ("sandwich", "output"):
        ffn = _norm(b, layer, "ln2_out", f"{name} (after the FFN)", 1, ffn)
    plain = blk_plain(cfg)  # (Gemma 4: the stream after this add is not kept: the box shows what the FFN adds)
    end = b.add(f"L{layer}.add2", "add", "+ residual" if plain else "+ FFN output", (n, d), "n × d_model",
                out_key if plain else f"blocks.{layer}.mlp.out", RESID, layer, 0, after=ffn)
    b.residual(mid, end)
    if post:
        end = _norm(b, layer, "ln2", f"{name} (after the add)", 0, end)
    return _block_end(b, layer, end)


def blk_plain(cfg: ModelConfig) -> bool:
    """Whether a block ends at its last residual add (not Gemma 4's per-layer input and layer scalar)."""
    return not (cfg.d_per_layer or cfg.layer_scalars)


def _block_end(b: _Builder, layer: int, end: str) -> str:
    """Gemma 4: the per-layer input's gated sublayer, added; then the stream times the layer scalar."""
    cfg, n, d, p = b.cfg, b.n, b.cfg.d_model, f"blocks.{layer}."
    if cfg.d_per_layer:
        before = end
        ple = b.add(f"L{layer}.per_layer", "per_layer", "Per-layer embedding", (n, cfg.d_per_layer), "n × d_per_layer",
                    p + "ple.in", EMBED, layer, 1,
                    details=(f"this layer's {cfg.d_per_layer} numbers of the token's per-layer embedding",
                             "norm(W_proj(act(x·W_gate) ⊙ e_l)), added"), after=end)
        end = b.add(f"L{layer}.add3", "add", "+ per-layer input", (n, d), "n × d_model",
                    p + "ple.out" if cfg.layer_scalars else _stream_key(b, layer), RESID, layer, 0, after=ple)
        b.residual(before, end)
    if cfg.layer_scalars:
        end = b.add(f"L{layer}.scale", "scale", "× layer scalar", (n, d), "n × d_model", _stream_key(b, layer), RESID,
                    layer, 0, details=("the whole stream leaving the block times a learned number",), after=end)
    return end
