"""Writing the files an export makes: each one whole or not at all, and never over
something that is not a regular file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contextstore.core.errors import InvalidInputError


def check_regular_targets(paths: Sequence[Path]) -> None:
    """Refuse to write over anything but a regular file (a folder, a device such as
    ``/dev/null``, a pipe or a socket would be replaced by the file), or below a file.

    Raises:
        InvalidInputError: one of ``paths`` exists and is not a regular file, or the
            nearest of its folders that exists is a file.
    """
    for path in paths:
        parent = next((p for p in path.parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise InvalidInputError(
                f"{parent} is a file, not a folder; name a path in a folder to write to. "
                "Nothing was written."
            )
        if path.exists() and not path.is_file():
            raise InvalidInputError(
                f"{path} is not a regular file (a folder, a device, a pipe or a socket); name "
                "a file to write. Nothing was written."
            )


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary file in ``path``'s folder, sync it, then
    rename it over ``path``: a reader sees the old file or the new one, never a part."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.tmp.")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(text.encode("utf-8"))
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, value: Any, *, indent: int | None = None) -> None:
    """:func:`write_text_atomic` of ``value`` as JSON (compact unless ``indent``, as Cline
    writes it)."""
    separators = (",", ":") if indent is None else (",", ": ")
    write_text_atomic(
        path, json.dumps(value, ensure_ascii=False, separators=separators, indent=indent)
    )
