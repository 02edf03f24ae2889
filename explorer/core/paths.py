"""Where the bundled ``models/`` and ``resources/`` live: beside the package when installed from a
wheel (``explorer/_bundled/``), at the top of the repository in a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]


def _bundled(name: str) -> Path:
    installed = _PACKAGE / "_bundled" / name
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / name


def models_dir() -> Path:
    return _bundled("models")


def resources_dir() -> Path:
    return _bundled("resources")


APP_DIR_NAME = "transformer-explorer"


def user_data_dir() -> Path:
    """Where the app writes what it makes for the user (trained models): the platform's user data directory."""
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_DIR_NAME, appauthor=False))


def user_cache_dir() -> Path:
    """Where downloads and prepared data are cached (the training corpus): the platform's user cache directory."""
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_DIR_NAME, appauthor=False))
