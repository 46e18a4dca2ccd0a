"""The default database location: ``$CONTEXTSTORE_DB``, else a per-user data directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from contextstore.core.errors import InvalidInputError

DATABASE_FILENAME = "contextstore.db"


def user_data_dir() -> Path:
    """The per-user data directory for contextstore on this platform.

    Linux and other Unix: ``$XDG_DATA_HOME/contextstore`` (``~/.local/share/contextstore``);
    macOS: ``~/Library/Application Support/contextstore``; Windows:
    ``%LOCALAPPDATA%\\contextstore``.
    """
    home = Path.home()
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "contextstore"
    if sys.platform.startswith("win"):
        base = os.environ.get("LOCALAPPDATA")
        return (Path(base) if base else home / "AppData" / "Local") / "contextstore"
    base = os.environ.get("XDG_DATA_HOME")
    return (Path(base) if base else home / ".local" / "share") / "contextstore"


def default_database_path() -> Path:
    """``$CONTEXTSTORE_DB`` when set (a path), else ``user_data_dir() / "contextstore.db"``."""
    configured = os.environ.get("CONTEXTSTORE_DB")
    if configured and "://" not in configured:
        return expand_user(configured)
    return user_data_dir() / DATABASE_FILENAME


def default_location() -> str:
    """The default store location as given to ``ContextStore.open(None)`` (path or URL)."""
    configured = os.environ.get("CONTEXTSTORE_DB")
    if configured:
        return configured
    return str(default_database_path())


def expand_user(path: str | os.PathLike[str]) -> Path:
    """``path`` with a leading ``~`` or ``~user`` replaced by that home directory.

    ``Path.expanduser`` raises ``RuntimeError`` for a user this machine does not know (a
    mistyped ``~nosuchuser/x.db``), which reached callers, and the command line as an
    internal error.

    Raises:
        InvalidInputError: the leading ``~`` names no home directory here.
    """
    given = Path(path)
    try:
        return given.expanduser()
    except RuntimeError as exc:
        head = given.parts[0] if given.parts else str(given)
        raise InvalidInputError(
            f"{os.fspath(path)} begins with {head}, which names no home directory on this "
            "machine (no such user, or $HOME is unset); write the path out in full."
        ) from exc
