"""Where the NDIF API key lives: never in the settings file.

The key is kept in memory for the session (``KeyStore.session``, one per window), read from the
``NDIF_API_KEY`` environment variable when the field is left empty (``RemoteSettings.resolve``), and
stored only when the user ticks "Remember the key", in the system's key store through the ``keyring``
package (the ``[remote]`` extra) when it is installed and has a usable backend.

Earlier versions wrote the key in plain text to the settings file (``remote/api_key``). Such a key is read
(the dialog's field is filled with it) and stays where it is until the user confirms moving it in the
dialog: then it goes to the key store when there is one, else into memory for this session, and only
then is it removed from the settings file.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSettings

LEGACY_KEY = "remote/api_key"  # where earlier versions kept the key, in plain text
SERVICE, USER = "transformer-explorer", "ndif-api-key"  # the key's entry in the system's key store
HF_TOKEN_USER = "huggingface-token"  # File > Get a model…'s token for gated repositories


def keyring_or_why() -> tuple[Any | None, str]:
    """(the ``keyring`` module, "") when it can store a key here, else (None, why not, in one line)."""
    try:
        import keyring
    except ImportError:
        return None, "Needs the keyring package: pip install 'transformer-explorer[remote]'"
    try:
        backend = keyring.get_keyring()
    except Exception as exc:  # noqa: BLE001 - a broken keyring configuration: say so, do not fail
        return None, "keyring could not start: " + " ".join(str(exc).split())
    if getattr(backend, "priority", 0) <= 0:  # keyring's fail/null backends: nowhere to store a key
        return None, (f"keyring found no usable key store on this system ({type(backend).__module__}); "
                      "the key is kept for this session only")
    return keyring, ""


class KeyStore:
    """A secret of one window (the NDIF API key by default; a Hugging Face token with ``user=HF_TOKEN_USER``):
    in memory, in the system's key store when asked, never in ``settings``."""

    def __init__(self, settings: QSettings, user: str = USER, legacy_key: str | None = LEGACY_KEY) -> None:
        self.settings = settings
        self.user, self.legacy_key = user, legacy_key  # its entry in the key store; an old settings entry
        self.session = ""  # the key typed or moved during this session

    @staticmethod
    def available() -> tuple[bool, str]:
        keyring, why = keyring_or_why()
        return keyring is not None, why

    def stored(self) -> str:
        """The key in the system's key store ("" when none, or no key store)."""
        keyring, _ = keyring_or_why()
        if keyring is None:
            return ""
        try:
            return keyring.get_password(SERVICE, self.user) or ""
        except Exception:  # noqa: BLE001 - a locked or broken key store: as if nothing were stored
            return ""

    def legacy(self) -> str:
        """A key an earlier version left in plain text in the settings file ("" when none)."""
        if self.legacy_key is None:
            return ""
        return str(self.settings.value(self.legacy_key, "") or "")

    def initial(self) -> str:
        """The key the dialog's field starts with: this session's, else the stored one, else an old settings one."""
        return self.session or self.stored() or self.legacy()

    def keep(self, key: str, remember: bool) -> str:
        """Keep ``key`` for the session; store it in the key store when ``remember``, else drop a stored one.
        Returns "" or one line saying what could not be done (the key is then kept for the session only)."""
        self.session = key
        keyring, why = keyring_or_why()
        if keyring is None:
            return why if remember else ""
        try:
            if remember and key:
                keyring.set_password(SERVICE, self.user, key)
            elif not remember and self.stored():
                keyring.delete_password(SERVICE, self.user)
        except Exception as exc:  # noqa: BLE001 - a locked key store: the run goes on with the key in memory
            return "The key store refused the key (kept for this session only): " + " ".join(str(exc).split())
        return ""

    def move_legacy(self) -> str:
        """Move the settings file's plain-text key out of it (the user confirmed): to the key store when there is
        one, else into memory. The settings entry is removed only once the key is safe. Returns what happened."""
        key = self.legacy()
        if not key:
            return "There is no key in the settings file."
        keyring, _ = keyring_or_why()
        problem = self.keep(key, remember=keyring is not None)
        if problem:  # the key store refused it: the settings entry stays, nothing is lost
            return problem + "; the settings file still holds it."
        self.settings.remove(self.legacy_key or LEGACY_KEY)
        self.settings.sync()
        if keyring is not None:
            return "The key was moved to the system's key store and removed from the settings file."
        return ("The key was removed from the settings file and is kept for this session only: type it again or "
                "set NDIF_API_KEY next time.")
