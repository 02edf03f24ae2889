"""Screenshots of the Experts panel (the real window under Xvfb), on random mixtures of experts built in memory with
``transformers``' own config classes and opened through the family's converter (GPT-2's tokenizer):

* experts-{size}-olmoe.png: OLMoE-1B-7B's routing (64 experts, top 8, softmax then top 8, not renormalised) in 4
  layers with narrow widths (d_model 256); layer 1, a token selected;
* experts-{size}-token.png: the Selected token tab: its experts in every layer, each one's direct effect on the logit;
* experts-{size}-expert-off.png: the same with the busiest expert of layer 1 switched off for every token (the
  red crosses down its column and under its load bar, the Interventions strip);
* experts-{size}-what-changed.png: What changed for that intervention;
* experts-{size}-qwen3moe.png: Qwen3-30B-A3B's routing (128 experts, top 8, renormalised), 4 layers, narrow;
* experts-{size}-diagram.png: the Model diagram's router, experts and shared expert (a Qwen2-MoE-shaped model:
  60 experts, top 4, a gated shared expert).

The routers' weights are scaled up (x6) from transformers' init, so that tokens prefer some experts clearly, as
a trained router does; everything else is as the init leaves it.

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" \
        python docs/shots_experts.py --size 1280x800 --out docs
    (and --size 1600x1000 --only olmoe)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from screenshots import complete, pump, screenshot_window, settle  # noqa: E402

PROMPT = ("The old lighthouse keeper climbed the spiral stairs every evening, lit the great lamp, and watched "
          "the ships pass safely through the narrow channel below.")
SHOTS = ("olmoe", "qwen3moe", "diagram")
NARROW = dict(vocab_size=50304, hidden_size=256, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=4,
              max_position_embeddings=512)
SHAPES = {  # transformers' config and model classes, and the routing of the real model (widths narrowed)
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", "OLMoE-1B-7B routing (64 experts, top 8), 4 layers, narrow",
              dict(intermediate_size=128, num_experts=64, num_experts_per_tok=8)),
    "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                 "Qwen3-30B-A3B routing (128 experts, top 8), 4 layers, narrow",
                 dict(intermediate_size=384, moe_intermediate_size=96, head_dim=64, num_experts=128,
                      num_experts_per_tok=8, norm_topk_prob=True)),
    "qwen2moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                 "Qwen2-MoE routing (60 experts, top 4, shared expert), narrow",
                 dict(intermediate_size=384, moe_intermediate_size=96, shared_expert_intermediate_size=256,
                      num_experts=60, num_experts_per_tok=4)),
}


def moe_shaped(shape: str):
    import torch
    import transformers as tf

    from explorer.core.checkpoint.in_memory import from_transformers
    from explorer.core.tokenize.base import gpt2_tokenizer

    config_name, model_name, label, routing = SHAPES[shape]
    torch.manual_seed(0)
    hf = getattr(tf, model_name)(getattr(tf, config_name)(**NARROW, **routing)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("mlp.gate.weight"):  # the router: sharper than the init's std 0.02
                p.mul_(6.0)
    return from_transformers(hf, gpt2_tokenizer(), device="cpu", name=f"{label} (random)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--only", nargs="+", choices=SHOTS, default=list(SHOTS))
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    out = Path(args.out)

    import numpy as np

    from explorer.core.interventions.spec import Intervention
    from explorer.ui.session.workers import LoadRequest, LoadResult
    from explorer.ui.window.docks import dock_of

    with screenshot_window(w, h) as (app, window):
        def show(loaded, panel: str, layer: int, token: int) -> None:
            window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
            pump(app, lambda: window.loaded is loaded and complete(window))
            window.session.set_prompt(PROMPT)
            ids = list(loaded.tokenizer.encode(PROMPT))
            pump(app, lambda: complete(window) and list(window.trace.token_ids) == ids)
            window.raise_panel(panel)
            window.session.selection.set_layer(layer)
            window.session.selection.set_token(token)
            settle(app, 0.3)
            pump(app, lambda: complete(window))

        def shot(name: str) -> None:
            settle(app, 0.4)
            pump(app, lambda: complete(window))
            settle(app, 0.8)
            path = out / (name.replace("{size}", f"{w}x{h}") + ".png")
            window.grab().save(str(path))
            print("wrote", path)

        if "olmoe" in args.only:
            show(moe_shaped("olmoe"), "experts", 1, 9)
            shot("experts-{size}-olmoe")
            window.panel("experts").content.setCurrentIndex(1)  # the Selected token tab
            shot("experts-{size}-token")
            window.panel("experts").content.setCurrentIndex(0)
            busiest = int(np.argmax(window.panel("experts").expert_load()))
            window.session.interventions.set(Intervention("expert", 1, busiest, "zero"))
            pump(app, lambda: complete(window) and window.trace.interventions)
            shot("experts-{size}-expert-off")
            dock_of(window.panel("what_changed")).raise_()
            shot("experts-{size}-what-changed")
            window.session.interventions.clear()
            pump(app, lambda: complete(window) and not window.trace.interventions)
        if "qwen3moe" in args.only:
            show(moe_shaped("qwen3moe"), "experts", 2, 12)
            shot("experts-{size}-qwen3moe")
        if "diagram" in args.only:
            show(moe_shaped("qwen2moe"), "diagram", 1, 5)
            diagram = window.panel("diagram")
            pump(app, lambda: "L1.moe.experts" in diagram.scene.items_by_id)
            experts, shared = (diagram.scene.items_by_id[f"L1.moe.{b}"].sceneBoundingRect()
                               for b in ("experts", "shared"))
            diagram.graphics.centerOn(experts.united(shared).center())  # the router, the experts, the shared expert
            shot("experts-{size}-diagram")


if __name__ == "__main__":
    main()
