"""Issue 34's classes of hostile input, added to ``tests/hostile_corpus.py``'s corpus by ``build_safety``.

Each case ends in one clean line; beyond that, the files in ``keep`` are there byte for byte afterwards and
those in ``absent`` were not made (no data loss, nothing written through a link). The classes: exports into
folders with a planted journal, links out and the user's folders under our reserved names; ``train --out``
over a model folder and impossible seeds; ``--offload-dir`` that does not exist; ``--max-memory`` naming
devices this machine lacks or impossible sizes; ``features --top`` below 1; ``compare`` against a model that
outputs NaN (a warning naming model B, exit 0); a trace file with a 10 MB prompt and a 50 MB model name
(read in bounded time, cut with notes); GGUF tensors re-typed to a smaller type and a vocabulary declared as
the other kind; the Python API given arguments of the wrong type.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from pathlib import Path

import torch

JOURNAL = ".explorer-export-journal.json"
BACKUP = ".explorer-export-previous"


def build_safety(root: Path, case, hc) -> list:
    """The cases (``case(name, argv, names, keep=..., absent=..., exit_ok=...)``); ``hc``: hostile_corpus."""
    cases = []
    native = root / "native-ok"

    def add(name, argv, names, keep=None, absent=(), exit_ok=2):
        cases.append(case(name, argv, names, keep=keep or {}, absent=[str(a) for a in absent], exit_ok=exit_ok))

    def export(name, folder: Path, names: str, keep: dict, absent=()):
        add(f"export: {name}", ["export", "-c", str(native), "--device", "cpu", "-p", "abc", "-o", str(folder)], names,
            keep, absent)

    # exports: recovery only where an export of ours is
    outside = root / "s34-home"
    outside.mkdir()
    thesis = outside / "thesis.tex"
    thesis.write_bytes(b"\\section{years of work}")
    (outside / "evil").mkdir()
    (outside / "evil" / "data.csv").write_bytes(b"planted")
    received = root / "s34-received"
    received.mkdir()
    (received / "data.csv").write_bytes(b"a,b\n1,2\n")
    (received / "notes.md").write_bytes(b"mine")
    (received / "thesis-link.tex").symlink_to(thesis)
    (received / BACKUP).symlink_to(outside / "evil")
    (received / JOURNAL).write_text(json.dumps({"old": ["data.csv"], "new": ["notes.md", "thesis-link.tex"],
                                                "new_dirs": []}))
    export("a journal planted in a received folder, links out of it", received, "not from an export of ours",
           {str(thesis): thesis.read_bytes(), str(received / "data.csv"): b"a,b\n1,2\n",
            str(received / "notes.md"): b"mine", str(outside / "evil" / "data.csv"): b"planted"})
    planted = root / "s34-planted"
    planted.mkdir()
    (planted / "results.csv").write_bytes(b"1,2")
    (planted / "results-link.csv").symlink_to(thesis)
    (planted / JOURNAL).write_text(json.dumps({"old": [], "new": ["results.csv", "results-link.csv"], "new_dirs": []}))
    export("a journal planted beside the user's files", planted, "not from an interrupted export of ours",
           {str(planted / "results.csv"): b"1,2", str(thesis): thesis.read_bytes()})
    forged = _export_of_ours(root / "s34-forged", native)
    (forged / BACKUP).mkdir()
    (forged / BACKUP / ".explorer-export-backup").write_text("abc")
    (forged / JOURNAL).write_text(json.dumps({"format": "transformer-explorer export journal", "id": "abc",
                                              "old": [], "new": ["../s34-home/thesis.tex"], "new_dirs": []}))
    export("a forged journal of our format naming a file outside", forged, "outside its folder",
           {str(thesis): thesis.read_bytes()})
    mine = _export_of_ours(root / "s34-users-backup", native)
    (mine / BACKUP).mkdir()
    (mine / BACKUP / "my-backup.txt").write_bytes(b"mine")
    export("a user's .explorer-export-previous in an export", mine, BACKUP,
           {str(mine / BACKUP / "my-backup.txt"): b"mine"})
    only = root / "s34-only-reserved"
    (only / BACKUP).mkdir(parents=True)
    (only / BACKUP / "notes.txt").write_bytes(b"mine")
    export("a folder holding only a user's .explorer-export-previous", only, BACKUP,
           {str(only / BACKUP / "notes.txt"): b"mine"}, [only / "trace.npz"])
    staged = root / "s34-staged"
    (staged / ".explorer-export-staging-copy").mkdir(parents=True)
    (staged / ".explorer-export-staging-copy" / ".explorer-export-staging").write_bytes(b"")
    (staged / ".explorer-export-staging-copy" / "figure.svg").write_bytes(b"<svg/>")
    (staged / "data.csv").write_bytes(b"1,2")
    export("a user's marked staging folder beside their files", staged, "not an earlier export",
           {str(staged / ".explorer-export-staging-copy" / "figure.svg"): b"<svg/>", str(staged / "data.csv"): b"1,2"})
    linked = root / "s34-linked-manifest"
    linked.mkdir()
    (outside / "manifest.json").write_bytes(b'{"format": "transformer-explorer export", "files": ["../x"]}')
    (linked / "export-manifest.json").symlink_to(outside / "manifest.json")
    export("a manifest that is a link out of the folder", linked, "export manifest",
           {str(outside / "manifest.json"): (outside / "manifest.json").read_bytes()})

    # train: never over a folder it did not write, the seed checked first
    model = hc.gpt2_dir(root, "s34-hub-model")
    (model / "README.md").write_bytes(b"the model card")
    cache = _corpus_cache(root / "s34-cache")  # prepared: nothing is downloaded, even by a train that would run
    add("train: --out over a downloaded model folder",
        ["train", "induction", "--steps", "1", "--threads", "1", "--cache", str(cache), "--out", str(model)], "--out",
        {str(p): p.read_bytes() for p in model.iterdir()}, [model / ".explorer-train.json"])
    for seed in ("-1", str(2**70)):
        add(f"train: --seed {seed}", ["train", "induction", "--seed", seed, "--steps", "1", "--threads", "1",
                                      "--cache", str(cache), "--out", str(root / "s34-train-out")], "--seed",
            absent=[root / "s34-train-out"])

    # placement: devices and folders this machine does not have
    llama = _llama_dir(root / "s34-llama", hc)
    missing = root / "s34-typo" / "offload"
    add("info: --offload-dir that does not exist", ["info", "-c", str(llama), "--device-map", "sequential",
                                                    "--max-memory", "cpu=1KB", "--offload-dir", str(missing)],
        "--offload-dir", absent=[root / "s34-typo"])
    many = ",".join(f"cuda:{i}=1GiB" for i in range(200))
    for value, names in (("cuda:7=1GiB", "cuda:7"), ("mps=1GiB", "mps"), ("disk=1GiB", "disk"),
                         ("cpu=1e400GiB", "--max-memory"), (many, "cuda:0")):
        add(f"info: --max-memory {value[:40]}", ["info", "-c", str(llama), "--max-memory", value], names)

    # features --top below 1; patching with an empty corrupted prompt
    for top in ("0", "-1"):
        add(f"features: --top {top}", ["features", "-c", str(native), "--device", "cpu", "--sae", str(root),
                                       "-p", "abc", "-o", str(root / "s34-features"), "--top", top], "--top",
            absent=[root / "s34-features"])
    add("patch: an empty corrupted prompt", ["patch", "-c", str(native), "--device", "cpu", "--clean", "abc",
                                             "--corrupt", "", "--target", "a", "-o", str(root / "s34-patch")],
        "prompts", absent=[root / "s34-patch"])

    # compare: a model that outputs NaN is named, never "agrees"
    nan_model = root / "s34-nan"
    shutil.copytree(native, nan_model)
    _nan_weights(nan_model)
    add("compare: against a model that outputs NaN", ["compare-nan", str(native), str(nan_model),
                                                      str(root / "s34-compare")], "model B", exit_ok=0)

    # text from files: a 10 MB prompt and a 50 MB model name in a trace file
    add("trace file: a 10 MB prompt and a 50 MB model name", ["trace-text", str(_big_text_trace(root, native))],
        "10,000,000 characters", exit_ok=0)

    # GGUF: a type smaller than its data, a vocabulary declared as the other kind
    gguf = _gguf(root)
    if gguf is not None:
        add("gguf: an F32 tensor re-typed as F16", ["info", "-c", str(_retyped(gguf, root, 1)), "--device", "cpu"],
            "does not match its data")
        add("gguf: an F32 tensor re-typed as Q8_0", ["info", "-c", str(_retyped(gguf, root, 8)), "--device", "cpu"],
            "does not match its data")
        add("gguf: a BPE vocabulary declared SentencePiece", ["api-notes", str(_mislabelled(root))], "says 'llama'",
            exit_ok=0)

    # the Python API given arguments of the wrong type
    for expression, names in API_CALLS.items():
        add(f"API {expression}", ["api-call", str(native), expression], names)
    return cases


API_CALLS = {
    "m.trace(5)": "text", "m.encode(None)": "text", "m.trace('abc', spec='x')": "spec",
    "m.trace_ids([1, 2], cancel=5)": "cancel", "api.generate('m', 'abc')": "loaded", "api.generate(m, 5)": "prompt",
    "api.generate(m, [1.5])": "token id", "api.generate(m, 'abc', {'temperature': 0})": "params",
    "api.generate(m, 'abc', on_step=5)": "on_step", "api.SamplingParams(temperature='hot')": "temperature",
    "api.CaptureSpec(kinds='resid')": "kinds", "api.Placement(max_memory={'cpu': 'x'})": "max-memory",
    "m.trace('abc')[5]": "keys", "api.write_trace_safetensors('x', 'f')": "trace",
    "api.read_trace_safetensors(None)": "path", "api.save_native('m', m.tokenizer, 'n')": "model",
    "api.activation_patching(m, [1, 2], [2, 2], 1)": "model",
    "api.direct_logit_attribution(m.trace('abc'), 'x')": "target", "api.open_sae(5, m.config)": "directory",
    "api.feature_intervention(5, 1)": "sae", "api.load_checkpoint('worked-example', placement='auto')": "placement",
}


def _export_of_ours(folder: Path, native: Path) -> Path:
    from explorer.cli import main

    import contextlib

    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        assert main(["export", "-c", str(native), "--device", "cpu", "-p", "abc", "-o", str(folder)]) == 0
    return folder


def _corpus_cache(cache: Path) -> Path:
    """A prepared training corpus (random words in four 'plays'): train finds it and downloads nothing."""
    import random

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))) for _ in range(300)]
    plays = ["\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(60)) for _ in range(4)]
    cache.mkdir()
    (cache / "shakespeare.txt").write_text("\n\n\n".join(plays), encoding="utf-8")
    return cache


def _llama_dir(path: Path, hc) -> Path:
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(hc.llama_config()))
    cfg = hc.llama_config()
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = d // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    t = {"model.embed_tokens.weight": torch.randn(v, d), "model.norm.weight": torch.ones(d),
         "lm_head.weight": torch.randn(v, d)}
    p = "model.layers.0."
    t.update({p + "input_layernorm.weight": torch.ones(d), p + "post_attention_layernorm.weight": torch.ones(d),
              p + "self_attn.q_proj.weight": torch.randn(d, d), p + "self_attn.k_proj.weight": torch.randn(kv, d),
              p + "self_attn.v_proj.weight": torch.randn(kv, d), p + "self_attn.o_proj.weight": torch.randn(d, d),
              p + "mlp.gate_proj.weight": torch.randn(f, d), p + "mlp.up_proj.weight": torch.randn(f, d),
              p + "mlp.down_proj.weight": torch.randn(d, f)})
    save_file(t, str(path / "model.safetensors"))
    return path


def _nan_weights(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(folder / "model.safetensors"))
    name = next(k for k in weights if k.endswith("W_out.weight"))
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, str(folder / "model.safetensors"))


def _big_text_trace(root: Path, native: Path) -> Path:
    from safetensors.numpy import load_file, save_file

    from explorer.core.checkpoint import load_checkpoint
    from explorer.core.interop import write_trace_safetensors

    path = write_trace_safetensors(load_checkpoint(native, device="cpu").trace("abc"), root / "s34-t.safetensors",
                                   "abc")
    with open(path, "rb") as f:
        meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]
    big = root / "s34-big-text.safetensors"
    save_file(load_file(str(path)), str(big), metadata={**meta, "prompt": "p" * 10_000_000,
                                                        "model_name": "N" * 50_000_000})
    return big


def _gguf(root: Path) -> Path | None:
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent / "core"))
        from decoder_reference import build
        from gguf_files import write_model
    except ImportError:  # gguf or transformers missing: these cases need both to write the file
        return None
    return write_model(build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2), root / "s34-valid.gguf",
                       "llama", "F32")


def _retyped(valid: Path, root: Path, type_id: int) -> Path:
    data = valid.read_bytes()
    name = b"token_embd.weight"
    at = data.find(name) + len(name) + 4 + 16  # after n_dims (u32) and two dims (u64): the type (u32)
    path = root / f"s34-retyped-{type_id}.gguf"
    path.write_bytes(data[:at] + struct.pack("<I", type_id) + data[at + 4:])
    return path


def _mislabelled(root: Path) -> Path:
    """A model whose GGUF vocabulary is GPT-2's byte-level BPE, declared SentencePiece ('llama')."""
    from decoder_reference import build
    from gguf_files import write_model
    from gpt2_files import gpt2_vocab_and_merges

    encoder, merges = gpt2_vocab_and_merges()
    tokens = [t for t, _ in sorted(encoder.items(), key=lambda kv: kv[1])]
    tok = {"model": "llama", "tokens": tokens, "merges": [f"{a} {b}" for a, b in merges]}
    return write_model(build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2),
                       root / "s34-mislabelled.gguf", "llama", "F32", tokenizer=tok)


def run_kind(argv: list[str]) -> int | None:
    """The child's part for this module's kinds of case (None: not one of them)."""
    from explorer.core.errors import ExplorerError

    kind = argv[0]
    if kind not in ("compare-nan", "trace-text", "api-notes", "api-call"):
        return None
    try:
        if kind == "compare-nan":
            from explorer.cli import main

            code = main(["compare", "-c", argv[1], "--other", argv[2], "--device", "cpu", "-p", "abc", "-o", argv[3]])
            return code
        if kind == "trace-text":
            from explorer.core.interop import read_trace_safetensors

            trace = read_trace_safetensors(argv[1])
            if len(trace.meta.extra["prompt"]) > 200_000 or len(trace.meta.model_name) > 200:
                print(f"error: the prompt ({len(trace.meta.extra['prompt'])}) or the name was not cut", file=sys.stderr)
                return 1
            print("warning: " + "; ".join(trace.meta.extra["notes"]), file=sys.stderr)
            return 0
        if kind == "api-notes":
            from explorer.core.checkpoint import load_checkpoint

            print("warning: " + " ".join(load_checkpoint(argv[1], device="cpu").notes), file=sys.stderr)
            return 0
        import explorer.core as api  # noqa: F401  (the expression's namespace)

        m = api.load_checkpoint(argv[1], device="cpu")  # noqa: F841
        eval(argv[2])  # noqa: S307 - the corpus' own expressions
    except ExplorerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def lost(case) -> str | None:
    """Data loss, looked at before anything else about a case: a file in ``keep`` changed or gone, or a path in
    ``absent`` made (nothing written through a link, no folder made from a typo)."""
    for path, data in getattr(case, "keep", {}).items():
        if not os.path.isfile(path) or Path(path).read_bytes() != data:
            return f"data loss: {os.path.basename(path)} changed or went"
    for path in getattr(case, "absent", []):
        if os.path.lexists(path):
            return f"data loss: {os.path.basename(path)} was made"
    return None
