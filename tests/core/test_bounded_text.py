"""Issue 34: a string read from a checkpoint reaches a widget or a terminal cut and escaped: a model's name from
its config (a 3 MB one froze a label), a token of a hostile vocabulary, a note."""

from __future__ import annotations

import json

from explorer.core.checkpoint import load_checkpoint, save_native
from explorer.core.config import ModelConfig
from explorer.core.model import Transformer
from explorer.core.tokenize.base import VocabTokenizer


def test_a_3_mb_model_name_and_a_5000_character_token_are_cut(tmp_path, capsys):
    from explorer.cli import main

    tokens = list("abcdefghijklmnop")
    tokens[3] = "d" * 5_000
    cfg = ModelConfig(vocab_size=16, n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_head=4, d_ff=16)
    save_native(Transformer(cfg), VocabTokenizer(tokens), tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["name"] = "\x1b]0;pwned\x07" + "N" * 3_000_000
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    loaded = load_checkpoint(tmp_path / "m", device="cpu")
    assert len(loaded.name) < 200 and "\x1b" not in loaded.name and "3000010 characters" in loaded.name
    display = loaded.tokenizer.display(3)
    assert display.startswith("d" * 500) and len(display) < 1_100 and "5,000 characters" in display
    assert main(["info", "--checkpoint", str(tmp_path / "m"), "--device", "cpu"]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) < 1_000
