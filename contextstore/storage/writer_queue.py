"""The queue writers of one SQLite file wait in, across processes.

SQLite admits one writer at a time; one that finds the lock taken waits in SQLite's busy
handler, which polls with sleeps of 1 ms and more (5, 10, ... 100 ms as the wait grows),
while a contextstore append holds the lock for well under a millisecond. With several
processes appending, most of their time went into those sleeps. Here each write
transaction first takes an exclusive ``flock`` of a file beside the database
(``<database>-writer``), then takes SQLite's lock uncontended.

A writer that finds the lock free takes it at once (one non-blocking ``flock``). One that
finds it held asks its queue's helper thread to wait for it in a blocking ``flock``, which
the kernel ends the moment the holder releases (or dies), and waits for the helper's word
with a timeout: a blocking call cannot be given a timeout of its own, and polling with
sleeps left the lock idle between a release and the next try. The kernel releases the lock
of a process that dies, so a killed writer never leaves it held (a forked child closes the
descriptors it inherits, which would otherwise keep its parent's lock alive).

The queue is an optimisation only: SQLite's own locking still decides who writes. Writers
that do not queue (another program, a store opened where the lock file cannot be created,
a platform without ``flock``, a turn that has not come within :data:`MAX_WAIT`) meet the
busy handler as before.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contextstore.core.store_files import WRITER_SUFFIX
from contextstore.storage.engine import DatabaseTarget

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


MAX_WAIT = 2.0
"""Seconds a writer waits in the queue before it goes on to SQLite's busy handling."""


class WriterQueue:
    """An exclusive lock shared by every process writing one SQLite file."""

    def __init__(self, database: Path) -> None:
        self.path = Path(f"{database}{WRITER_SUFFIX}")
        self._fd: int | None = None
        self._failed = False
        self._pid = os.getpid()
        self._helper: _Helper | None = None
        _QUEUES.add(self)

    def _descriptor(self) -> int | None:
        if self._pid != os.getpid():
            # A forked child must not share its parent's open file description (its lock
            # would be the parent's), nor count on the parent's helper thread, which did
            # not survive the fork: it opens the file anew and starts its own helper. The
            # fork hook has done this already, unless the fork bypassed Python's.
            self._fd, self._failed, self._pid, self._helper = None, False, os.getpid(), None
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
        if fd is None or not self._take(fd):
            yield
            return
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _take(self, fd: int) -> bool:
        """Take the lock of ``fd``: at once when it is free, else through the helper
        within :data:`MAX_WAIT`. False when it could not be taken."""
        helper = self._helper
        # While the helper still waits in the kernel for a wait that gave up, the lock
        # is taken through that wait: a lock taken here meanwhile (the same open file
        # description) would be released by the helper when its wait ends.
        if helper is None or helper.idle():
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            except OSError:
                return False
        if helper is None:
            try:
                helper = self._helper = _Helper(fd)
            except (OSError, RuntimeError):
                return False
        return helper.wait(MAX_WAIT)

    def close(self) -> None:
        """Close the lock file (the file itself stays, for the other processes) and stop
        the helper thread."""
        fd, self._fd = self._fd, None
        helper, self._helper = self._helper, None
        if self._pid == os.getpid():
            if helper is not None:
                helper.stop()
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _forget_inherited(self) -> None:
        """In a forked child, close the descriptors copied from the parent.

        A copy keeps the parent's open file description, and with it a lock the parent
        holds, alive: were the parent killed inside its turn, the lock would stay held
        for as long as the child lives. The child opens its own when it writes.
        """
        fd, self._fd = self._fd, None
        helper, self._helper = self._helper, None
        self._failed, self._pid = False, os.getpid()
        for inherited in (fd, None if helper is None else helper.descriptor):
            if inherited is not None:
                with contextlib.suppress(OSError):
                    os.close(inherited)


class _Request:
    """One wait for the lock: ``decided`` is released once the helper knows the outcome."""

    def __init__(self) -> None:
        self.decided = threading.Lock()
        self.decided.acquire()
        self.taken = False
        self.abandoned = False


class _Helper:
    """A thread that waits in a blocking ``flock`` for its queue's waiter.

    It holds a descriptor of its own for the queue's open file description (the lock
    belongs to the description, so the waiter releases it through its own descriptor),
    which nobody else closes: its number cannot be reused by another file while the
    thread blocks on it. One wait at a time: a wait that gave up stays in the kernel
    until the lock comes; the helper then releases it, unless a later wait took it over.
    """

    def __init__(self, fd: int) -> None:
        descriptor = os.dup(fd)
        self.descriptor: int | None = descriptor
        self._mutex = threading.Lock()
        self._asked = threading.Lock()
        self._asked.acquire()
        self._request: _Request | None = None
        self._stopped = False
        try:
            threading.Thread(
                target=self._run, name="contextstore-writer-queue", daemon=True
            ).start()
        except RuntimeError:
            os.close(descriptor)
            raise

    def idle(self) -> bool:
        """True when no wait is under way in the kernel."""
        with self._mutex:
            return self._request is None

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the lock; True once it is held."""
        with self._mutex:
            request = self._request
            if request is None:
                request = self._request = _Request()
                self._asked.release()
            request.abandoned = False
        if request.decided.acquire(timeout=max(timeout, 0.0)):
            return request.taken
        with self._mutex:
            if request.decided.acquire(blocking=False):
                return request.taken
            request.abandoned = True
            return False

    def stop(self) -> None:
        """End the thread: at once when idle, else once its wait in the kernel ends
        (the lock it then takes is released)."""
        with self._mutex:
            if self._stopped:
                return
            self._stopped = True
            if self._request is None:
                self._asked.release()
            else:
                self._request.abandoned = True

    def _run(self) -> None:
        fd = self.descriptor
        assert fd is not None
        try:
            while True:
                self._asked.acquire()
                with self._mutex:
                    request = self._request
                    if request is None:
                        return
                    if self._stopped:
                        self._request = None
                        request.decided.release()
                        return
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    taken = True
                except OSError:
                    taken = False
                with self._mutex:
                    if taken and request.abandoned:
                        with contextlib.suppress(OSError):
                            fcntl.flock(fd, fcntl.LOCK_UN)
                        taken = False
                    request.taken = taken
                    self._request = None
                    request.decided.release()
                    if self._stopped:
                        return
        finally:
            self.descriptor = None
            os.close(fd)


_QUEUES: weakref.WeakSet[WriterQueue] = weakref.WeakSet()
"""Every queue of this process, for :func:`_forget_after_fork`."""


def _forget_after_fork() -> None:
    for queue in list(_QUEUES):
        queue._forget_inherited()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def writer_queue(target: DatabaseTarget, *, read_only: bool) -> WriterQueue | None:
    """The queue for a store's writers: for a SQLite file opened to write, given by its
    path or by a ``file:`` URI naming it (not one that opens it read-only)."""
    if read_only or target.sqlite_path is None or target.opens_file_read_only:
        return None
    return WriterQueue(target.sqlite_path)
