"""Issue 26's classes of hostile input, added to ``tests/hostile_corpus.py``'s corpus by ``build_more``.

Each case must end in one clean line (as every corpus case), and beyond that: no control character
reaches the terminal (the line is escaped), the line is capped, no bytes of another file appear in
it, and the files listed in ``keep`` are there, byte for byte, afterwards (no data loss).
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file as load_numpy, save_file as save_numpy
from safetensors.torch import save_file

ANSI = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"
SECRET = b"SECRET!!"  # the first 8 bytes of a file a shard is linked to: never in a message
LINE_CAP = 1000


def build_more(root: Path, case, hc) -> list:
    """The cases (``case(name, argv, names, keep=...)`` makes one); ``hc`` is the hostile_corpus module."""
    cases = []

    def add(name, argv, names, keep=None):
        cases.append(case(name, argv, names, keep=keep or {}))

    def info(name, path, names):
        add(name, ["info", "--checkpoint", str(path), "--device", "cpu"], names)

    native = root / "native-ok"

    # safetensors: zero-size tensors whose other sizes overflow 64 bits
    for i, shape in enumerate(([0, 2**62, 2**62], [2**64, 0], [0, 2**40, 2**40, 2**40])):
        path = hc.gpt2_dir(root, f"st26-zero-{i}", hc.gpt2_config(), weights=False)
        hc.safetensors_with_header(path / "model.safetensors", {
            "transformer.wte.weight": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}})
        info(f"weights: zero-size shape {shape}", path, "transformer.wte.weight")

    # BERT sizes of 0
    bert = {"model_type": "bert", "vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 4, "intermediate_size": 48, "max_position_embeddings": 40, "type_vocab_size": 2}
    for key in ("intermediate_size", "type_vocab_size"):
        path = _bert_dir(root / f"bert26-{key}", {**bert, key: 0})
        info(f"config: BERT {key} 0", path, key)

    # RoPE scaling fields out of range or of the wrong type
    yarn = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16}
    rope_cases = {
        "yarn beta_fast -32": {**yarn, "beta_fast": -32},
        "yarn beta_fast 1e308": {**yarn, "beta_fast": 1e308},
        "yarn beta_fast a string": {**yarn, "beta_fast": "32"},
        "yarn mscale a string": {**yarn, "mscale": "x", "mscale_all_dim": 1},
        "yarn attention_factor 'x'": {**yarn, "attention_factor": "x"},
        "dynamic factor 1e308": {"rope_type": "dynamic", "factor": 1e308},
        "longrope factors of the wrong length": {"rope_type": "longrope", "short_factor": [1.0] * 3,
                                                 "long_factor": [2.0] * 3, "original_max_position_embeddings": 8},
    }
    for i, (name, scaling) in enumerate(rope_cases.items()):
        key = name.split()[1] if name.split()[1] != "factor" else "factor"
        key = {"factors": "short_factor", "of": "short_factor"}.get(key, key)
        path = _llama_dir(root / f"rope26-{i}", hc.llama_config(rope_scaling=scaling))
        info(f"config: RoPE {name}", path, key)

    # trace files with bad metadata
    trace_file = _trace_file(root, native)
    for name, change, names in (
            ("truncated_from 'abc'", {"truncated_from": "abc"}, "truncated_from"),
            ("token ids that are strings", {"token_ids": json.dumps(["a", "b", "c"])}, "token_ids"),
            ("token id 2**70", {"token_ids": json.dumps([2**70, 1, 2])}, "token_ids"),
            ("token_ids not JSON", {"token_ids": "[1, 2"}, "trace"),
            ("config not a config", {"config": json.dumps({"d_model": "x"})}, "trace")):
        add(f"trace file: {name}", ["trace", str(_with_metadata(trace_file, root / f"trace26-{len(cases)}.safetensors",
                                                                 change))], names)
    only_meta = root / "trace26-only-metadata.safetensors"
    meta = _metadata(trace_file)
    save_numpy({"tokens": np.zeros((1, 3), np.int64)}, str(only_meta), metadata=meta)
    add("trace file: metadata without tensors", ["trace", str(only_meta)], "no traced tensors")

    # the command line: numbers out of range
    out = root / "cli26-out"
    patch = ["patch", "-c", str(native), "--device", "cpu", "--clean", "abc", "--corrupt", "abd", "--target", "a",
             "-o", str(out)]
    add("patch: --batch-size 0", [*patch, "--batch-size", "0"], "batch size")
    add("patch: --position 10**20", [*patch, "--position", str(10**20)], "position")
    add("train: --threads 100000", ["train", "induction", "--threads", "100000", "--out", str(root / "t26")],
        "--threads")
    a_file = root / "train26-out-file"
    a_file.write_text("mine")
    add("train: --out an existing file", ["train", "induction", "--steps", "1", "--out", str(a_file)], a_file.name,
        keep={str(a_file): b"mine"})

    # the API given what is not a path or ids
    for value in ("5", "b'x'", "[1]"):
        add(f"API load_checkpoint({value})", ["api-obj", value], "not a")
    for ids in ("[10**9]", "[1.7]", "['a']", "[2**70]"):
        add(f"API trace_ids({ids})", ["ids", str(native), ids], "token id")

    # untrusted text in messages
    tensors = hc.gpt2_tensors()
    tensors[ANSI + "evil"] = torch.zeros(1)
    path = hc.gpt2_dir(root, "text26-ansi", hc.gpt2_config(), tensors)
    info("text: a tensor named with ANSI escapes", path, "unexpected tensors")
    tensors = hc.gpt2_tensors()
    tensors["x" * 1_000_000] = torch.zeros(1)
    path = hc.gpt2_dir(root, "text26-long", hc.gpt2_config(), tensors)
    info("text: a tensor with a 1 MB name", path, "unexpected tensors")
    path = hc.config_dir(root, "text26-new\nline\rname" + ANSI, {"model_type": "gpt2", "n_layer": None})
    info("text: a path with newlines and escapes", path, "config.json")
    path = hc.gpt2_dir(root, "text26-shard", hc.gpt2_config(), weights=False)
    secret = root / "thesis-secret.txt"
    secret.write_bytes(SECRET + b" the rest of somebody's file")
    (path / "model-00001-of-00001.safetensors").symlink_to(secret)
    (path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"transformer.wte.weight": "model-00001-of-00001.safetensors"}}))
    info("text: a shard linked to another file", path, "model-00001-of-00001.safetensors")

    # exports into folders with the user's files
    home = root / "export26-thesis"
    home.mkdir()
    mine = {"thesis.tex": b"\\section{mine}", "data.csv": b"a,b\n1,2\n", "trace.npz": b"from File > Export trace"}
    for name, data in mine.items():
        (home / name).write_bytes(data)
    add("export: a folder with a bare trace.npz and the user's files",
        ["export", "-c", str(native), "--device", "cpu", "-p", "abc", "-o", str(home)], "not an earlier export",
        keep={str(home / k): v for k, v in mine.items()})
    hidden = root / "export26-glob" / ".config.old-backup" / "settings"
    hidden.parent.mkdir(parents=True)
    hidden.write_bytes(b"mine")
    (root / "export26-glob" / "notes.txt").write_bytes(b"mine")
    add("export: a glob name beside the user's hidden folders",
        ["export", "-c", str(native), "--device", "cpu", "-p", "abc", "-o", str(root / "export26-glob")],
        "not an earlier export", keep={str(hidden): b"mine", str(root / "export26-glob" / "notes.txt"): b"mine"})

    # pickles: a deflated NONE/POP bomb
    path = root / "bin26-bomb"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(hc.gpt2_config()))
    with zipfile.ZipFile(path / "pytorch_model.bin", "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02" + b"N0" * (30 * 2**20) + b"}.", compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("archive/version", "3\n")
    info("pytorch_model.bin: a deflated NONE/POP bomb", path, "decompression bomb")
    return cases


def _bert_dir(path: Path, config: dict) -> Path:
    """A BERT whose weights match its (broken) config: transformers builds it, sizes of 0 and all."""
    import transformers

    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**{k: v for k, v in config.items()
                                                                      if k != "model_type"}))
    model.save_pretrained(path)
    return path


def _llama_dir(path: Path, config: dict) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file({"model.embed_tokens.weight": torch.zeros(64, 16)}, str(path / "model.safetensors"))
    return path


def _trace_file(root: Path, native: Path) -> Path:
    from explorer.core.checkpoint import load_checkpoint
    from explorer.core.interop import write_trace_safetensors

    loaded = load_checkpoint(native, device="cpu")
    return write_trace_safetensors(loaded.trace("abc"), root / "trace26-ok.safetensors", "abc")


def _metadata(path: Path) -> dict[str, str]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))["__metadata__"]


def _with_metadata(source: Path, target: Path, change: dict[str, str]) -> Path:
    save_numpy(load_numpy(str(source)), str(target), metadata={**_metadata(source), **change})
    return target


def run_kind(argv: list[str]) -> int | None:
    """The child's part for this module's kinds of case (None: not one of them)."""
    import sys

    from explorer.core.errors import ExplorerError

    kind = argv[0]
    if kind not in ("api-obj", "ids", "trace"):
        return None
    try:
        if kind == "api-obj":
            from explorer.core.checkpoint import load_checkpoint

            load_checkpoint(eval(argv[1]), device="cpu")  # noqa: S307 - the corpus' own literals
        elif kind == "ids":
            from explorer.core.checkpoint import load_checkpoint

            load_checkpoint(argv[1], device="cpu").trace_ids(eval(argv[2]))  # noqa: S307
        else:
            from explorer.core.interop import read_trace_safetensors

            read_trace_safetensors(argv[1])
    except ExplorerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def extra_problem(case, stderr: str) -> str | None:
    """What this issue adds to a clean line: escaped, capped, nothing of another file, nothing lost."""
    if any(c in stderr for c in "\x1b\x07\r"):
        return "a control character reached the terminal"
    if any(len(line) > LINE_CAP for line in stderr.splitlines()):
        return f"a line over {LINE_CAP} characters"
    if SECRET.decode() in stderr or str(struct.unpack("<Q", SECRET)[0]) in stderr.replace(",", ""):
        return "bytes of another file in the message"
    for path, data in getattr(case, "keep", {}).items():
        if not Path(path).is_file() or Path(path).read_bytes() != data:
            return f"data loss: {os.path.basename(path)} changed or went"
    return None
