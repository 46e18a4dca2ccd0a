"""Transactions: one held connection per thread, reads on one snapshot, writes retried on busy.

:class:`Database` is what the storage functions run inside: a read is a plain ``BEGIN``
seeing one snapshot; a write takes SQLite's write lock at ``BEGIN IMMEDIATE`` (so two
writers never deadlock upgrading a read lock) and is retried, within a bound, while other
writers hold it; on PostgreSQL writers serialise per conversation by locking its row.
Transactions are begun on the driver itself (cheaper than SQLAlchemy's begin); driver
errors leave as the store's (:mod:`.driver_errors`). The engine comes from :mod:`.engine`.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection as Connection
from sqlalchemy import Engine

from contextstore.core.errors import (
    ConcurrentChangeError,
    CorruptDatabaseError,
    DatabaseBusyError,
    InvalidInputError,
    ReadOnlyError,
)
from contextstore.storage.driver_errors import (
    classified_errors,
    classify_database_error,
    is_cancelled,
    translated_errors,
)
from contextstore.storage.engine import BEGIN_STATEMENTS, WRITE_ATTEMPTS
from contextstore.storage.idle_end import IDLE_SESSION_TIMEOUT, ended_while_idle
from contextstore.storage.wal_sync import WalSync, defer_wal_sync
from contextstore.storage.writer_queue import WriterQueue

T = TypeVar("T")


class _Held:
    """A connection kept open for one thread, closed when the thread's state goes away;
    ``wal_sync``, when set, syncs the WAL after its write transactions (see
    :mod:`.wal_sync`)."""

    def __init__(
        self, connection: Connection, wal_sync: WalSync | None = None, generation: int = 0
    ) -> None:
        self.connection = connection
        self.wal_sync = wal_sync
        self.pid = os.getpid()
        self.generation = generation

    def usable(self) -> bool:
        return (
            self.pid == os.getpid()
            and not self.connection.closed
            and not self.connection.invalidated
        )

    def close(self) -> None:
        if self.pid != os.getpid() or self.connection.closed:
            return
        if self.wal_sync is None:
            self.connection.close()
            return
        self.wal_sync.close()
        # Discarded, not returned to the pool: it runs at synchronous=NORMAL, which only
        # connections whose commits are synced after the turn may.
        self.connection.invalidate()
        self.connection.close()

    def __del__(self) -> None:
        # At interpreter shutdown (when module globals such as ``contextlib`` may already
        # be None) or on a dead connection, closing may fail: nothing to do.
        try:
            self.close()
        except Exception:
            return


class _ThreadState(threading.local):
    """What one thread has open: its held connection, and the transaction calls join."""

    held: _Held | None = None
    joined: Connection | None = None
    kind: str | None = None
    """``"read"``, ``"write"``, ``"alone"`` (a write in autocommit mode) or
    ``"transaction"`` while ``joined`` is set."""


class Database:
    """An engine plus the two kinds of transaction contextstore runs.

    Each thread keeps one connection open for its reads and writes (no pool checkout, no
    ping per call); it is closed when the thread ends or the database is closed. Calls made
    while a transaction is open on the thread join it: reads see its rows; writes run in a
    savepoint, so a refused call leaves nothing behind. A write transaction may also be
    opened explicitly with :meth:`transaction`; it commits or rolls back as a whole.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        is_sqlite: bool,
        read_only: bool = False,
        serialize_reads: bool = False,
        writer_queue: WriterQueue | None = None,
        sync_after_turn: Path | None = None,
    ) -> None:
        """``sync_after_turn``: the SQLite file whose WAL the writes sync themselves once
        their turn is over (durability "full", see :mod:`.wal_sync`); None when SQLite
        syncs inside the commit, or nothing is synced."""
        self.engine = engine
        self.sync_after_turn = sync_after_turn
        self.writer_queue = writer_queue
        self.serialize_reads = serialize_reads
        self.is_sqlite = is_sqlite
        self.read_only = read_only
        self._local_writer = threading.RLock()
        self._thread = _ThreadState()
        self._shared: _Held | None = None
        self.closed = False
        """Set by :meth:`shut`: every later call is refused (:meth:`check_open`)."""
        self._generation = 0
        """Bumped when a PostgreSQL connection is found dropped: the server usually drops
        every connection at once (a restart, a failover, an administrator), so each thread's
        held connection older than the bump is replaced before its next call instead of
        failing that call in turn."""
        if not serialize_reads:  # an in-memory database is the forked child's own copy
            _track(_FORKABLE, self)

    @property
    def in_transaction(self) -> bool:
        """True inside :meth:`transaction` on the calling thread."""
        return self._thread.kind == "transaction"

    def check_open(self) -> None:
        """Refuse a call on a closed store, before any connection is made.

        Raises:
            InvalidInputError: :meth:`shut` ran (a file store would quietly open new
                connections that nothing closes; an in-memory one has lost its tables).
        """
        if self.closed:
            raise InvalidInputError(
                "this store is closed (by close(), or at the end of its with block); open "
                "the database again with ContextStore.open() to go on using it."
            )

    def _held(self) -> Connection:
        """The calling thread's connection (the shared one for an in-memory database)."""
        self.check_open()
        if self.serialize_reads:
            if self._shared is None or not self._shared.usable():
                self._shared = _Held(self.engine.connect())
            return self._shared.connection
        held = self._thread.held
        if held is None or not held.usable() or held.generation != self._generation:
            if held is not None:
                if held.generation != self._generation:
                    held.connection.invalidate()  # not back to the pool: likely dropped
                held.close()
            held = self._hold(self.engine.connect())  # from the pool, where it sat idle too
            self._thread.held = held
        if not self.is_sqlite:
            held = self._replaced_if_ended(held)
        return held.connection

    def _replaced_if_ended(self, held: _Held) -> _Held:
        """``held``, or a new connection in its place when the server ended it while it sat
        idle (see :mod:`.idle_end`): for its ``idle_session_timeout``, silently (the call
        had not reached the server); for anything else (an administrator's termination, a
        shutdown), as a connection found dropped is (the caller's error handling sees the
        server's own error, and every thread replaces its connection)."""
        ended = ended_while_idle(_driver(held.connection))
        if ended is None:
            return held
        held.connection.invalidate()
        held.close()
        self._thread.held = None
        # The pool's idle connections sat as long, or were ended with this one.
        self.engine.dispose()
        if getattr(ended, "sqlstate", None) != IDLE_SESSION_TIMEOUT:
            self._generation += 1
            raise ended
        held = self._hold(self.engine.connect())
        self._thread.held = held
        return held

    def _hold(self, connection: Connection) -> _Held:
        """``connection`` as the calling thread's, with what syncs its commits after the
        turn when the store does that (see :mod:`.wal_sync`)."""
        if self.sync_after_turn is None:
            held = _Held(connection, generation=self._generation)
        else:
            held = _Held(connection, defer_wal_sync(_driver(connection), self.sync_after_turn))
        return _track(_HELD, held)

    def _disown_pool(self) -> None:
        """In a forked child: leave the connections pooled by the parent to the parent.

        They are the parent's sockets and SQLite handles: handed to a thread of the child,
        a PostgreSQL connection would carry both processes' statements at once (the
        parent's failed with psycopg's own errors), and closing them (``close()`` in the
        child) ended the parent's PostgreSQL sessions. The old pool is kept, unclosed, for
        the child's life; the child connects anew."""
        _INHERITED.append(self.engine.pool)
        self.engine.dispose(close=False)

    def _sync_after_turn(self) -> None:
        """Sync the WAL the calling thread's last write transaction committed to, when its
        connection leaves that to the store (see :mod:`.wal_sync`)."""
        held = self._thread.held
        if held is not None and held.wal_sync is not None:
            held.wal_sync.sync()

    def shut(self) -> None:
        """:meth:`close`, for good: every later call is refused (:meth:`check_open`)."""
        self.closed = True
        self.close()

    def close(self) -> None:
        """Close the calling thread's connection and every pooled one (a later call
        opens a new one)."""
        for held in (self._thread.held, self._shared):
            if held is not None:
                held.close()
        self._thread.held = None
        self._shared = None
        self.engine.dispose()
        if self.writer_queue is not None:
            self.writer_queue.close()

    @contextmanager
    def _joined(self, connection: Connection, kind: str) -> Iterator[Connection]:
        self._thread.joined, self._thread.kind = connection, kind
        try:
            yield connection
        finally:
            self._thread.joined, self._thread.kind = None, None

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction: every query inside sees the same snapshot."""
        joined = self._thread.joined
        if joined is not None:
            yield joined
            return
        with self._local_writer if self.serialize_reads else _NOTHING:
            with classified_errors(self.engine):
                connection = self._held()
                self._begin(connection, write=False)
            with (
                classified_errors(self.engine),
                self._rolled_back_on_error(connection),
                self._joined(connection, "read"),
            ):
                yield connection
                _end_read(connection)

    def write(
        self, work: Callable[[Connection], T], *, pipeline: bool = False, alone: bool = False
    ) -> T:
        """Run ``work`` in one write transaction, retrying it while the database is busy.

        ``work`` may run more than once, so it must not change anything but the database.
        Inside an open write transaction, ``work`` runs once in a savepoint of it. With
        ``pipeline`` (for work made of :class:`~contextstore.storage.sql.Statement` calls
        only), PostgreSQL gets the transaction in psycopg's pipeline mode: statements whose
        results are not read wait in the pipeline and go out with the ``COMMIT``, in one
        round trip (psycopg syncs after ``BEGIN``, one more). SQLAlchemy statements cannot
        run inside (their results arrive late). With ``alone`` (PostgreSQL only, for work
        whose one writing statement is a :class:`~contextstore.storage.sql.Statement`, which
        reads only after it), the statement is its own transaction: the connection is in
        autocommit mode, so there is no ``BEGIN`` or ``COMMIT`` to send and the server
        commits as the statement ends, in one round trip.

        Raises:
            ReadOnlyError: the store was opened read-only.
            DatabaseBusyError: other writers held the lock through every attempt.
        """
        self.check_writable()
        joined = self._thread.joined
        if joined is not None and self._thread.kind != "read":
            with (
                _busy_in_transaction(self._thread.kind == "transaction"),
                translated_errors(self.engine),
                joined.begin_nested(),
            ):
                return work(joined)
        if joined is not None:
            # A write from inside a read (a caller's hook reading the store, say) gets a
            # connection of its own, as it would on another thread.
            return self._write_apart(work)
        if alone and not self.is_sqlite:
            return _retried_while_busy(lambda: self._write_alone(work))

        def attempt() -> T:
            with translated_errors(self.engine), self._local_writer, self._turn():
                return self._committed(self._begin_write(), work, pipeline)

        result = _retried_while_busy(attempt)
        self._sync_after_turn()
        return result

    def _committed(
        self, connection: Connection, work: Callable[[Connection], T], pipeline: bool
    ) -> T:
        """``work`` and the commit, in the write transaction begun on ``connection``, which
        calls on this thread join; rolled back on any error. This is :meth:`_joined` inside
        :meth:`_rolled_back_on_error` written out: every append runs it, and the two
        generators cost more than the rest of it."""
        thread = self._thread
        thread.joined, thread.kind = connection, "write"
        try:
            try:
                if pipeline:
                    return _pipelined(connection, work)
                result = work(connection)
                _commit(connection)
                return result
            finally:
                thread.joined, thread.kind = None, None
        except BaseException:
            self._roll_back(connection)
            raise

    def _write_alone(self, work: Callable[[Connection], T]) -> T:
        """``work`` on the held connection in autocommit mode (see :meth:`write`)."""
        with translated_errors(self.engine), self._local_writer:
            connection = self._held()
            raw = _driver(connection)
            raw.autocommit = True
            try:
                with self._rolled_back_on_error(connection), self._joined(connection, "alone"):
                    return work(connection)
            finally:
                _end_autocommit(connection)
                self._note_if_dropped(connection)

    def _write_apart(self, work: Callable[[Connection], T]) -> T:
        self.check_open()
        with translated_errors(self.engine), self.engine.connect() as connection:
            if self.is_sqlite:
                connection = connection.execution_options(contextstore_begin="IMMEDIATE")
            with connection.begin():
                return work(connection)

    def _turn(self) -> contextlib.AbstractContextManager[None]:
        """This process's turn among the file's writers (see :mod:`.writer_queue`)."""
        return _NOTHING if self.writer_queue is None else self.writer_queue.turn()

    def _begin_write(self) -> Connection:
        connection = self._held()
        self._begin(connection, write=True)
        return connection

    def _begin(self, connection: Connection, *, write: bool) -> None:
        """Begin a transaction on the held ``connection``; a connection found dead here (the
        first statement after the server dropped it) is noted like one found dead later."""
        try:
            _begin(connection, self.is_sqlite, write=write)
        except BaseException:
            self._roll_back(connection)
            raise

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction around everything the calling thread does inside it.

        The write lock is taken at the start (retried while other writers hold it), so
        the body runs once. Nested use joins the outer transaction.

        Raises:
            ReadOnlyError: the store was opened read-only.
            DatabaseBusyError: other writers held the lock through every attempt.
        """
        self.check_writable()
        if self._thread.kind in ("write", "transaction"):
            yield
            return
        with self._local_writer, self._turn():
            connection = self._begin_with_retry()
            with (
                self._rolled_back_on_error(connection),
                self._joined(connection, "transaction"),
                translated_errors(self.engine),
            ):
                yield
                _commit(connection)
        self._sync_after_turn()

    def _begin_with_retry(self) -> Connection:
        def attempt() -> Connection:
            with translated_errors(self.engine):
                return self._begin_write()

        return _retried_while_busy(attempt)

    @contextmanager
    def _rolled_back_on_error(self, connection: Connection) -> Iterator[None]:
        """Leave the held connection idle whatever happens inside (no transaction left
        open)."""
        try:
            yield
        except BaseException:
            self._roll_back(connection)
            raise

    def _roll_back(self, connection: Connection) -> None:
        """Roll back what an error interrupted (see :func:`_roll_back`), noting a
        connection found dropped."""
        _roll_back(connection)
        self._note_if_dropped(connection)

    def _note_if_dropped(self, connection: Connection) -> None:
        """When ``connection`` turned out dead (invalidated, or broken in the driver), have
        every thread replace its PostgreSQL connection before its next call (see
        ``_generation``). SQLite's are left alone: an in-memory database lives only as long
        as its connection."""
        if self.is_sqlite:
            return
        if connection.invalidated or _driver(connection).closed:  # psycopg: closed when broken
            self._generation += 1
            # The pool's idle connections were dropped too; checked-out ones stay with the
            # threads holding them until the generation check replaces them.
            self.engine.dispose()

    def check_writable(self) -> None:
        """Refuse a write on a store opened read-only (before any hook runs).

        Raises:
            ReadOnlyError: the store was opened read-only.
        """
        if self.read_only:
            raise ReadOnlyError(
                "this store was opened read-only; open it without read_only=True to write."
            )


@contextmanager
def _busy_in_transaction(in_transaction: bool) -> Iterator[None]:
    """A write inside :meth:`Database.transaction` that waited out its lock wait (PostgreSQL's
    ``lock_timeout``, another transaction holding a row it needs) says so: it is not tried
    again, and the whole transaction is undone. The retried write's words ("for 8
    attempts") were wrong there: two imports of one folder at once on PostgreSQL, the second
    waiting 5 s on a conversation the first had just written, said so after one wait."""
    try:
        yield
    except DatabaseBusyError as exc:
        if not in_transaction or type(exc) is not DatabaseBusyError or is_cancelled(exc):
            raise
        raise DatabaseBusyError(
            "another transaction held a row this write needed (a conversation another "
            "import or program was writing) for the whole lock wait, and the write was part "
            "of a larger transaction (an import is one), which is not tried again: it was "
            "rolled back whole, so nothing it wrote was kept. Retry once the other writer "
            "has finished."
        ) from exc.__cause__


def _retried_while_busy(attempt: Callable[[], T]) -> T:
    """Run ``attempt`` until the database is not busy, at most :data:`WRITE_ATTEMPTS` times,
    sleeping a jittered, doubling delay (20 ms up to 1 s) between tries.

    A :class:`ConcurrentChangeError` is raised at once: the same work would meet the same
    change again; the caller has to plan anew. So is a statement the server cancelled (its
    ``statement_timeout``): each attempt would wait out the timeout again.
    """
    delay = 0.02
    for number in range(WRITE_ATTEMPTS):
        try:
            return attempt()
        except ConcurrentChangeError:
            raise
        except DatabaseBusyError as exc:
            if number == WRITE_ATTEMPTS - 1 or is_cancelled(exc):
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")  # pragma: no cover


_NOTHING: contextlib.AbstractContextManager[None] = contextlib.nullcontext()

_FORKABLE: weakref.WeakSet[Database] = weakref.WeakSet()
"""Every database of this process whose connections a forked child must not use (all but
in-memory ones, which the child has a copy of)."""
_HELD: weakref.WeakSet[_Held] = weakref.WeakSet()
"""Every connection a thread of this process holds (see :meth:`Database._hold`)."""
_REGISTRY = threading.Lock()
"""Guards the two sets; held across a fork, so that no child inherits it taken."""
_CARRIED: list[_Held] = []
"""The held connections, referenced while the process forks (see :func:`_before_fork`)."""
_INHERITED: list[object] = []
"""In a forked child, the parent's connections and pools: kept and never touched."""

Tracked = TypeVar("Tracked", Database, _Held)


def _track(registry: weakref.WeakSet[Tracked], item: Tracked) -> Tracked:
    """Add ``item`` to ``registry`` (for the fork hooks below) and return it."""
    with _REGISTRY:
        registry.add(item)
    return item


def _before_fork() -> None:
    """Hold a reference to every held connection across the fork.

    In the child, the threads that did not fork are gone, and with them their
    thread-local connections: dropped there, SQLAlchemy would roll each back and return it
    to the pool, from which a thread of the child would take the parent's connection.
    """
    _REGISTRY.acquire()
    _CARRIED[:] = list(_HELD)


def _after_fork_in_parent() -> None:
    """The parent keeps its connections as they were."""
    _CARRIED.clear()
    _REGISTRY.release()


def _after_fork_in_child() -> None:
    """Set the parent's connections aside in the child, for good: never used, returned to a
    pool or closed there (each store of the child connects anew, see
    :meth:`Database._disown_pool`)."""
    _INHERITED.extend(_CARRIED)
    _CARRIED.clear()
    _HELD.clear()
    databases = list(_FORKABLE)
    _REGISTRY.release()
    for database in databases:
        database._disown_pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )


def _driver(connection: Connection) -> Any:
    return connection.connection.driver_connection


def _begin(connection: Connection, is_sqlite: bool, *, write: bool) -> None:
    """Open a transaction on the driver itself (SQLAlchemy's begin costs more than SQLite
    takes to run it): ``BEGIN IMMEDIATE`` for a SQLite write, so the write lock is taken
    up front; on PostgreSQL psycopg begins with the first statement, at the isolation level
    set here. Statements run through SQLAlchemy inside join this transaction."""
    if is_sqlite:
        _driver(connection).execute(BEGIN_STATEMENTS["IMMEDIATE" if write else "DEFERRED"])
    else:
        _postgres_isolation(connection, None if write else "REPEATABLE READ")


def _commit(connection: Connection) -> None:
    """Commit, through SQLAlchemy when code inside used it (it then tracks the transaction)."""
    if connection.in_transaction():
        connection.commit()
    else:
        _driver(connection).commit()


def _pipelined(connection: Connection, work: Callable[[Connection], T]) -> T:
    """``work`` and its commit, on PostgreSQL in psycopg's pipeline mode.

    The ``COMMIT`` is queued behind the statements ``work`` left unread and goes to the
    server with the pipeline's closing sync: one round trip for the last writes and the
    commit, where psycopg's ``commit()`` would sync once and leaving the pipeline again.
    An error of any of them is raised on leaving the pipeline (the caller rolls back).
    """
    if connection.dialect.name != "postgresql" or _driver(connection).pgconn.pipeline_status:
        # Not PostgreSQL, or in a pipeline already (whose end sends the statements).
        result = work(connection)
        _commit(connection)
        return result
    raw = _driver(connection)
    with raw.pipeline():
        result = work(connection)
        if connection.in_transaction():
            connection.commit()
        else:
            raw.execute("COMMIT")
    return result


def _end_read(connection: Connection) -> None:
    """End a read transaction. Its rows were read already and it changed nothing, so when
    SQLite refuses the commit after a statement met damaged pages, it is rolled back."""
    try:
        _commit(connection)
    except Exception as exc:
        if not isinstance(classify_database_error(exc), CorruptDatabaseError):
            raise
        connection.rollback()
        if _driver(connection).in_transaction:
            _driver(connection).rollback()


def _roll_back(connection: Connection) -> None:
    """Roll back what an error interrupted; a connection that cannot be rolled back is
    invalidated (the next call opens a new one)."""
    try:
        if connection.in_transaction():
            connection.rollback()
        else:
            _driver(connection).rollback()
    except Exception:
        connection.invalidate()


def _end_autocommit(connection: Connection) -> None:
    """Take the held PostgreSQL connection out of autocommit mode; a connection that cannot
    be (the server dropped it) is invalidated, so that the next call opens a new one."""
    raw = _driver(connection)
    if connection.invalidated or raw.closed:
        return
    try:
        raw.autocommit = False
    except Exception:
        connection.invalidate()


def _postgres_isolation(connection: Connection, level: str | None) -> None:
    """Set the isolation level psycopg will put on its next ``BEGIN`` (None: the default)."""
    raw = connection.connection.driver_connection
    import psycopg

    wanted = None if level is None else psycopg.IsolationLevel.REPEATABLE_READ
    if raw.isolation_level != wanted:  # type: ignore[union-attr]
        raw.isolation_level = wanted  # type: ignore[union-attr]
