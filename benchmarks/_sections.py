"""The ``--device cuda|cpu --dtype bfloat16|float32`` sections that capture.py, generate.py and ui.py share.

Each section is a model shape at a prompt length; the models are built with ``transformers`` from a
config (random weights, on the device, in the dtype: nothing is read or downloaded) and ours shares
their tensors (``build_model``: no second copy):

=================  ===========================================================================  ======
section            shape                                                                        tokens
=================  ===========================================================================  ======
gpt2-1024          GPT-2 small (12 layers, d_model 768, 12 heads, vocabulary 50,257)            1024
llama1b-1024/8192  Llama-3.2-1B (16 layers, d_model 2048, 32/8 heads, SwiGLU 8192, vocab 128,256, tied)
llama8b-1024/8192  Llama-3.1-8B (32 layers, d_model 4096, 32/8 heads, SwiGLU 14336, vocab 128,256)
smollm2-4096       SmolLM2-135M (30 layers, d_model 576, 9/3 heads, SwiGLU 1536, vocab 49,152, tied)  4096
olmoe-1024         OLMoE-1B-7B, 4 of its 16 layers (d_model 2048, 16 heads, 64 experts of 1024, top 8,  1024
                   vocab 50,304): a mixture of experts on the CPU
qwen3moe-1024      Qwen3-30B-A3B (48 layers, d_model 2048, 32/4 heads of 128, 128 experts of 768, top 8, 1024
                   vocab 151,936): a mixture of experts on a GPU (bfloat16: 61 GB of weights)
qwen35-1024        Qwen3.5-0.8B (24 layers: 18 Gated DeltaNet + 6 gated attention; _hybrid_shapes.py) 1024
gemma4-1024        Gemma-4-E2B (35 layers, sliding/global, KV sharing, per-layer embeddings; idem)     1024
=================  ===========================================================================  ======

The mixtures of experts' transformers baseline runs its default experts kernel (``grouped_mm`` where torch
has it), ours runs each expert on its own tokens (core/moe.py).

(RoPE without the llama3 frequency scaling: the cost is the same, and TransformerLens 3 takes the plain
one.) ``--max-layers N`` and ``--tokens N`` make a *reduced run* (said in every header line) so that the
GPU sections run end to end on a CPU with little memory; their numbers are not the targets' numbers.

TransformerLens runs beside ours where it is installed (a separate venv: it is no dependency), last in
each section, on the same weights: 4.x ``TransformerBridge.run_with_cache`` around the section's
transformers model itself, in TL 4's default mode (no ``enable_compatibility_mode()``; eager attention),
or 3.x ``HookedTransformer.run_with_cache`` on converted, unprocessed weights (_transformerlens.py).
Its logits are checked against transformers' before it is timed; a line says why when it was skipped
(not installed, its cache would not fit) or did not run.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass

import torch
from _hybrid_shapes import ID_LIMITS, build_hybrid
from _hybrid_shapes import SHAPES as HYBRID_SHAPES

CONTEXT_MARGIN = 256  # room after the longest prompt for generate.py's new tokens
GPU_SECTIONS = ["gpt2-1024", "llama1b-1024", "llama1b-8192", "llama8b-1024", "llama8b-8192", "qwen3moe-1024"]
CPU_SECTIONS = ["smollm2-4096", "olmoe-1024"]
SECTIONS = {"gpt2-1024": ("gpt2-small", 1024), "llama1b-1024": ("llama-3.2-1b", 1024),
            "llama1b-8192": ("llama-3.2-1b", 8192), "llama8b-1024": ("llama-3.1-8b", 1024),
            "llama8b-8192": ("llama-3.1-8b", 8192), "smollm2-4096": ("smollm2-135m", 4096),
            "olmoe-1024": ("olmoe-1b-7b", 1024), "qwen3moe-1024": ("qwen3-30b-a3b", 1024),
            "qwen35-1024": ("qwen3.5-0.8b", 1024), "gemma4-1024": ("gemma-4-e2b", 1024)}  # hybrids: CPU
MOE_SHAPES = {  # (transformers' config class, model class, our family, the shape; full layers: the section's)
    "olmoe-1b-7b": ("OlmoeConfig", "OlmoeForCausalLM", "olmoe", 4, dict(
        vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=16,
        num_key_value_heads=16, num_experts=64, num_experts_per_tok=8, rope_theta=10000.0, clip_qkv=None)),
    "qwen3-30b-a3b": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "qwen3_moe", 48, dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=48,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
        norm_topk_prob=True, rope_theta=1000000.0, tie_word_embeddings=False)),
}
LLAMA_SHAPES = {
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0, tie_word_embeddings=True),
    "llama-3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0, tie_word_embeddings=False),
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0, tie_word_embeddings=True),
}


def add_arguments(parser) -> None:
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=None,
                        help="model shape x prompt length sections (default with --device cuda: the GPU ones; "
                             "with --device cpu: the CPU long-prompt one)")
    parser.add_argument("--max-layers", type=int, default=None, help="a reduced run: at most N layers per model")
    parser.add_argument("--tokens", type=int, default=None, help="a reduced run: N tokens instead of the section's")


def wanted(args) -> list[str] | None:
    """The sections to run, or None for the script's own (unchanged) output."""
    if args.sections:
        return args.sections
    if getattr(args, "device_given", False):
        return GPU_SECTIONS if args.device.startswith("cuda") else CPU_SECTIONS
    return None


def device_given(argv: list[str]) -> bool:
    return any(a == "--device" or a.startswith("--device=") for a in argv)


@dataclass
class Section:
    name: str
    shape: str
    tokens: int
    layers: int
    full_layers: int
    full_tokens: int
    device: str
    dtype: torch.dtype
    hf: object
    loaded: object
    id_limit: int | None = None  # prompts drawn below this id (Gemma 4's cut per-layer table)

    @property
    def reduced(self) -> bool:
        return self.layers != self.full_layers or self.tokens != self.full_tokens

    def header(self, what: str) -> str:
        n = sum(p.numel() for p in self.loaded.model.parameters())
        cut = (f"  ** REDUCED RUN: {self.layers} of {self.full_layers} layers, {self.tokens} of {self.full_tokens} "
               "tokens: not the target's numbers **" if self.reduced else "")
        return (f"\n== {what} section {self.name}: {self.shape} shape, {n / 1e6:.0f}M parameters, {self.tokens} tokens, "
                f"{self.device} {str(self.dtype).replace('torch.', '')}, {torch.get_num_threads()} threads, "
                f"load average {os.getloadavg()[0]:.1f} =={cut}")

    def ids(self, n: int | None = None) -> torch.Tensor:
        vocab = self.id_limit or self.loaded.config.vocab_size
        n = n or self.tokens
        return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n)).to(self.device)


def build(name: str, device: str, dtype: torch.dtype, max_layers: int | None = None,
          tokens: int | None = None) -> Section:
    """transformers' model of the section's shape (random weights, built on ``device`` in ``dtype``) and
    ours on the very same tensors."""
    import transformers as tf

    from explorer.core.checkpoint.safe_io import build_model
    from explorer.core.loaded import LoadedModel
    from explorer.core.tokenize.base import VocabTokenizer

    shape, full_tokens = SECTIONS[name]
    n = tokens or full_tokens
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in the dtype: no float32 copy first
    try:
        with torch.device(device):
            if shape in HYBRID_SHAPES:  # Qwen3.5, Gemma 4: through the family's converter (_hybrid_shapes.py)
                full_layers = HYBRID_SHAPES[shape][2]["num_hidden_layers"]
                hf, cfg, weights = build_hybrid(tf, shape, min(full_layers, max_layers or full_layers),
                                                max(1024, n) + CONTEXT_MARGIN)
            elif shape == "gpt2-small":
                from explorer.core.checkpoint.gpt2 import convert_gpt2, gpt2_config

                full_layers = 12
                config = tf.GPT2Config(n_layer=min(full_layers, max_layers or full_layers),
                                       n_positions=max(1024, n) + CONTEXT_MARGIN)
                hf = tf.GPT2LMHeadModel(config).eval()
                cfg = gpt2_config(hf.config.to_dict())
                weights = convert_gpt2(dict(hf.state_dict()), cfg)
            elif shape in MOE_SHAPES:
                from explorer.core.checkpoint.qwen_moe import convert_qwen_moe, qwen_moe_config

                config_name, model_name, family, full_layers, shape_kw = MOE_SHAPES[shape]
                shape_kw = dict(shape_kw, num_hidden_layers=min(full_layers, max_layers or full_layers))
                config = getattr(tf, config_name)(**shape_kw, max_position_embeddings=max(4096, n) + CONTEXT_MARGIN)
                hf = getattr(tf, model_name)(config).eval()
                cfg, _ = qwen_moe_config(hf.config.to_dict(), family)
                weights = convert_qwen_moe(dict(hf.state_dict()), cfg, family)
            else:
                from explorer.core.checkpoint.llama import convert_llama, llama_config

                shape_kw = dict(LLAMA_SHAPES[shape])
                full_layers = shape_kw["num_hidden_layers"]
                shape_kw["num_hidden_layers"] = min(full_layers, max_layers or full_layers)
                config = tf.LlamaConfig(**shape_kw, max_position_embeddings=max(8192, n) + CONTEXT_MARGIN,
                                        rms_norm_eps=1e-5)
                hf = tf.LlamaForCausalLM(config).eval()
                cfg, _ = llama_config(hf.config.to_dict())
                weights = convert_llama(dict(hf.state_dict()), cfg)
    finally:
        torch.set_default_dtype(previous)
    ours = build_model(cfg, {k: v.detach() for k, v in weights.items()}, f"{shape} (random)").eval()
    words = [f"w{i}" for i in range(cfg.vocab_size)]
    loaded = LoadedModel(ours, VocabTokenizer(words, "words", "stand-in words"), f"{shape}-shaped (random)",
                         "benchmark", cfg.arch)
    return Section(name, shape, n, cfg.n_layers, full_layers, full_tokens, device, dtype, hf, loaded,
                   ID_LIMITS.get(shape))


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def best_of(fn, repeats: int, device: str) -> float:
    fn()
    sync(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def interleaved(fns: list, repeats: int, device: str) -> list[float]:
    """Best wall time of each function over ``repeats`` rounds of one call each (after a warm-up round),
    so that a change in the machine's load does not favour one of them."""
    for fn in fns:
        fn()
    sync(device)
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            sync(device)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def transformer_lens_line(section: Section, ids: torch.Tensor, repeats: int,
                          baseline: float | None = None, beside=None) -> tuple[str, float | None]:
    """TransformerLens' run_with_cache on the section's own weights, timed; or why it did not run.

    TransformerLens >= 4: ``TransformerBridge.run_with_cache`` around ``section.hf`` itself (default mode,
    eager attention; see _transformerlens.py), 3.x: ``HookedTransformer.run_with_cache`` on converted
    weights. Its logits are checked against transformers' (eager attention, as the bridge runs it) on
    ``ids`` first, and it is not timed when they differ by more than 1e-3 of the largest logit.
    ``baseline``: transformers' plain forward's seconds, for a ratio in the line. ``beside``: (a forward
    the bridge leaves alone, e.g. ours plain, its seconds in the rounds with ``baseline``), timed again in
    TransformerLens' rounds and printed with both times: it shows whether the conditions (the machine's
    load) changed between the rounds.
    Call it last for a section: the bridge wraps ``section.hf`` in place and its attention becomes eager.
    """
    import _transformerlens as tlh

    v = tlh.version()
    if v is None:
        return ("  TransformerLens: not installed here (a separate venv with pip install transformer-lens, "
                "4.x or 3.x): skipped"), None
    api = "TransformerBridge.run_with_cache" if tlh.is_bridge(v) else "HookedTransformer.run_with_cache"
    if section.shape in HYBRID_SHAPES and not tlh.is_bridge(v):
        return f"  TransformerLens {v} {api}: skipped, 3.x has no adapter for the {section.shape} shape", None
    c = section.loaded.config
    n = ids.shape[1]
    if section.shape in MOE_SHAPES and not tlh.is_bridge(v):
        return f"  TransformerLens {v} {api}: this script converts no mixture of experts for 3.x: skipped", None
    if tlh.is_bridge(v):  # every hook point (measured): per layer ~13 d_model-wide and 3 d_ff-wide tensors
        per_token = c.n_layers * (c.n_heads * n * 2 + 13 * c.d_model + 3 * c.d_ff)
    else:
        per_token = c.n_layers * (c.n_heads * n * 2 + 12 * c.d_model + 2 * c.d_ff)
    per_token += 2 * c.vocab_size  # its logits and transformers' (the check)
    cache_bytes = n * per_token * section.dtype.itemsize
    room = _free_memory(section.device)
    if cache_bytes > room * 2 // 3:  # a third left for the rest of the process and the machine
        return (f"  TransformerLens {v} {api}: skipped, its cache (every hook point, every head's scores and "
                f"pattern, the logits: {cache_bytes / 2**30:.1f} GB) would not fit in 2/3 of the "
                f"{room / 2**30:.1f} GB free here"), None
    tl = None
    try:
        section.hf.set_attn_implementation("eager")
        with torch.inference_mode():
            reference = section.hf(ids).logits
        if tlh.is_bridge(v):
            tl = tlh.bridge(section.hf, f"random-{section.shape}")
        else:
            dims = dict(d_model=c.d_model, d_head=c.d_head, n_heads=c.n_heads, n_layers=c.n_layers,
                        d_vocab=c.vocab_size, d_mlp=c.d_ff)
            llama = section.shape != "gpt2-small"
            if llama:
                dims["n_key_value_heads"] = c.n_kv_heads
            tl = tlh.hooked_transformer(section.hf, llama, dims, max(c.n_ctx, n), section.device, section.dtype,
                                        rotary_base=float(c.rotary_base or 10000.0))
        with torch.inference_mode():
            logits, cache = tl.run_with_cache(ids)
            diff, scale = _max_abs_diff(logits, reference), float(reference.abs().max())
            logits = cache = reference = None
        same = f"logits max |diff| {diff:.1e} vs transformers' ({diff / scale:.0e} of the largest)"
        if not diff <= 1e-3 * scale:
            return f"  TransformerLens {v} {api}: not timed, {same}: not the same model", None
        with torch.inference_mode():
            if beside is None:
                seconds = best_of(lambda: tl.run_with_cache(ids), repeats, section.device)
            else:
                seconds, now = interleaved([lambda: tl.run_with_cache(ids), beside[0]], repeats, section.device)
        ratio = f"   ratio to transformers' forward {seconds / baseline:5.2f}" if baseline else ""
        if beside is not None:
            ratio += f" (ours plain beside it {now:.3f}s, {beside[1]:.3f}s beside transformers')"
        mode = " (default mode, eager attention)" if tlh.is_bridge(v) else ""
        return f"  TransformerLens {v} {api}{mode}: {seconds:.3f}s{ratio}; {same}", seconds
    except (RuntimeError, MemoryError, ValueError, AssertionError, TypeError, KeyError, AttributeError,
            NotImplementedError) as exc:  # out of memory, a shape or architecture it refuses
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        return f"  TransformerLens {v} {api} did not run: {type(exc).__name__}: {first}", None
    finally:
        tl = None
        release(section.device)


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor, rows: int = 512) -> float:
    """max |a - b| over [1, n, vocab] logits, a few positions at a time in float32 (no full-size copy)."""
    worst = 0.0
    for i in range(0, a.shape[1], rows):
        worst = max(worst, float((a[:, i:i + rows].float() - b[:, i:i + rows].float()).abs().max()))
    return worst


def _free_memory(device: str) -> int:
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info()[0])
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 8 * 2**30


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def release(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def peak_line(device: str) -> str:
    if device.startswith("cuda"):
        return f"  peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GB"
    return ""
