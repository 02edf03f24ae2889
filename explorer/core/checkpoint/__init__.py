"""Loading checkpoints without executing anything from them.

Weights come from safetensors files, or from ``pytorch_model.bin`` through
``torch.load(..., weights_only=True)``, which refuses any pickled object that is not a tensor or
a plain container. Every tensor is checked by name and shape against the model the config
describes before anything is assigned, and every failure is a ``CheckpointError`` whose message
names the file, the tensor and the shapes.

Formats:

* native: a directory with ``config.json`` (``"format": "transformer-explorer"``, the model
  configuration and a tokenizer description), ``model.safetensors`` and the tokenizer's files;
* Hugging Face directories, dispatched on ``config.json``'s ``model_type`` (``HF_LOADERS``);
* built-in names: ``worked-example`` and each directory under ``models/``.
"""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from explorer.core import worked_example
from explorer.core.config import ModelConfig
from explorer.core.device import resolve_device, resolve_dtype
from explorer.core.errors import CheckpointError, PromptError
from explorer.core.model import Transformer
from explorer.core.paths import models_dir
from explorer.core.tokenize.bpe import save_ranks
from explorer.core.tokenize.base import Tokenizer, gpt2_style_tokenizer, gpt2_tokenizer, tokenizer_from_description
from explorer.core.trace import CaptureSpec, Trace, capture

NATIVE_FORMAT = "transformer-explorer"
DEFAULT_MODEL = "shakespeare"


@dataclass
class LoadedModel:
    """A model ready to run, with its tokenizer and where it came from."""

    model: Transformer
    tokenizer: Tokenizer
    name: str
    source: str
    arch: str
    notes: list[str] = field(default_factory=list)  # what the user should know: caps, stand-ins

    @property
    def config(self) -> ModelConfig:
        return self.model.cfg

    @property
    def n_params(self) -> int:
        return self.model.num_parameters()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def encode(self, text: str) -> tuple[list[int], int | None]:
        """Token ids of ``text``, cut to the context length; the second value is the uncut count if cut."""
        if not text:
            raise PromptError("the prompt is empty: type some text to analyse")
        ids = self.tokenizer.encode(text)
        if not ids:
            raise PromptError("the prompt has no tokens in this model's vocabulary")
        if len(ids) > self.config.n_ctx:
            return ids[: self.config.n_ctx], len(ids)
        return ids, None

    def trace(self, text: str, spec: CaptureSpec | None = None) -> Trace:
        ids, truncated_from = self.encode(text)
        return self.trace_ids(ids, spec, truncated_from)

    def trace_ids(self, ids: list[int], spec: CaptureSpec | None = None, truncated_from: int | None = None) -> Trace:
        trace, _ = capture(self.model, ids, self.tokenizer.displays(ids), spec, self.name, truncated_from)
        return trace

    def info(self) -> dict[str, Any]:
        cfg = self.config
        return {"name": self.name, "source": self.source, "architecture": self.arch, "description": cfg.describe(),
                "parameters": self.n_params, "vocabulary": f"{self.tokenizer.vocab_size} ({self.tokenizer.name})",
                "context_length": cfg.n_ctx, "device": str(self.device),
                "dtype": str(self.dtype).replace("torch.", ""), **({"notes": " ".join(self.notes)} if self.notes else {})}


# --- reading files safely --------------------------------------------------------------------

def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing {path.name} in {path.parent}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} should hold a JSON object")
    return data


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{path.name} is not a valid safetensors file ({exc})") from None


def refusal_reason(exc: Exception) -> str:
    """The informative line of torch.load's refusal (which global it met), without its advice or colours."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(exc).splitlines()]
    advice = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [line for line in lines if line and not line.startswith(advice)]
    named = [line for line in lines if "GLOBAL" in line or "global" in line]
    return ((named or lines or [type(exc).__name__])[0])[:200]


def read_torch_weights(path: Path) -> dict[str, torch.Tensor]:
    """A pickled state dict, through the restricted unpickler only: code in the file cannot run."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, ValueError, TypeError) as exc:
        raise CheckpointError(f"refused to load {path.name}: it is not a plain tensor file, and loading it "
                              f"could run code ({refusal_reason(exc)})") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path.name} does not hold a dictionary of tensors")
    return data


def read_sharded(index: Path, read: Callable[[Path], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The tensors of a sharded checkpoint: its ``*.index.json`` names the shard file of every tensor."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index.name} has no 'weight_map' of tensor names to shard files")
    shards = sorted(set(weight_map.values()), key=str)
    for shard in shards:  # plain file names in the same directory only
        if not isinstance(shard, str) or Path(shard).name != shard or shard in (".", ".."):
            raise CheckpointError(f"{index.name} names a shard outside its directory: {shard!r}")
    weights: dict[str, torch.Tensor] = {}
    for shard in shards:
        if not (index.parent / shard).is_file():
            raise CheckpointError(f"{index.name} names shard {shard}, which is missing from {index.parent}")
        weights.update(read(index.parent / shard))
    missing = [name for name in weight_map if name not in weights]
    if missing:
        raise CheckpointError(f"{index.name} lists tensors that its shards lack: {', '.join(missing[:6])}")
    return weights


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").is_file():
        return read_safetensors(directory / "model.safetensors")
    if (directory / "model.safetensors.index.json").is_file():
        return read_sharded(directory / "model.safetensors.index.json", read_safetensors)
    if (directory / "pytorch_model.bin").is_file():
        return read_torch_weights(directory / "pytorch_model.bin")
    if (directory / "pytorch_model.bin.index.json").is_file():
        return read_sharded(directory / "pytorch_model.bin.index.json", read_torch_weights)
    raise CheckpointError(f"no weights in {directory}: expected model.safetensors, pytorch_model.bin "
                          "or a sharded model.safetensors.index.json")


def assign_weights(model: Transformer, weights: dict[str, torch.Tensor], source: str) -> None:
    """Copy ``weights`` into ``model`` after checking that the names and shapes are exactly the expected ones."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in weights]
    extra = [k for k in weights if k not in expected]
    if missing:
        raise CheckpointError(f"{source}: missing tensors: {', '.join(missing[:6])}" + (" ..." if len(missing) > 6 else ""))
    if extra:
        raise CheckpointError(f"{source}: unexpected tensors: {', '.join(extra[:6])}" + (" ..." if len(extra) > 6 else ""))
    for name, tensor in weights.items():
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{source}: {name} is not a tensor")
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{source}: tensor {name} has shape {tuple(tensor.shape)}, "
                                  f"the config implies {tuple(expected[name].shape)}")
        if not tensor.is_floating_point():
            raise CheckpointError(f"{source}: tensor {name} has dtype {tensor.dtype}; weights must be floating point")
    with torch.no_grad():
        for name, param in expected.items():
            param.copy_(weights[name].to(param.dtype))


def _finish(model: Transformer, device: str, dtype: str) -> Transformer:
    dev = resolve_device(device)
    return model.to(device=dev, dtype=resolve_dtype(dtype, dev)).eval()


# --- native format ---------------------------------------------------------------------------

def save_native(model: Transformer, tokenizer: Tokenizer, directory: Path, name: str = "",
                extra: dict[str, Any] | None = None) -> None:
    """Write a native checkpoint: config.json, model.safetensors and the tokenizer's files."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    desc = tokenizer.describe()
    if desc.get("type") == "tiktoken":
        encoding = tokenizer.encoding  # type: ignore[attr-defined]
        save_ranks(encoding._mergeable_ranks, directory / desc.setdefault("ranks_file", "tokenizer.tiktoken"))
        desc["special_tokens"] = dict(encoding._special_tokens)
        desc["pattern"] = encoding._pat_str
    config = {"format": NATIVE_FORMAT, "version": 1, "name": name or directory.name,
              "model": model.cfg.to_dict(), "tokenizer": desc, **(extra or {})}
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:
        state.pop("unembed.weight")  # the same tensor as embed.weight
    save_file(state, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def load_native(directory: Path, config: dict[str, Any], device: str, dtype: str) -> LoadedModel:
    if "model" not in config or "tokenizer" not in config:
        raise CheckpointError(f"{directory / 'config.json'} lacks its 'model' or 'tokenizer' section")
    cfg = ModelConfig.from_dict(config["model"])
    tokenizer = tokenizer_from_description(config["tokenizer"], directory)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise CheckpointError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model only {cfg.vocab_size}")
    model = Transformer(cfg)
    weights = read_weights(directory)
    if cfg.tie_embeddings and "unembed.weight" not in weights and "embed.weight" in weights:
        weights["unembed.weight"] = weights["embed.weight"]
    assign_weights(model, weights, str(directory / "model.safetensors"))
    return LoadedModel(_finish(model, device, dtype), tokenizer, config.get("name", directory.name),
                       str(directory), cfg.arch)


# --- Hugging Face GPT-2 ----------------------------------------------------------------------

_GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def gpt2_config(hf: dict[str, Any]) -> ModelConfig:
    try:
        d, n_head = int(hf["n_embd"]), int(hf["n_head"])
        act = hf.get("activation_function", "gelu_new")
        if act not in _GPT2_ACTIVATIONS:
            raise CheckpointError(f"GPT-2 activation {act!r} is not supported ({', '.join(_GPT2_ACTIVATIONS)})")
        if hf.get("scale_attn_by_inverse_layer_idx") or hf.get("scale_attn_weights") is False:
            raise CheckpointError("this GPT-2 variant scales attention differently; not supported")
        if d % n_head:
            raise CheckpointError(f"n_embd ({d}) is not a multiple of n_head ({n_head})")
        return ModelConfig(arch="gpt2", vocab_size=int(hf["vocab_size"]), n_ctx=int(hf.get("n_positions", hf.get("n_ctx", 1024))),
                           d_model=d, n_layers=int(hf["n_layer"]), n_heads=n_head, d_head=d // n_head,
                           d_ff=int(hf.get("n_inner") or 4 * d), norm="layernorm", norm_placement="pre",
                           norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)), positions="learned",
                           activation=_GPT2_ACTIVATIONS[act], tie_embeddings=bool(hf.get("tie_word_embeddings", True)))
    except KeyError as exc:
        raise CheckpointError(f"GPT-2 config.json lacks {exc}") from None


def convert_gpt2(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Hugging Face GPT-2 tensor names and layout -> ours.

    GPT-2's ``Conv1D`` stores weights as [in, out] (x @ W); ``nn.Linear`` wants [out, in]. The
    layout is read off ``c_attn``'s shape, which differs between the two, and applied to all.
    """
    sd = {k.removeprefix("transformer."): v for k, v in hf.items()
          if not k.endswith((".attn.bias", ".attn.masked_bias"))}  # old causal-mask buffers
    d = cfg.d_model

    def take(name: str) -> torch.Tensor:
        if name not in sd:
            raise CheckpointError(f"GPT-2 checkpoint lacks tensor {name}")
        return sd.pop(name)

    first = sd.get("h.0.attn.c_attn.weight")
    conv1d = first is None or tuple(first.shape) == (d, 3 * d)

    def linear(name: str) -> torch.Tensor:
        w = take(name)
        return w.t().contiguous() if conv1d else w

    out = {"embed.weight": take("wte.weight"), "pos_embed.weight": take("wpe.weight")}
    for i in range(cfg.n_layers):
        p, q = f"h.{i}.", f"blocks.{i}."
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            out[q + ours + ".weight"] = take(p + theirs + ".weight")
            out[q + ours + ".bias"] = take(p + theirs + ".bias")
        w_qkv, b_qkv = linear(p + "attn.c_attn.weight"), take(p + "attn.c_attn.bias")
        if tuple(w_qkv.shape) != (3 * d, d):
            raise CheckpointError(f"tensor h.{i}.attn.c_attn.weight has shape {tuple(w_qkv.shape)}, "
                                  f"the config implies {(d, 3 * d)}")
        for j, name in enumerate(("W_Q", "W_K", "W_V")):
            out[q + f"attn.{name}.weight"] = w_qkv[j * d:(j + 1) * d]
            out[q + f"attn.{name}.bias"] = b_qkv[j * d:(j + 1) * d]
        out[q + "attn.W_O.weight"] = linear(p + "attn.c_proj.weight")
        out[q + "attn.W_O.bias"] = take(p + "attn.c_proj.bias")
        out[q + "mlp.W_in.weight"] = linear(p + "mlp.c_fc.weight")
        out[q + "mlp.W_in.bias"] = take(p + "mlp.c_fc.bias")
        out[q + "mlp.W_out.weight"] = linear(p + "mlp.c_proj.weight")
        out[q + "mlp.W_out.bias"] = take(p + "mlp.c_proj.bias")
    out["ln_final.weight"] = take("ln_f.weight")
    out["ln_final.bias"] = take("ln_f.bias")
    lm_head = sd.pop("lm_head.weight", None)
    out["unembed.weight"] = lm_head if lm_head is not None else out["embed.weight"]
    if sd:
        raise CheckpointError(f"GPT-2 checkpoint has unexpected tensors: {', '.join(sorted(sd)[:6])}")
    return out


def hf_tokenizer(directory: Path, vocab_size: int) -> Tokenizer:
    """The directory's own ``vocab.json`` if present; GPT-2's packaged BPE for a GPT-2-sized vocabulary."""
    if (directory / "vocab.json").is_file():
        return gpt2_style_tokenizer(directory / "vocab.json", name=f"{directory.name} BPE")
    if vocab_size >= 50257:
        return gpt2_tokenizer()
    raise CheckpointError(f"{directory} has no vocab.json and its vocabulary ({vocab_size}) is not GPT-2's")


def load_hf_gpt2(directory: Path, hf: dict[str, Any], device: str, dtype: str) -> LoadedModel:
    cfg = gpt2_config(hf)
    model = Transformer(cfg)
    assign_weights(model, convert_gpt2(read_weights(directory), cfg), str(directory))
    tokenizer = hf_tokenizer(directory, cfg.vocab_size)
    return LoadedModel(_finish(model, device, dtype), tokenizer, directory.name, str(directory), "gpt2")


HF_LOADERS: dict[str, Callable[[Path, dict[str, Any], str, str], LoadedModel]] = {"gpt2": load_hf_gpt2}


# --- entry point -----------------------------------------------------------------------------

def builtin_names() -> list[str]:
    root = models_dir()
    found = sorted(p.name for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []
    return found + [worked_example.NAME]


def default_model_name() -> str:
    names = builtin_names()
    return DEFAULT_MODEL if DEFAULT_MODEL in names else names[0]


def supported_formats() -> str:
    return ("native transformer-explorer directories; Hugging Face directories with model_type "
            + ", ".join(repr(k) for k in HF_LOADERS) + "; nanoGPT ckpt.pt files"
            + f"; built-in models: {', '.join(builtin_names())}")


def load_checkpoint(source: str | Path | None = None, device: str = "auto", dtype: str = "float32") -> LoadedModel:
    """Load a built-in model by name, or a checkpoint directory (or a file inside one)."""
    source = default_model_name() if source is None else source
    if str(source) == worked_example.NAME:
        model, tokenizer = worked_example.build()
        return LoadedModel(_finish(model, device, dtype), tokenizer, worked_example.NAME, "built-in", "worked-example")
    path = Path(source).expanduser()
    if not path.exists() and (models_dir() / str(source)).is_dir():
        path = models_dir() / str(source)
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}; give a directory, a file in one, or a built-in "
                              f"name ({', '.join(builtin_names())})")
    if path.is_file() and path.suffix in nanogpt.SUFFIXES:
        return nanogpt.load_nanogpt(path, device, dtype)
    if path.is_file():
        path = path.parent
    if not (path / "config.json").exists() and (path / "ckpt.pt").is_file():  # a nanoGPT out_dir
        return nanogpt.load_nanogpt(path / "ckpt.pt", device, dtype)
    config = read_json(path / "config.json")
    if config.get("format") == NATIVE_FORMAT:
        return load_native(path, config, device, dtype)
    model_type = config.get("model_type")
    if model_type in HF_LOADERS:
        return HF_LOADERS[model_type](path, config, device, dtype)
    if model_type:
        arch = ", ".join(config.get("architectures") or []) or model_type
        raise CheckpointError(f"unsupported architecture {arch!r} (model_type {model_type!r}); supported: "
                              + supported_formats())
    raise CheckpointError(f"{path / 'config.json'} names no known format; supported: " + supported_formats())


# --- more architectures, in their own modules ------------------------------------------------

from explorer.core.checkpoint import llama as hf_loaders
from explorer.core.checkpoint import nanogpt  # noqa: E402  (they use the helpers above)

HF_LOADERS.update(hf_loaders.LOADERS)
