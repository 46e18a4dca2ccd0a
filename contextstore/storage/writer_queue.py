"""The queue writers of one SQLite file wait in, across processes.

SQLite admits one writer at a time; one that finds the lock taken waits in SQLite's busy
handler, which polls with sleeps of 1 ms and more (5, 10, ... 100 ms as the wait grows),
while a contextstore append holds the lock for well under a millisecond. With several
processes appending, most of their time went into those sleeps. Here each write
transaction first takes an exclusive ``flock`` of a file beside the database
(``<database>-writer``), trying it every 50-500 microseconds while another process holds
it, then takes SQLite's lock uncontended. The kernel releases the lock of
a process that dies, so a killed writer never leaves it held.

The queue is an optimisation only: SQLite's own locking still decides who writes. Writers
that do not queue (another program, a store opened where the lock file cannot be created,
a platform without ``flock``) meet the busy handler as before.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contextstore.storage.engine import DatabaseTarget

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_SUFFIX = "-writer"
"""Appended to the database file's name to name the queue's lock file."""

MAX_WAIT = 2.0
"""Seconds a writer waits in the queue before it goes on to SQLite's busy handling."""

FIRST_POLL, LAST_POLL = 0.00005, 0.0005
"""The wait between two tries of the lock grows from the first to the last (seconds):
far shorter than the busy handler's sleeps, and bounded, so no wait is unbounded."""


class WriterQueue:
    """An exclusive lock shared by every process writing one SQLite file."""

    def __init__(self, database: Path) -> None:
        self.path = Path(f"{database}{LOCK_SUFFIX}")
        self._fd: int | None = None
        self._failed = False
        self._pid = os.getpid()

    def _descriptor(self) -> int | None:
        if self._pid != os.getpid():
            # A forked child must not share its parent's open file description (its lock
            # would be the parent's): it opens the file anew.
            self._fd, self._failed, self._pid = None, False, os.getpid()
        if self._fd is None and not self._failed and fcntl is not None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                self._failed = True
        return self._fd

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Wait for this process's turn to write, and hold it inside the block.

        The caller holds its process's writer lock already (threads of one store never
        meet here) and does not nest turns. The wait is bounded by :data:`MAX_WAIT`: a
        holder that does not let go (another store of this thread with a transaction
        open on the same file) leaves the writer to SQLite's busy handling, which ends in
        :class:`~contextstore.core.errors.DatabaseBusyError` as without the queue.
        """
        fd = self._descriptor()
        if fd is None or not _locked(fd):
            yield
            return
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the lock file (the file itself stays, for the other processes)."""
        if self._fd is not None and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None


def _locked(fd: int) -> bool:
    """Take the lock of ``fd``, trying until :data:`MAX_WAIT` has passed; False when it
    could not be taken."""
    deadline = time.monotonic() + MAX_WAIT
    pause = FIRST_POLL
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 1.5, LAST_POLL)
        except OSError:
            return False


def writer_queue(target: DatabaseTarget, *, read_only: bool) -> WriterQueue | None:
    """The queue for a store's writers: for a SQLite file opened to write, given by its
    path (not a ``file:`` URI, whose path SQLite parses itself)."""
    if read_only or target.sqlite_path is None or "uri=true" in target.url.lower():
        return None
    return WriterQueue(target.sqlite_path)
