"""What ``verify`` checks a GGUF file against: ``transformers``' own GGUF loading of the same file.

The reference is ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, local_files_only=True)``
(never ``trust_remote_code``), run eager on the same token ids, and its tokenizer
``AutoTokenizer.from_pretrained(folder, gguf_file=name)``. The file is found as our loader finds it: a
``*.gguf`` path, a file with the GGUF magic (an Ollama blob), a folder holding one GGUF model, an Ollama
or LM Studio model name. Its header is read and checked by our own reader (``gguf_validate``) before
transformers opens it; an architecture transformers does not read from GGUF, or a file transformers
reads as a different model (``reference.gguf_reference_gap``), is refused with one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from explorer.core.errors import CheckpointError, VerifyRefused

GGUF_SUFFIXES = (".gguf",)
# architectures transformers' GGUF loading knows under another name (it renames them as it reads the file)
TRANSFORMERS_NAMES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss"}
INSTALL_GGUF = ("transformers needs accelerate to read a GGUF file, and it is not installed: "
                "pip install 'transformer-explorer[verify]'")


def gguf_target(text: str, path: Path) -> Path | None:
    """The GGUF file ``verify`` was given (by path, folder or local model name), or None: not a GGUF model."""
    from explorer.core.checkpoint import local_stores
    from explorer.core.checkpoint.gguf_validate import is_gguf

    if not path.exists():
        local = local_stores.resolve(text)
        return None if local is None else local.path
    if path.is_file():
        return path if path.suffix.lower() in GGUF_SUFFIXES or is_gguf(path) else None
    if path.is_dir() and not (path / "config.json").exists() and (found := local_stores.gguf_files(path)):
        if len(found) > 1:
            raise VerifyRefused(f"{path} holds {len(found)} GGUF files; verify one of them: "
                                + ", ".join(p.name for p in found[:8]) + (" ..." if len(found) > 8 else ""))
        return found[0]
    return None


def supported_architectures(transformers: Any) -> list[str]:
    """The GGUF ``general.architecture`` values transformers reads (empty: this transformers reads no GGUF)."""
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:
        return []
    return [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]


def gguf_reference(file: Path, transformers: Any) -> dict[str, Any]:
    """The file's ``config.json``-style configuration, or ``VerifyRefused`` saying why transformers cannot
    be the reference for it (after our own reader has checked the header)."""
    from explorer.core.checkpoint.gguf_config import architecture, hf_config
    from explorer.core.checkpoint.gguf_validate import read_header
    from explorer.core.checkpoint.reference import gguf_reference_gap

    try:
        header = read_header(file)
        arch, spec = architecture(header)
        hf = hf_config(header)
    except CheckpointError as exc:
        raise VerifyRefused(str(exc)) from None
    _needs_accelerate()
    supported = supported_architectures(transformers)
    if arch not in supported and TRANSFORMERS_NAMES.get(arch) not in supported:
        raise VerifyRefused(f"{file}: transformers {transformers.__version__} does not read GGUF architecture "
                            f"{arch!r} (it reads " + (", ".join(supported) or "no GGUF files") + ")")
    gap = gguf_reference_gap(header, arch, spec, hf)
    if gap:
        raise VerifyRefused(f"{file}: {gap}")
    return hf


def _needs_accelerate() -> None:
    """transformers refuses a GGUF file without accelerate, but only once our model has loaded (minutes for a
    real one): say so at once (``[verify]`` installs it)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("accelerate") is not None
    except (ImportError, ValueError):  # a stub module without a spec (tests), or a broken install
        found = False
    if not found:
        raise VerifyRefused(INSTALL_GGUF)
