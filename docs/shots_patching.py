"""Screenshots of the patching panel's attribution mode on the bundled induction model: the estimates
(ringed) of both grids, then the same grids after "Exact for top-k".

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_patching.py --out docs
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from screenshots import pump, screenshot_window, settle  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--top-k", type=int, default=8)
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))

    from explorer.core.checkpoint import load_checkpoint
    from explorer.ui.panels.interventions import PatchingPanel
    from explorer.ui.panels.interventions import patching as patching_module
    from explorer.ui.session.workers import LoadRequest, LoadResult
    from tests.core.test_default_models import repeated_tokens

    with screenshot_window(w, h) as (app, window):
        loaded = load_checkpoint("induction", device="cpu")
        window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
        pump(app, lambda: window.trace is not None)
        # the induction probe: a random sequence repeated, against one whose first copy is other tokens
        ids = repeated_tokens(loaded, half=12, seed=0)
        others = [t for t in repeated_tokens(loaded, half=60, seed=100)[:60] if t not in ids][:12]
        clean, corrupt = loaded.tokenizer.decode(ids), loaded.tokenizer.decode(others + ids[12:])
        window.session.set_prompt(clean)
        pump(app, lambda: window.trace is not None and list(window.trace.token_ids) == ids)
        panel = next(p for p in window.panels if isinstance(p, PatchingPanel))
        next(d for d in window.docks if d.panel is panel).raise_()
        pump(app, lambda: panel.trace is window.trace)
        panel.corrupt_edit.setText(corrupt)
        panel.mode_box.setCurrentIndex(panel.mode_box.findData(patching_module.ESTIMATE))
        out = Path(args.out)
        for name, action in (("estimate", panel.start), ("top-k", panel.exact_top_k)):
            if name == "top-k":
                panel.top_k.setValue(args.top_k)
            action()
            pump(app, lambda: panel._worker is None)
            settle(app, 0.8)
            path = out / f"patching-attribution-{w}x{h}-{name}.png"
            window.grab().save(str(path))
            print("wrote", path, "|", panel.status.text()[:160])

if __name__ == "__main__":
    main()
