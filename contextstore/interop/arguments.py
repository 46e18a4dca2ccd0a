"""The checks of what a caller passes to the importers and exporters, before any file is
read or written: a path that is no path, or a flag that is not ``True`` or ``False``, ended
in a ``TypeError`` (``import_gemini(store, 5)``), and a flag such as ``replace="no"`` was
taken as true."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.validate import check_flags, check_int, shown


def path_argument(name: str, value: Any) -> Path:
    """``value`` as a :class:`~pathlib.Path`, when it is a non-empty ``str`` or
    ``os.PathLike`` naming text (what the file system then makes of it is reported as the
    file's own error, in the terms of the file that was being read or written).

    Raises:
        InvalidInputError: it is anything else (None, a number, bytes, an empty string).
    """
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text:
        raise InvalidInputError(
            f"{name} must be a file or folder path (a str or pathlib.Path), got {shown(value)}."
        )
    return Path(text)


def optional_path_argument(name: str, value: Any) -> Path | None:
    """:func:`path_argument`, or None for None."""
    return None if value is None else path_argument(name, value)


def check_import_options(
    *,
    replace: Any,
    max_file_bytes: Any,
    progress: Callable[..., Any] | None,
    context_window: Any = None,
) -> None:
    """The options every importer takes: ``replace`` a flag, ``max_file_bytes`` a positive
    integer, ``progress`` None or something to call, ``context_window`` None or a window in
    tokens (as :meth:`~contextstore.ContextStore.create_conversation` takes it).

    Raises:
        InvalidInputError: one of them is of another kind.
    """
    check_flags(replace=replace)
    check_int("context_window", context_window, minimum=1)
    if (
        isinstance(max_file_bytes, bool)
        or not isinstance(max_file_bytes, int)
        or max_file_bytes < 1
    ):
        raise InvalidInputError(
            f"max_file_bytes must be a positive integer, got {shown(max_file_bytes)}."
        )
    if progress is not None and not callable(progress):
        raise InvalidInputError(
            f"progress must be None or a function called after each item, got {shown(progress)}."
        )
