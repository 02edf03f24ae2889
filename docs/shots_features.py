"""Take the README's Features screenshots: the real window under Xvfb, the bundled Shakespeare model, and a
small SAE trained here, in a few seconds, on the model's residual stream entering block 2 over its held-out
sample (models/shakespeare/heldout_sample.txt), written in SAELens' format and opened with File > Open SAE.

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_features.py --out docs

Three PNGs (prefix features-): the Features panel, a feature switched off in What changed, and a steered
vs unsteered continuation (a contrast pair typed in the Steering tab).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs"))

from screenshots import complete, pump, screenshot_window, settle  # noqa: E402

LAYER, D_SAE = 2, 512
PROMPT = "ROMEO:\nO, she doth teach the torches to burn bright!\nIt seems she hangs upon the cheek of night"


def train_sae(loaded, path: Path, steps: int = 600) -> None:
    """A standard SAE (ReLU, L1 penalty) on the stream entering block ``LAYER``, saved as SAELens saves one."""
    import torch
    from safetensors.torch import save_file

    from explorer.core.features.steering import residual_at

    text = (ROOT / "models" / "shakespeare" / "heldout_sample.txt").read_text()
    ids = loaded.tokenizer.encode(text)
    n_ctx = loaded.config.n_ctx
    xs = [residual_at(loaded.model, ids[i:i + n_ctx], LAYER) for i in range(0, len(ids) - 8, n_ctx)]
    x = torch.from_numpy(__import__("numpy").concatenate(xs)).float()
    d = x.shape[1]
    g = torch.Generator().manual_seed(0)
    W_dec = torch.nn.Parameter(torch.randn(D_SAE, d, generator=g) / d ** 0.5)
    W_enc = torch.nn.Parameter(W_dec.detach().T.clone())
    b_enc = torch.nn.Parameter(torch.zeros(D_SAE))
    b_dec = torch.nn.Parameter(x.mean(0).clone())
    opt = torch.optim.Adam([W_enc, W_dec, b_enc, b_dec], lr=3e-3)
    scale = x.norm(dim=1).mean()
    for step in range(steps):
        batch = x[torch.randint(0, x.shape[0], (512,), generator=g)]
        f = torch.relu((batch - b_dec) @ W_enc + b_enc)
        loss = ((f @ W_dec + b_dec - batch) ** 2).sum(1).mean() / scale ** 2 + \
            3e-3 * (f * W_dec.norm(dim=1)).sum(1).mean() / scale
        opt.zero_grad()
        loss.backward()
        opt.step()
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in
               {"W_enc": W_enc, "W_dec": W_dec, "b_enc": b_enc, "b_dec": b_dec}.items()},
              str(path / "sae_weights.safetensors"))
    (path / "cfg.json").write_text(json.dumps({
        "architecture": "standard", "d_in": d, "d_sae": D_SAE, "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "metadata": {"hook_name": f"blocks.{LAYER}.hook_resid_pre", "model_name": "shakespeare"}}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))

    from explorer.core.checkpoint import load_checkpoint
    from explorer.ui.session.workers import LoadRequest, LoadResult

    tmp = Path(tempfile.mkdtemp(prefix="shots-features-"))
    with screenshot_window(w, h, folder=tmp) as (app, window):
        loaded = load_checkpoint("shakespeare", device="cpu")
        train_sae(loaded, tmp / "sae-shakespeare-L2")
        window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
        pump(app, lambda: complete(window))
        window.set_prompt(PROMPT)
        pump(app, lambda: complete(window) and window.trace.n_tokens > 10)
        window.feature_tools.opener.open(str(tmp / "sae-shakespeare-L2"))
        pump(app, lambda: bool(window.session.features.saes))
        panel = window.panel("features")
        journey = window.dock("journey")
        side = [d for d in (window.generation_dock, journey) if d is not None]  # the generation dock and its tabs
        for dock in side:
            dock.hide()  # the panels get the window's width (View > Generation brings it back)
        window.selection.set_token(window.trace.n_tokens - 3)
        pump(app, lambda: complete(window) and panel._whole is not None and panel._whole.acts is not None)
        settle(app, 1.0)
        out = Path(args.out)
        window.grab().save(str(out / f"features-{w}x{h}-panel.png"))

        feature = int(panel._view.ids[0])
        panel.component(feature).set(window.interventions, "zero")
        pump(app, lambda: (complete(window) and bool(window.interventions.active())
                           and window.session.baseline is not None))
        changed = window.dock("what_changed")
        changed.raise_()
        pump(app, lambda: changed.panel.trace is window.trace and complete(window))
        settle(app, 1.0)
        window.grab().save(str(out / f"features-{w}x{h}-switched-off.png"))
        window.interventions.clear()
        pump(app, lambda: complete(window))

        for dock in side:
            dock.show()
        window.generation_dock.raise_()  # in front of the Journey tab beside it
        steering = window.feature_tools.steering
        window.generation.set_prompt("ROMEO:\n")
        window.generation.seed.setValue(3)
        steering.source.setCurrentIndex(3)
        steering.prompt_a.setText("O my sweet love, my gentle dear, my heart")
        steering.prompt_b.setText("Thou villain, thou damned knave, thou slave")
        steering.layer.setValue(LAYER)
        steering.alpha.setValue(1.0)
        window.feature_tools.show_steering()
        next(d for d in window.docks if d.panel is panel).raise_()
        done = []
        steering.finished.connect(done.append)
        steering.run()
        pump(app, lambda: bool(done))
        if done[0] is None:
            raise SystemExit(f"steering failed: {steering.error}")
        settle(app, 1.0)
        window.grab().save(str(out / f"features-{w}x{h}-steering.png"))
        for name in ("panel", "switched-off", "steering"):
            print(out / f"features-{w}x{h}-{name}.png")


if __name__ == "__main__":
    main()
