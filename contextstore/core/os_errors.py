"""The files a call writes for its caller (a backup, an export, a recovered store): what
may be written over, and their ``OSError`` as the store's own errors, so the caller reads
what happened and what to do, and the command line gives its exit code.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from contextstore.core.errors import (
    ContextStoreError,
    InvalidInputError,
    ReadOnlyLocationError,
    StorageFullError,
)

NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
"""``errno`` values of a place that cannot be written: a read-only file system, missing
permissions."""

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""``errno`` values of a full disk or quota, or a file grown past the file system's limit."""


def os_error(exc: OSError, doing: str, target: Path | None = None) -> ContextStoreError:
    """The store's error for ``exc``, raised while ``doing`` (``"write the backup"``):
    :class:`ReadOnlyLocationError` where nothing may be written,
    :class:`StorageFullError` when space ran out, :class:`InvalidInputError` otherwise (a
    folder where a file should be, a name too long...).

    ``target``: the file the caller asked for, named instead of ``exc``'s file (the
    temporary file written beside it, a name the caller never gave)."""
    shown = target if target is not None else exc.filename
    where = f" ({shown})" if shown else ""
    reason = exc.strerror or str(exc)
    if exc.errno in NO_SPACE:
        return StorageFullError(f"could not {doing}: {reason}{where}; free space and retry.")
    if exc.errno in NOT_WRITABLE:
        return ReadOnlyLocationError(
            f"could not {doing}: {reason}{where}; pick a location you can write."
        )
    return InvalidInputError(f"could not {doing}: {reason}{where}.")


@contextmanager
def os_errors(doing: str, target: Path | None = None) -> Iterator[None]:
    """Inside the block, an ``OSError`` is raised again as :func:`os_error` says."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, doing, target) from exc


def check_regular_targets(paths: Sequence[Path]) -> None:
    """Refuse to write over anything but a regular file (a folder, a device such as
    ``/dev/null``, a pipe or a socket would be replaced by the file), or below a file.

    Raises:
        InvalidInputError: one of ``paths`` exists and is not a regular file, the nearest
            of its folders that exists is a file, or the system refuses to look it up (a
            name too long).
    """
    for path in paths:
        with os_errors("write the file", path):  # a name too long for the file system
            _check_regular_target(path)


def _check_regular_target(path: Path) -> None:
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


def missing_folder(path: Path) -> Path | None:
    """The folder that would hold ``path`` when it does not exist (a typo in the path, or a
    folder not made yet), else None: it exists, or a file stands where a folder should
    (:func:`check_regular_targets` says so).

    What writes a file the caller named (a backup, an export, a report) refuses such a
    path rather than make the folders: a mistyped folder made silently hides the file
    where nobody looks, as ``cp`` and a shell's ``>`` refuse it too.

    Raises:
        OSError: the system refuses to look the path up (a name too long).
    """
    folder = path.absolute().parent
    if folder.exists():
        return None
    nearest = next((p for p in folder.parents if p.exists()), None)
    return path.parent if nearest is None or nearest.is_dir() else None


def check_folder_exists(path: Path, what: str) -> None:
    """Refuse to write ``what`` (``"the backup"``) at ``path`` when the folder to hold it
    does not exist or a file stands where a folder should.

    Raises:
        InvalidInputError: that folder is not there; nothing was written.
    """
    with os_errors(f"write {what}", path):  # a name too long for the file system
        _check_regular_target(path)
        folder = missing_folder(path)
    if folder is not None:
        raise InvalidInputError(f"{missing_folder_text(folder, what)} Nothing was written.")


def missing_folder_text(folder: Path, what: str | None = None) -> str:
    """The refusal of a missing ``folder`` to write ``what`` in: one wording for the
    library and the command line (whose message names the argument instead of ``what``)."""
    written = "" if what is None else f", so {what} cannot be written there"
    return f"the folder {folder} does not exist{written}; create it first or correct the path."
