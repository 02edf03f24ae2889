"""Every panel's explanation opens with a plain-language paragraph; formulas and family details come after it."""

from __future__ import annotations

from explorer.core.paths import resources_dir


def test_every_explanation_opens_in_plain_words():
    files = sorted((resources_dir() / "explanations").glob("*.md"))
    assert len(files) >= 13
    for path in files:
        paragraphs = [p for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
        assert paragraphs[0].lstrip().startswith("#"), path.name
        first = paragraphs[1]
        assert first.startswith("**In plain words:** "), path.name
        assert not any(c in first for c in "√∑·Σ="), (path.name, "formulas come after the plain paragraph")


def test_attention_puts_the_family_details_after_the_basic_idea():
    text = (resources_dir() / "explanations" / "attention.md").read_text(encoding="utf-8")
    plain, families = text.index("**In plain words:**"), text.index("**Architectures differ here**")
    assert plain < text.index("scores = Q·Kᵀ") < families
    assert text.index("*Encoders*") > families and text.index("*ALiBi*") > families
