"""Writing the files an export makes, each one whole or not at all (what may be written
over is :func:`~contextstore.core.os_errors.check_regular_targets`'s to say).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


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
