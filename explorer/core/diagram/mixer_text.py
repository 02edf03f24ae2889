"""What the diagram says about a recurrent or convolutional layer (core/mixers/): its box's title and detail lines."""

from __future__ import annotations

from explorer.core.config import ModelConfig

MIXER_TITLES = {"deltanet": "Gated DeltaNet: running memory", "mamba2": "Mamba-2: a selective scan",
                "short_conv": "Short gated convolution"}


def mixer_details(cfg: ModelConfig, layer: int, mixer: str | None = None) -> tuple[str, ...]:
    """What a recurrent or convolutional layer does instead of attention (core/mixers/)."""
    mixer, K = mixer or cfg.layer(layer).mixer, cfg.conv_kernel
    if mixer == "deltanet":
        return (f"{cfg.delta_v_heads} value heads of {cfg.delta_d_v}, {cfg.delta_k_heads} q/k heads of {cfg.delta_d_k}",
                f"q, k, v through a causal convolution of {K} tokens, then SiLU",
                "state S_t = α_t (I − β_t k_t k_tᵀ) S_(t−1) + β_t k_t v_tᵀ; y_t = S_tᵀ q_t",
                "no positions, no mask: the memory carries the order", "out: RMSNorm(y) ⊙ SiLU(z), then W_out")
    if mixer == "mamba2":
        return (f"{cfg.ssm_heads} heads of {cfg.ssm_d_head}, state {cfg.ssm_d_state}, {cfg.ssm_groups} B/C group"
                + ("s" if cfg.ssm_groups > 1 else ""), f"x, B, C through a causal convolution of {K} tokens, then SiLU",
                "S_t = exp(A·Δ_t) S_(t−1) + Δ_t x_t B_tᵀ; y_t = S_t C_t + D x_t",
                "effective attention M = L ⊙ C Bᵀ (decays L)", "out: RMSNorm(y ⊙ SiLU(z)) per group, then W_out")
    return ("B, C, x from one projection", f"y = C ⊙ conv_{K}(B ⊙ x): each channel mixes the last {K} tokens",
            "effective attention: a band of width " + str(K), "then W_out")
