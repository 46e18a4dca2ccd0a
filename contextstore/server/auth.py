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

from contextstore.core.errors import ContextStoreError, InvalidInputError
from contextstore.core.os_errors import os_error
from contextstore.storage.paths import user_data_dir

TOKEN_FILENAME = "server-token"
MIN_TOKEN_LENGTH = 16


def default_token_path() -> Path:
    """Where the generated token is kept: ``<data directory>/server-token``."""
    return user_data_dir() / TOKEN_FILENAME


def _check_private(path: Path, *, generated: bool) -> None:
    """Refuse a token file that other users can read. Removing the file is offered as a way
    out only for the ``generated`` one in the data directory: a ``--token-file`` that is
    removed is not generated again, but refused as missing."""
    if sys.platform.startswith("win"):
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        remedy = " or remove it to have a new one generated" if generated else ""
        raise InvalidInputError(
            f"the token file {path} can be read by other users (mode {mode:04o}); "
            f"run 'chmod 600 {path}'{remedy}."
        )


TOKEN_HINT = "put a long random string in it (for example from 'openssl rand -hex 32')"
"""What to do about a token file whose content is no token."""


def _unusable(exc: OSError, path: Path, doing: str, remedy: str) -> ContextStoreError:
    """The store's error for ``exc``, raised while ``doing`` to the token file ``path``: its
    class as :func:`~contextstore.core.os_errors.os_error` classifies it (a location that
    cannot be written, a full disk, anything else), its message naming the file and what
    to do (it was an internal error with a traceback)."""
    reason = exc.strerror or str(exc)
    return type(os_error(exc, doing))(f"cannot {doing} {path}: {reason}; {remedy}.")


def read_token(path: Path, *, generated: bool = False) -> str:
    """The token in ``path`` (surrounding whitespace removed), checked to be private and long;
    ``generated`` when ``path`` is the data directory's file, which a new start can make
    again, rather than a ``--token-file``."""
    if not path.is_file():
        raise InvalidInputError(f"--token-file {path} does not exist; create it or omit the flag.")
    try:
        _check_private(path, generated=generated)
        token = path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        raise InvalidInputError(f"the token file {path} is not UTF-8 text; {TOKEN_HINT}.") from None
    except OSError as exc:
        raise _unusable(
            exc, path, "read the token file", "let the user running the server read it"
        ) from exc
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
        raise InvalidInputError(
            f"the token in {path} must be at least {MIN_TOKEN_LENGTH} characters without "
            f"spaces; {TOKEN_HINT}."
        )
    return token


def create_token_file(path: Path) -> str:
    """Write a new random token to ``path`` (mode 0600, its directory 0700); return it.

    Raises:
        FileExistsError: another process created ``path`` meanwhile.
        ContextStoreError: the file cannot be created or written (a directory that cannot
            be written, a full disk); nothing is left at ``path``.
    """
    remedy = (
        f"make {path.parent} writable, or pass --token-file FILE naming a file only you "
        f"can read that holds a token of at least {MIN_TOKEN_LENGTH} characters"
    )
    token = secrets.token_urlsafe(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:  # a file where the directory should be included
        raise _unusable(exc, path, "create the server's token file", remedy) from exc
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise
    except OSError as exc:
        raise _unusable(exc, path, "create the server's token file", remedy) from exc
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
    except OSError as exc:  # an empty file left behind would be refused at every start
        path.unlink(missing_ok=True)
        raise _unusable(exc, path, "write the server's token file", remedy) from exc
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
    if not path.is_file():  # read_token's refusal would name --token-file, not given
        raise InvalidInputError(
            f"the server's token file {path} is not a regular file (a folder, say); remove "
            "it to have a token generated there, or pass --token-file FILE."
        )
    return read_token(path, generated=True), path
