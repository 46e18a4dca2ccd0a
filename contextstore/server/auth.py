"""The HTTP server's bearer token: read from ``--token-file``, or kept in the data directory.

Without ``--token-file``, the token lives in ``server-token`` beside the default database
(created on first start, readable by its owner only, reused afterwards so that clients keep
working across restarts). A token file that other users can read is refused.
"""

from __future__ import annotations

import os
import secrets
import stat
import sys
from pathlib import Path

from contextstore.core.errors import InvalidInputError
from contextstore.storage.paths import user_data_dir

TOKEN_FILENAME = "server-token"
MIN_TOKEN_LENGTH = 16


def default_token_path() -> Path:
    """Where the generated token is kept: ``<data directory>/server-token``."""
    return user_data_dir() / TOKEN_FILENAME


def _check_private(path: Path) -> None:
    if sys.platform.startswith("win"):
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise InvalidInputError(
            f"the token file {path} can be read by other users (mode {mode:04o}); "
            f"run 'chmod 600 {path}' or remove it to have a new one generated."
        )


def read_token(path: Path) -> str:
    """The token in ``path`` (surrounding whitespace removed), checked to be private and long."""
    if not path.is_file():
        raise InvalidInputError(f"--token-file {path} does not exist; create it or omit the flag.")
    _check_private(path)
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
        raise InvalidInputError(
            f"the token in {path} must be at least {MIN_TOKEN_LENGTH} characters without "
            "spaces; put a long random string in it (for example from 'openssl rand -hex 32')."
        )
    return token


def create_token_file(path: Path) -> str:
    """Write a new random token to ``path`` (mode 0600, its directory 0700); return it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(32)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token


def load_token(token_file: Path | None) -> tuple[str, Path]:
    """The token to require and the file it is in: ``token_file``, else the default file
    (created when missing)."""
    if token_file is not None:
        return read_token(token_file), token_file
    path = default_token_path()
    if not path.exists():
        try:
            return create_token_file(path), path
        except FileExistsError:  # another server created it meanwhile
            pass
    return read_token(path), path
