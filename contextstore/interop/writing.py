"""Writing the files an export makes, each one whole or not at all (what may be written
over is :func:`~contextstore.core.os_errors.check_regular_targets`'s to say).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.validate import readable_text


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary file in ``path``'s folder, sync it, then
    rename it over ``path``: a reader sees the old file or the new one, never a part."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` as :func:`write_text_atomic` writes a text: whole or not at all.

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
            stream.write(data)
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
    write_text_atomic(path, json_text(value, indent=indent))


def json_text(value: Any, *, indent: int | None = None) -> str:
    """``value`` as the JSON text an export writes (compact unless ``indent``)."""
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(value, ensure_ascii=False, separators=separators, indent=indent)


def utf8_files(texts: Mapping[Path, str], *, name_holder: Path) -> dict[Path, bytes]:
    """Each text of ``texts`` encoded as UTF-8, all before any is written.

    The only text an export writes that the store did not check is a folder's or file's
    name (a Cline task's id is its folder's name); a name that is not UTF-8 (Python reads
    its bytes as lone surrogates) raised ``UnicodeEncodeError`` after the files before it
    were written.

    Raises:
        InvalidInputError: a text cannot be encoded (nothing was written).
    """
    try:
        return {path: text.encode("utf-8") for path, text in texts.items()}
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"the name of {readable_text(str(name_holder))} is not UTF-8, and the files written "
            "there would hold it (as the task's id); name a folder whose name is UTF-8 text. "
            "Nothing was written."
        ) from exc
