"""Issue 42, item 10: ``export --plots`` says how far it is (N of M) instead of being silent while it
draws every panel and one map per head (290 images, 80 s, on a GPT-2-small-sized model)."""

from __future__ import annotations

import re

from explorer.cli import main

PROMPT = "The quick brown fox jumps over the lazy dog"


def test_export_plots_prints_its_progress(qapp, tiny_gpt2_dir, tmp_path, capsys):
    code = main(["export", "--checkpoint", str(tiny_gpt2_dir), "--prompt", PROMPT, "--out", str(tmp_path),
                 "--plots", "--device", "cpu"])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    panels = [m for line in lines if (m := re.search(r"plots: panel (\d+) of (\d+)", line))]
    maps = [m for line in lines if (m := re.search(r"plots: attention map (\d+) of (\d+)", line))]
    assert panels and [int(m[1]) for m in panels] == list(range(1, int(panels[0][2]) + 1))
    heads = len(list((tmp_path / "plots" / "attention").glob("*.png")))
    assert maps and int(maps[-1][1]) == int(maps[-1][2]) == heads == 12  # 3 layers of 4 heads
    done = next(i for i, line in enumerate(lines) if line.endswith("] done"))
    assert all(lines.index(m.string) < done for m in panels + maps)
