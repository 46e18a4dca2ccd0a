"""The write-ahead log synced after a writer's turn instead of inside it.

With ``synchronous=FULL`` SQLite syncs its WAL inside every ``COMMIT``, while the writer
holds the file's write lock and contextstore's writer queue: a second process that wants to
write waits out the first one's sync, and the syncs of several processes run one after
another. For a store opened with durability ``"full"``, the connections contextstore writes
through (one held per thread, see :mod:`.database`) run with ``synchronous=NORMAL`` instead,
and the store syncs the WAL itself (``fdatasync``) once the commit is done and the locks are
let go, before the write returns to its caller. A write that has returned is on disk, as
before; the syncs of several writers now overlap, and the file system commits them together.

Why this keeps the promise:

- A commit's frames follow every earlier commit's in the WAL, so the sync after a write
  covers it and everything committed before it.
- With ``NORMAL`` SQLite still syncs the WAL before a checkpoint copies it into the database
  file, the database file after, and the WAL's header before a log starts anew; so frames a
  new log overwrites were on disk already.
- SQLite deletes or replaces the WAL only when no connection has the database open: the
  descriptor opened after a commit, on a connection still open, names the file that commit
  wrote, for as long as that connection stays open (the descriptor is closed with it).

What changes: another connection may read a commit up to one sync before it is on disk (a
write that depends on it lands later in the same WAL, so its own sync covers both). Files
whose journal is not a WAL keep ``synchronous=FULL``: SQLite syncs them inside the commit.
So do all files where Python has no ``os.fdatasync`` (macOS and Windows, where naming it
failed every write with ``AttributeError``; on Windows a descriptor opened read-only could
not be flushed either).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from contextstore.core.errors import ContextStoreError
from contextstore.core.store_files import WAL_SUFFIX


class WalSync:
    """Syncs the WAL of one SQLite file for one connection, after its write transactions.

    Made by :func:`defer_wal_sync` for a connection whose commits no longer sync; the
    descriptor is opened at the first :meth:`sync` (the WAL exists once a commit wrote it)
    and closed by :meth:`close`, which the connection's holder calls before closing it.
    """

    def __init__(self, wal: Path) -> None:
        self.wal = wal
        self._fd: int | None = None
        self._pid = os.getpid()

    def sync(self) -> None:
        """Flush the WAL's data to the disk (``fdatasync``).

        Raises:
            ContextStoreError: the disk reported an error: the write is committed (other
                connections read it) but may not survive a power loss.
        """
        try:
            if self._fd is None:
                self._fd = os.open(self.wal, os.O_RDONLY)  # not inherited (PEP 446)
            os.fdatasync(self._fd)
        except OSError as exc:
            raise ContextStoreError(
                f"the write was committed, but syncing {self.wal} to the disk failed "
                f"({exc.strerror or exc}); it is stored, and may be lost if the machine stops "
                "before the disk keeps it. Check the disk, and free space if it is full."
            ) from exc

    def close(self) -> None:
        """Close the descriptor (in the process that opened it)."""
        fd, self._fd = self._fd, None
        if fd is not None and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(fd)


def defer_wal_sync(driver_connection: Any, database: Path) -> WalSync | None:
    """Switch a connection to ``synchronous=NORMAL`` and return what syncs its commits, when
    the file's journal is a WAL and the platform has ``fdatasync``; None (the connection
    left at ``FULL``) otherwise.

    Called outside any transaction (SQLite refuses to change ``synchronous`` inside one)."""
    if not hasattr(os, "fdatasync"):
        return None
    cursor = driver_connection.execute("PRAGMA journal_mode")
    mode = str(cursor.fetchone()[0]).lower()
    cursor.close()
    if mode != "wal":
        return None
    driver_connection.execute("PRAGMA synchronous = NORMAL").close()
    return WalSync(Path(f"{database}{WAL_SUFFIX}"))
