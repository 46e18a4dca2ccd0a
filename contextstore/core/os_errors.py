"""Errors of the files a call writes for its caller (a backup, an export, a recovered
store), as the store's own errors: the caller then reads what happened and what to do,
and the command line gives its exit code, instead of an ``OSError`` escaping.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

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


def os_error(exc: OSError, doing: str) -> ContextStoreError:
    """The store's error for ``exc``, raised while ``doing`` (``"write the backup"``):
    :class:`ReadOnlyLocationError` where nothing may be written,
    :class:`StorageFullError` when space ran out, :class:`InvalidInputError` otherwise (a
    folder where a file should be, a name too long...)."""
    where = f" ({exc.filename})" if exc.filename else ""
    reason = exc.strerror or str(exc)
    if exc.errno in NO_SPACE:
        return StorageFullError(f"could not {doing}: {reason}{where}; free space and retry.")
    if exc.errno in NOT_WRITABLE:
        return ReadOnlyLocationError(
            f"could not {doing}: {reason}{where}; pick a location you can write."
        )
    return InvalidInputError(f"could not {doing}: {reason}{where}.")


@contextmanager
def os_errors(doing: str) -> Iterator[None]:
    """Inside the block, an ``OSError`` is raised again as :func:`os_error` says."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, doing) from exc
