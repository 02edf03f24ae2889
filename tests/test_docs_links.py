"""The docs a newcomer reads hold together: every relative link and image in README.md, ARCHITECTURE.md,
docs/*.md and benchmarks/LOG.md points at a file that exists (and at a heading that exists, where it names
one); the README and ARCHITECTURE stay short; every docs page answers one question and is reachable from
the README; every screenshot in docs/ is shown or linked somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "benchmarks" / "LOG.md", *DOCS]

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are code, not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    return LINK.findall(_prose(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def test_link_finder_finds_links_and_images_but_not_code():
    text = "See [a](docs/a.md#x) and ![b](b.png \"t\").\n```\n[c](c.md)\n```\n`[d](d.md)` [e](https://e.org)"
    assert links(text) == ["docs/a.md#x", "b.png", "https://e.org"]
    assert slug("2026-11-24 (stop 23): the latest, issue 21's targets") == "2026-11-24-stop-23-the-latest-issue-21s-targets"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    assert page.is_file(), page
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading #{fragment} in {resolved.name}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_and_architecture_stay_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200
    assert len((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_each_docs_page_asks_one_question_and_the_readme_links_it():
    readme_targets = {(ROOT / t.partition("#")[0]).resolve() for t in links((ROOT / "README.md").read_text("utf-8"))}
    assert len(DOCS) >= 10
    for page in DOCS:
        title = page.read_text(encoding="utf-8").splitlines()[0]
        assert title.startswith("# ") and title.endswith("?"), f"{page.name}: {title!r} is not one question"
        assert page.resolve() in readme_targets, f"{page.name} is not linked from README.md"


def test_every_screenshot_is_shown_somewhere():
    shown = set()
    for page in PAGES:
        shown |= {(page.parent / t.partition("#")[0]).resolve() for t in links(page.read_text("utf-8"))}
    orphans = [p.name for p in sorted((ROOT / "docs").glob("*.png")) if p.resolve() not in shown]
    assert not orphans, f"screenshots no page shows or links: {orphans}"
