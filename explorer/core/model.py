"""The instrumented transformer: one readable forward pass, close to the math of the seed articles.

Shapes in comments: B batch, n new tokens, m keys (n plus cached tokens), d = d_model,
H query heads, Hkv key/value heads, dh = d_head, f = d_ff, V = vocabulary.

Each block is what its ``LayerPlan`` says (core/plan.py: ``cfg.layer(l)``): its attention's reach (a
full causal mask, a sliding window, Llama 4's chunks), rotary or not, its heads, and a dense FFN or a
mixture of experts (core/moe.py). The small pieces of math live in core/attention.py, the modules in
core/layers.py; this file is the order in which they run.

Capture: every interesting tensor passes through ``rec(site, layer, tensor)``. With no capture,
``rec`` is a function that does nothing, so the plain forward pays one no-op call per site.
Interventions: at the sites a user can change (the residual stream, each head's output z, the
attention and FFN outputs, the neurons, a router's logits and choice) the forward pass goes on with
what ``rec`` returns (``x = rec(...)``); the no-op returns its input unchanged (explorer/core/interventions/).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from explorer.core.attention import (  # noqa: F401 - the math is also imported from here
    UNFUSABLE_ATTENTION,
    Rec,
    Window,
    _no_capture,
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    apply_rotary_interleaved,
    attention_pattern,
    attention_scores,
    causal_mask,
    fusable,
    fused_attention,
    layer_mask,
    layer_reach,
    layer_scores,
    layer_window,
    pattern_and_sink,
    query_temperature,
    records_attention,
    rotary_angles,
    score_bias,
    sinusoidal_positions,
    soft_cap,
    visible_keys,
    weighted_values,
)
from explorer.core.config import ModelConfig
from explorer.core.errors import PromptError
from explorer.core.layers import (  # noqa: F401
    FFN,
    Attention,
    Block,
    KVCache,
    MLMHead,
    Norm,
    activation,
    make_norm,
    output_logits,
)
from explorer.core.mixers import mixer_forward
from explorer.core.per_layer import PerLayerEmbeddings, Side, kv_sources, per_layer_inputs, ple_sublayer
from explorer.core.placement import block_device, is_placed, tail_device, weights_of


def _first_sharing(cfg: ModelConfig) -> int | None:
    """The first of Gemma 4's KV-sharing layers (all later ones share too), None without them."""
    sharing = [p.layer for p in cfg.plan if p.kv_from is not None]
    return sharing[0] if sharing and sharing == list(range(sharing[0], cfg.n_layers)) else None


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            from explorer.core.errors import ArgumentError

            raise ArgumentError(f"cfg must be a ModelConfig, not a {type(cfg).__name__}")
        self.cfg = cfg
        d_embed = cfg.d_embed or cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d_embed)
        # OPT-350m: token embeddings narrower than the residual stream, projected in and back out
        self.project_in = nn.Linear(d_embed, cfg.d_model, bias=False) if d_embed != cfg.d_model else None
        self.project_out = nn.Linear(cfg.d_model, d_embed, bias=False) if d_embed != cfg.d_model else None
        self.pos_embed = nn.Embedding(cfg.n_ctx, cfg.d_model) if cfg.positions == "learned" else None
        if cfg.positions == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal_positions(cfg.n_ctx, cfg.d_model), persistent=False)
        self.type_embed = nn.Embedding(cfg.token_types, cfg.d_model) if cfg.token_types else None
        self.ln_embed = make_norm(cfg, cfg.d_model) if cfg.embed_norm else None
        self.blocks = nn.ModuleList(Block(cfg, plan) for plan in cfg.plan)
        self.ple = PerLayerEmbeddings(cfg) if cfg.d_per_layer else None  # Gemma 4 (core/per_layer.py)
        self.ln_final = make_norm(cfg, cfg.d_model) if cfg.final_norm and cfg.norm != "none" else None
        self.mlm = MLMHead(cfg) if cfg.mlm_head else None
        self.unembed = nn.Linear(d_embed, cfg.vocab_size, bias=cfg.unembed_bias)
        if cfg.tie_embeddings:
            self.unembed.weight = self.embed.weight

    # ------------------------------------------------------------------------------------------
    def forward(self, token_ids: Tensor, rec: Rec = _no_capture, cache: KVCache | None = None,
                last_only: bool = False) -> Tensor:
        """token_ids [B, n] -> logits [B, n, V] for every position ([B, 1, V] with ``last_only``,
        which is all generation needs: un-embedding every prompt position costs n x V)."""
        cfg = self.cfg
        n = token_ids.shape[-1]
        start = cache.length if cache is not None else 0
        if start + n > cfg.n_ctx:
            raise PromptError(f"{start + n} tokens do not fit this model's context of {cfg.n_ctx}")
        if cache is not None and not cfg.causal:
            raise ValueError("a KV cache needs causal attention: an encoder's earlier keys change with new tokens")
        positions = torch.arange(start, start + n, device=token_ids.device)

        x = self.embed(token_ids)                                          # [B, n, d]
        if self.project_in is not None:
            x = self.project_in(x)                                         # [B, n, d_embed] -> [B, n, d]
        rec("embed", None, x)
        if cfg.embed_scale != 1.0:                                         # Gemma: times sqrt(d); Granite
            x = x * torch.tensor(cfg.embed_scale, dtype=x.dtype)
        if cfg.positions in ("learned", "sinusoidal"):
            pos = self.pos_embed(positions) if self.pos_embed is not None else self.sinusoid[positions]
            rec("pos_embed", None, pos.unsqueeze(0))                       # [1, n, d]
            x = x + pos
        if self.type_embed is not None:                                    # BERT: segment 0's vector everywhere
            with weights_of(self.type_embed):                              # (real even when offloaded)
                segment = self.type_embed.weight[0].to(x.device).expand(1, n, -1)  # [1, n, d]
            rec("type_embed", None, segment)
            x = x + segment
        if self.ln_embed is not None:                                      # BERT, BLOOM: normalise the embeddings
            x = self.ln_embed(x, rec, "ln_embed")
        side = Side(per_layer_inputs(cfg, self.ple, token_ids, x) if self.ple is not None else None)

        # one mask per kind of attention the plan names (a sliding window, Llama 4's chunks) and one set of
        # rotary angles per kind of rotation (Gemma 3's sliding layers turn with their own base; NoPE: none).
        # A model placed across devices (core/placement.py): the stream moves to each block's device,
        # and masks and angles are made once per device.
        masks: dict = {}
        rotary: dict = {}
        for plan in cfg.plan:
            layer, device = plan.layer, block_device(self, plan.layer)
            x = x if device is None or x.device == device else x.to(device)
            if last_only and rec is _no_capture and layer == _first_sharing(cfg) and x.shape[1] > 1:
                # Gemma 4: from here on no layer writes keys or values, so only the last position matters for
                # generation (as transformers' generate skips the others); same numbers at the last position
                x, positions, masks, rotary = x[:, -1:], positions[-1:], {}, {}
                side.per_layer = side.per_layer[:, -1:] if side.per_layer is not None else None
            reach = (plan.attention, plan.window, x.device)
            turn = (plan.rotary, plan.local_rope, plan.rotary_dim, x.device)
            if reach not in masks and plan.is_attention:  # (recurrent mixers need no mask)
                # one query and no window sees every key: no mask to build, nor to test on the device
                needed = cfg.causal and not (x.shape[1] == 1 and plan.attention == "full")
                masks[reach] = layer_mask(cfg, layer, x.shape[1], start + n, x.device) if needed else None
            if turn not in rotary:
                rotary[turn] = (self.rotary_at(positions.to(x.device), plan.local_rope, plan.rotary_dim)
                                if plan.rotary else None)
            x = self.block_forward(layer, x, masks.get(reach), rotary[turn], rec, cache, side)

        x = rec("resid_final", None, self.to_tail(x))
        if last_only:
            x = x[:, -1:]
        if self.ln_final is not None:
            x = self.ln_final(x, rec, "ln_final")
        logits = self.unembed_step(x)                                      # [B, n, V]
        rec("logits", None, logits)
        return logits

    def unembed_step(self, x: Tensor) -> Tensor:
        """Residual stream (after the final norm) -> logits; an MLM head transforms it first and adds a bias.
        (Granite's scale and Gemma 2's soft-cap apply to what comes out: ``output_logits``.)"""
        if self.project_out is not None:                                   # OPT-350m: [B, n, d] -> [B, n, d_embed]
            x = self.project_out(x)
        if self.mlm is None:
            return output_logits(self.cfg, self.unembed(x))
        h = self.mlm.norm(activation(self.cfg.activation)(self.mlm.dense(x)))  # dense, act, norm: [B, n, d]
        with weights_of(self.mlm):
            return output_logits(self.cfg, self.unembed(h) + self.mlm.bias.to(h.device))

    def block_forward(self, layer: int, x: Tensor, mask: Tensor | None, rotary: tuple[Tensor, Tensor] | None,
                      rec: Rec = _no_capture, cache: KVCache | None = None, side: Side | None = None) -> Tensor:
        """One block: token mixer sublayer (attention, or a recurrent mixer: core/mixers/) then FFN sublayer
        (dense or experts), each added to the residual stream; Gemma 4's per-layer input and layer scalar after.
        ``side``: what the block reads besides x (per-layer embeddings, an earlier layer's K/V: core/per_layer.py)."""
        cfg, blk, plan = self.cfg, self.blocks[layer], self.cfg.layer(layer)
        side = side if side is not None else Side()
        x = rec("resid_pre", layer, x)
        if plan.mixer == "none":                                           # Nemotron-H: an FFN-only block
            return self.ffn_sublayer(layer, x, x, x, rec, side)
        pre_norm = cfg.norm_placement in ("pre", "sandwich") and blk.ln1 is not None

        h = blk.ln1(x, rec, "ln1", layer) if pre_norm else x
        if plan.is_attention:
            attn_out = self.attention(layer, h, mask, rotary, rec, cache, side)  # [B, n, d]
            if plan.parallel_ssm:                                          # Falcon-H1: Mamba-2 beside, added
                attn_out = attn_out + rec("mixer.out", layer, mixer_forward(plan, blk.mixer, h, rec, cache))
        else:                                                              # DeltaNet, Mamba-2, a convolution
            attn_out = mixer_forward(plan, blk.mixer, h, rec, cache)
        if blk.ln1_out is not None:                                        # Gemma 2/3, OLMo 2: norm the output
            attn_out = blk.ln1_out(attn_out, rec, "ln1_out", layer)
        if cfg.residual_scale != 1.0:                                      # Granite: scaled before it is added
            attn_out = attn_out * cfg.residual_scale
        attn_out = rec("attn.out", layer, attn_out)                        # what is added to the stream

        mid = x + attn_out
        if not pre_norm and blk.ln1 is not None:                           # post-norm: normalise the sum
            mid = blk.ln1(mid, rec, "ln1", layer)
        rec("resid_mid", layer, mid)
        if not plan.has_ffn:
            return self.block_end(layer, mid, rec, side)
        return self.ffn_sublayer(layer, x, h, mid, rec, side, attn_out)

    def ffn_sublayer(self, layer: int, x: Tensor, h: Tensor, mid: Tensor, rec: Rec, side: Side,
                     attn_out: Tensor | None = None) -> Tensor:
        """The FFN sublayer (dense or experts) on the stream after the mixer (``mid``; x: the block's input, h its
        normed input), added to it; then the block's end (``block_end``)."""
        cfg, blk, plan = self.cfg, self.blocks[layer], self.cfg.layer(layer)
        pre_norm = cfg.norm_placement in ("pre", "sandwich") and blk.ln2 is not None
        ffn_in = x if cfg.parallel_residual else mid
        if cfg.shared_norm:                                                # one norm feeds both sublayers
            ffn_in = h
        elif pre_norm or cfg.parallel_residual:
            ffn_in = blk.ln2(ffn_in, rec, "ln2", layer)
        if plan.is_moe:                                                    # route each token to its experts
            from explorer.core.moe import moe_forward

            mlp_out = moe_forward(cfg, blk.moe, ffn_in, rec, layer)         # [B, n, d]
        else:
            mlp_out = self.ffn(layer, ffn_in, rec)                         # [B, n, d]
        if blk.ln2_out is not None:
            mlp_out = blk.ln2_out(mlp_out, rec, "ln2_out", layer)
        if cfg.residual_scale != 1.0:
            mlp_out = mlp_out * cfg.residual_scale
        mlp_out = rec("mlp.out", layer, mlp_out)

        out = (x + attn_out + mlp_out) if cfg.parallel_residual else (mid + mlp_out)
        if not pre_norm and blk.ln2 is not None:
            out = blk.ln2(out, rec, "ln2", layer)
        return self.block_end(layer, out, rec, side)

    def block_end(self, layer: int, out: Tensor, rec: Rec, side: Side) -> Tensor:
        """Gemma 4: the per-layer input's sublayer is added, then the whole stream times the layer scalar."""
        blk = self.blocks[layer]
        if blk.ple is not None:
            out = out + ple_sublayer(self.cfg, blk, out, side.for_layer(layer), rec, layer)
        scalar = getattr(blk, "layer_scalar", None)
        return out if scalar is None else out * scalar.to(out.dtype)

    def attention(self, layer: int, h: Tensor, mask: Tensor | None, rotary: tuple[Tensor, Tensor] | None,
                  rec: Rec = _no_capture, cache: KVCache | None = None, side: Side | None = None) -> Tensor:
        """The attention sublayer on its normed input h [B, n, d]: per-head queries, keys and values, scores,
        pattern, weighted values, heads concatenated times W_O.  -> [B, n, d] (before any output norm)."""
        cfg, attn, plan = self.cfg, self.blocks[layer].attn, self.cfg.layer(layer)
        B, n, _ = h.shape
        H, Hkv, dh = plan.n_heads, plan.n_kv_heads, plan.d_head
        turn = apply_rotary_interleaved if cfg.rotary_interleaved else apply_rotary
        if attn.W_Q is None:                                               # DeepSeek: multi-head latent attention
            from explorer.core.mla import latent_qkv

            q, k, v = latent_qkv(cfg, attn, h, rotary)                     # [B, H, n, dh], [B, H, n, dh/dv]
        elif plan.kv_from is not None:                                     # Gemma 4: an earlier layer's K and V
            q = attn.W_Q(h).view(B, n, H, dh).transpose(1, 2)
            q = attn.q_norm(q, rec, "attn.q_norm", layer) if attn.q_norm is not None else q
            q = turn(q, *rotary) if rotary is not None else q
            k, v = (side or Side()).kv[plan.kv_from]                       # [B, Hkv, m, dh] (cached ones included)
        else:
            k = attn.W_K(h)                                                # [B, n, Hkv*dh]
            q, v = attn.W_Q(h), attn.W_V(h) if attn.W_V is not None else k  # Gemma 4 (K = V): v is k's projection
            if plan.qk_norm == "full":                                     # OLMo 2, OLMoE: norm over all heads
                q, k = attn.q_norm(q, rec, "attn.q_norm", layer), attn.k_norm(k, rec, "attn.k_norm", layer)
            if cfg.qkv_clip is not None:                                   # OLMo, OLMoE: clamp to [-clip, clip]
                q, k, v = (t.clamp(-cfg.qkv_clip, cfg.qkv_clip) for t in (q, k, v))
            q = q.view(B, n, H, dh).transpose(1, 2)                        # [B, H, n, dh]
            k = k.view(B, n, Hkv, dh).transpose(1, 2)                      # [B, Hkv, n, dh]
            v = v.view(B, n, Hkv, -1).transpose(1, 2)                      # [B, Hkv, n, dv]
            if attn.q_norm is not None and plan.qk_norm != "full":         # Qwen3, Gemma 3: norm each head's q, k
                q, k = attn.q_norm(q, rec, "attn.q_norm", layer), attn.k_norm(k, rec, "attn.k_norm", layer)
            if attn.v_norm is not None:                                    # Gemma 4: each head's v RMS-normed
                v = attn.v_norm(v)
            if rotary is not None:  # rotary positions turn q and k by an angle that grows with position
                q, k = turn(q, *rotary), turn(k, *rotary)
        if plan.temperature:                                               # Llama 4's NoPE layers: sharper later
            start = cache.seen(layer) if cache is not None else 0
            positions = torch.arange(start, start + n, device=q.device)
            q = q * query_temperature(positions, cfg.attn_temperature, cfg.attn_temperature_floor)[:, None].to(q.dtype)
        if cache is not None and plan.kv_from is None:
            k, v = cache.extend(layer, k, v)                               # [B, Hkv, m, dh]
        if side is not None and layer in kv_sources(cfg):                  # a later layer reads these
            side.kv[layer] = (k, v)
        rec("attn.q", layer, q)
        rec("attn.k", layer, k)
        rec("attn.v", layer, v)
        if records_attention(rec, layer) or not fusable(cfg):
            scores, precap = layer_scores(cfg, q, k, mask)                 # scale, bias, mask, cap: [B, H, n, m]
            if precap is not None:                                         # Gemma 2: the scores before the cap
                rec("attn.scores_precap", layer, precap)
                del precap
            rec("attn.scores", layer, scores)                              # what enters the softmax
            if attn.sinks is not None:                                     # gpt-oss: each head's sink takes a share
                pattern, sink = pattern_and_sink(scores, attn.sinks)
                rec("attn.sink", layer, sink)                              # [B, H, n]: the row's weight on the sink
            else:
                pattern = attention_pattern(scores)                        # softmax per query row
            rec("attn.pattern", layer, pattern)
            z = weighted_values(pattern, v)                                # [B, H, n, dv]
        else:  # nobody looks at the n x m scores: the same math in one fused kernel
            z = fused_attention(q, k, v, mask, cfg.attn_scale)             # [B, H, n, dv]
        if attn.W_G is not None:                                           # Qwen3.5/Next: a sigmoid gate per output
            gate = torch.sigmoid(attn.W_G(h).view(B, n, H, -1).transpose(1, 2))
            z = z * rec("attn.gate", layer, gate)                          # [B, H, n, dv]: z is the gated output
        z = rec("attn.z", layer, z)
        return attn.W_O(z.transpose(1, 2).reshape(B, n, -1))               # concat heads, W_O: [B, n, d]

    def ffn(self, layer: int, ffn_in: Tensor, rec: Rec = _no_capture) -> Tensor:
        """A dense FFN: expand to d_ff, non-linearity (gated: act(x W_gate) * (x W_in)), contract back to d."""
        mlp = self.blocks[layer].mlp
        if mlp.W_gate is not None:
            pre = mlp.W_gate(ffn_in)
            rec("mlp.pre", layer, pre)
            post = activation(self.cfg.activation)(pre) * mlp.W_in(ffn_in)
        else:
            pre = mlp.W_in(ffn_in)                                         # [B, n, f]
            rec("mlp.pre", layer, pre)
            post = activation(self.cfg.activation)(pre)
        post = rec("mlp.post", layer, post)
        return mlp.W_out(post)                                             # [B, n, d]

    # ------------------------------------------------------------------------------------------
    def to_tail(self, x: Tensor) -> Tensor:
        """``x`` on the device of the final norm and un-embedding (a no-op unless the model was placed)."""
        device = tail_device(self) if is_placed(self) else x.device
        return x if x.device == device else x.to(device)

    def final_logits(self, resid_final: Tensor) -> Tensor:
        """The last two steps of the forward pass: final norm, then un-embedding."""
        resid_final = self.to_tail(resid_final)
        x = self.ln_final(resid_final) if self.ln_final is not None else resid_final
        return self.unembed_step(x)

    def rotary_at(self, positions: Tensor, local: bool = False, rotary_dim: int = 0) -> tuple[Tensor, Tensor] | None:
        """cos, sin for these positions; ``local``: for a layer with the local base (Gemma 3's sliding layers);
        ``rotary_dim``: the layer's rotating dimensions where they differ from the config's (Gemma 4)."""
        cfg = self.cfg
        if cfg.positions != "rotary":
            return None
        dim = rotary_dim or cfg.rotary_dim or cfg.d_head
        if local and cfg.rotary_base_local is not None:
            return rotary_angles(positions, dim, cfg.rotary_base_local)
        return rotary_angles(positions, dim, cfg.rotary_base, cfg.rope or None)

    def rotary_for(self, n: int, device: torch.device | str, layer: int = 0) -> tuple[Tensor, Tensor] | None:
        """The rotary angles block ``layer`` uses for a sequence of n tokens from position 0 (None: a layer
        without rotary positions)."""
        plan = self.cfg.layer(layer)
        return self.rotary_at(torch.arange(n, device=device), plan.local_rope, plan.rotary_dim) if plan.rotary else None

    def num_parameters(self) -> int:
        seen, total = set(), 0
        for p in self.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        return total
