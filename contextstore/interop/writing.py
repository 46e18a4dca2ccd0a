"""Writing the files an export makes, each one whole or not at all (what may be written
over is :func:`~contextstore.core.os_errors.check_regular_targets`'s to say).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary file in ``path``'s folder, sync it, then
    rename it over ``path``: a reader sees the old file or the new one, never a part.

    The file gets the permissions of the one it replaces, and a new one those any program
    gives a file it creates (``0o666`` less the umask): these are the agent's own files,
    read by the agent and its user, not owner-only as the store's database is.
    """
    mode = _kept_mode(path)
    handle, temporary = _temporary_file(path)
    try:
        with os.fdopen(handle, "wb") as stream:
            if mode is not None:
                os.chmod(temporary, mode)
            stream.write(text.encode("utf-8"))
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _kept_mode(path: Path) -> int | None:
    """The permission bits of the file at ``path``, or None when there is none."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None


def _temporary_file(path: Path) -> tuple[int, str]:
    """A new file beside ``path``, open for writing, created with mode ``0o666`` so that the
    umask applies as to any new file (``tempfile.mkstemp`` makes it ``0o600``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        name = str(path.parent / f"{path.name}.tmp.{secrets.token_hex(6)}")
        try:
            return os.open(name, flags, 0o666), name
        except FileExistsError:
            continue


def write_json_atomic(path: Path, value: Any, *, indent: int | None = None) -> None:
    """:func:`write_text_atomic` of ``value`` as JSON (compact unless ``indent``, as Cline
    writes it)."""
    separators = (",", ":") if indent is None else (",", ": ")
    write_text_atomic(
        path, json.dumps(value, ensure_ascii=False, separators=separators, indent=indent)
    )
