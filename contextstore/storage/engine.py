"""Engines and transactions: SQLite settings on our engine only, bounded retries on busy.

SQLite (the default) is opened with WAL, foreign keys on, a busy timeout, a page size
chosen by measurement and a documented durability level, all through a ``connect``
listener on the engine contextstore creates (never a global listener). A write
transaction takes the write lock at ``BEGIN IMMEDIATE``, so two writers never deadlock
upgrading a read lock; a read transaction is a plain ``BEGIN`` and sees one snapshot.
PostgreSQL (psycopg 3) uses the same code; writers serialise per conversation by locking
its row.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from sqlalchemy import Connection as Connection
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import StaticPool

from contextstore.core.errors import (
    ConcurrentChangeError,
    ContextStoreError,
    CorruptDatabaseError,
    DatabaseBusyError,
    IntegrityViolationError,
    InvalidInputError,
    ReadOnlyError,
    ReadOnlyLocationError,
    StorageFullError,
)
from contextstore.core.validate import check_choice
from contextstore.storage.sql import pipelined
from contextstore.storage.sqlite_file import (
    RECOVER_HINT,
    create_database_file,
    inspect_database_file,
    read_only_uri,
    writable_location,
)

T = TypeVar("T")
Durability = Literal["full", "normal"]
DURABILITIES: tuple[Durability, ...] = ("full", "normal")
"""SQLite ``synchronous`` levels a store may be opened with (``full`` is the default)."""

BUSY_TIMEOUT_MS = 5_000
PAGE_SIZE_MEASURED: dict[int, tuple[float, float, float]] = {
    4_096: (2.07, 1.19, 1.59),
    8_192: (1.48, 1.25, 1.83),
    16_384: (1.38, 1.33, 2.28),
}
"""File size over content by page size, for the benchmark's 10,000 messages with 2 KB tool
results / 5,000 texts log-uniform from 100 B to 20 KB / the two real Cline histories (166
messages, 0.58 MB), from ``contextstore bench --workloads pages --sizes 10000 --no-peers
--cline-tasks ../shared/real/cline`` on 2026-12-01 (README "Performance", "Disk")."""
PAGE_SIZE = 8_192
"""8 KiB: the page size with the least file over content across the three measurements of
:data:`PAGE_SIZE_MEASURED` (a test checks it is their best). 4 KiB pages hold one 2 KB row
each (half the file empty); 16 KiB pages leave half a page free after long texts, and every
table and index of an empty store takes one page (36 of them: 0.34 MB at 8 KiB, 0.66 MB at
16 KiB), which is most of a small history's file. Applies to new files only (SQLite fixes
the page size when the first table is made; an existing file keeps its own until VACUUM)."""
WRITE_ATTEMPTS = 8


@dataclass(frozen=True)
class DatabaseTarget:
    """Where a store lives: a SQLAlchemy URL plus whether it is a SQLite file."""

    url: str
    sqlite_path: Path | None
    in_memory: bool

    @property
    def is_sqlite(self) -> bool:
        """True for SQLite files and in-memory databases."""
        return self.url.startswith("sqlite")


def resolve_target(location: str | os.PathLike[str] | None, default: Path) -> DatabaseTarget:
    """Turn a path, a SQLAlchemy URL, ``":memory:"`` or None into a :class:`DatabaseTarget`."""
    if location is None:
        location = default
    text = os.fspath(location)
    if text in (":memory:", "sqlite://", "sqlite:///:memory:"):
        return DatabaseTarget("sqlite://", None, True)
    if "://" in text:
        try:
            url = make_url(text)
        except ArgumentError as exc:
            raise InvalidInputError(f"{text!r} is not a valid database URL: {exc}.") from exc
        if url.get_backend_name() == "sqlite":
            database = url.database
            if not database or database == ":memory:":
                return DatabaseTarget("sqlite://", None, True)
            return DatabaseTarget(text, Path(database), False)
        if url.get_backend_name() == "postgresql" and url.drivername == "postgresql":
            text = url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        return DatabaseTarget(text, None, False)
    path = Path(text).expanduser()
    return DatabaseTarget(f"sqlite:///{path}", path, False)


def make_engine(
    target: DatabaseTarget,
    *,
    durability: Durability = "full",
    read_only: bool = False,
    engine_kwargs: dict[str, Any] | None = None,
) -> Engine:
    """Create the engine for ``target`` with contextstore's settings applied to it alone."""
    check_choice("durability", durability, DURABILITIES)
    kwargs = dict(engine_kwargs or {})
    if target.in_memory:
        engine = create_engine(
            "sqlite://",
            poolclass=StaticPool,
            connect_args={"check_same_thread": False},
            **kwargs,
        )
    elif target.is_sqlite:
        assert target.sqlite_path is not None
        url = _sqlite_file_url(target, read_only=read_only)
        kwargs.setdefault("max_overflow", -1)
        engine = create_engine(url, connect_args={"check_same_thread": False}, **kwargs)
    else:
        # Each thread holds its connection (see Database), so there is no checkout to ping on;
        # a connection the server dropped is replaced on its next use.
        kwargs.setdefault("max_overflow", -1)
        engine = create_engine(target.url, **kwargs)
    if target.is_sqlite:
        _configure_sqlite(engine, durability, in_memory=target.in_memory, read_only=read_only)
    return engine


def _sqlite_file_url(target: DatabaseTarget, *, read_only: bool) -> str:
    """Check the file before SQLite sees it, create a new one, and choose how to open it.

    Raises:
        InvalidInputError: a read-only store was asked for a file that does not exist.
        CorruptDatabaseError: the file is not a whole SQLite database (an existing
            zero-length file included).
        ReadOnlyLocationError: the store was opened for writing where nothing can be written.
    """
    path = target.sqlite_path
    assert path is not None
    if read_only:
        if not path.exists():
            raise InvalidInputError(
                f"{path} does not exist; a read-only store needs an existing database."
            )
        inspect_database_file(path)
        return f"sqlite:///{read_only_uri(path)}&uri=true"
    if not writable_location(path):
        raise ReadOnlyLocationError(
            f"{path} is in a location that cannot be written (a read-only file, directory or "
            "medium); open it with read_only=True (--read-only on the command line) to read "
            "it, or copy it somewhere writable."
        )
    inspect_database_file(path)
    create_database_file(path, PAGE_SIZE)
    return target.url


def _configure_sqlite(engine: Engine, durability: str, *, in_memory: bool, read_only: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver's own implicit transactions are switched off; "begin" below emits BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if read_only:
                # Nothing that writes or needs the file's lock: the file may be on a
                # read-only medium (and durability is moot without writes).
                cursor.execute("PRAGMA query_only = ON")
            else:
                if not in_memory:
                    cursor.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                    _enable_wal(cursor)
                cursor.execute(f"PRAGMA synchronous = {durability.upper()}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        raw: Any = connection.connection.driver_connection
        if raw.in_transaction:
            return  # Database began it on the driver; SQLAlchemy joins it.
        mode = connection.get_execution_options().get("contextstore_begin", "DEFERRED")
        raw.execute(_BEGIN[mode])


_BEGIN = {mode: f"BEGIN {mode}" for mode in ("DEFERRED", "IMMEDIATE")}


def _enable_wal(cursor: Any) -> None:
    """Switch the file to WAL once; later connections find it already set.

    Changing the journal mode needs the file to itself, and SQLite does not apply the busy
    timeout to that change: when several processes open a new file at once, the losers
    see "database is locked" at once. They wait and retry, within a bound.
    """
    cursor.execute("PRAGMA journal_mode")
    if str(cursor.fetchone()[0]).lower() == "wal":
        return
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.01
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.25)


def _driver_error(exc: BaseException) -> BaseException | None:
    """The driver's own exception behind ``exc`` (SQLAlchemy wraps them; statements run on
    the driver raise them directly), or None when ``exc`` is not a database error."""
    if isinstance(exc, DBAPIError):
        return exc.orig if isinstance(exc.orig, BaseException) else exc
    if isinstance(exc, sqlite3.Error):
        return exc
    if type(exc).__module__.startswith("psycopg"):
        return exc
    return None


def _is_integrity(driver: BaseException) -> bool:
    if isinstance(driver, sqlite3.IntegrityError):
        return True
    code = getattr(driver, "sqlstate", None)
    return isinstance(code, str) and code.startswith("23")


def _is_busy(driver: BaseException) -> bool:
    if isinstance(driver, sqlite3.OperationalError):
        text = str(driver).lower()
        return "locked" in text or "busy" in text
    return getattr(driver, "sqlstate", None) in ("40001", "40P01", "55P03")


def _is_read_only(driver: BaseException) -> bool:
    return isinstance(driver, sqlite3.OperationalError) and "readonly" in str(
        driver
    ).lower().replace("-", "").replace(" ", "")


_SQLITE_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
_POSTGRES_CORRUPT = ("XX001", "XX002")
_POSTGRES_FULL = ("53100",)
_POSTGRES_READ_ONLY = ("25006",)


def _sqlite_code(driver: BaseException) -> str:
    name = getattr(driver, "sqlite_errorname", None)
    return name if isinstance(name, str) else ""


def classify_database_error(exc: BaseException) -> ContextStoreError | None:
    """The store's error for a damaged, full or read-only database behind ``exc``, or None.

    SQLite's result codes (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``, ``SQLITE_FULL``,
    ``SQLITE_READONLY``) and PostgreSQL's SQLSTATEs (``XX001``/``XX002`` data or index
    corrupted, ``53100`` disk full, ``25006`` a read-only server) are recognised; other
    errors are left to the caller.
    """
    driver = _driver_error(exc)
    if driver is None:
        return None
    code = _sqlite_code(driver)
    state = getattr(driver, "sqlstate", None)
    reason = str(driver).strip().splitlines()[0] if str(driver).strip() else type(driver).__name__
    if code.startswith(_SQLITE_CORRUPT) or state in _POSTGRES_CORRUPT:
        return CorruptDatabaseError(
            f"the database is damaged ({reason}); 'contextstore check' shows where; {RECOVER_HINT}."
        )
    if code.startswith("SQLITE_FULL") or state in _POSTGRES_FULL:
        return StorageFullError(
            f"the disk or quota is full ({reason}); the write was rolled back, so the store is "
            "unchanged and still readable. Free space and retry."
        )
    if code.startswith("SQLITE_READONLY") or state in _POSTGRES_READ_ONLY:
        return ReadOnlyLocationError(
            f"the database cannot be written there ({reason}); check the file's and its "
            "directory's permissions, or open the store with read_only=True (--read-only on "
            "the command line). Nothing was written."
        )
    return None


@contextmanager
def classified_errors() -> Iterator[None]:
    """Damaged, full and read-only databases raised as the store's errors (for opening)."""
    try:
        yield
    except ContextStoreError:
        raise
    except Exception as exc:
        classified = classify_database_error(exc)
        if classified is None:
            raise
        raise classified from exc


def _is_unstorable(driver: BaseException) -> bool:
    """A value PostgreSQL cannot hold (NUL in text or jsonb, an unencodable character)."""
    return getattr(driver, "sqlstate", None) in ("22P05", "22021")


class _Held:
    """A connection kept open for one thread, closed when the thread's state goes away."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.pid = os.getpid()

    def usable(self) -> bool:
        return (
            self.pid == os.getpid()
            and not self.connection.closed
            and not self.connection.invalidated
        )

    def close(self) -> None:
        if self.pid == os.getpid() and not self.connection.closed:
            self.connection.close()

    def __del__(self) -> None:
        # At interpreter shutdown or on a dead connection, closing may fail: nothing to do.
        with contextlib.suppress(Exception):
            self.close()


class _ThreadState(threading.local):
    """What one thread has open: its held connection, and the transaction calls join."""

    held: _Held | None = None
    joined: Connection | None = None
    kind: str | None = None
    """``"read"``, ``"write"`` or ``"transaction"`` while ``joined`` is set."""


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
    ) -> None:
        self.engine = engine
        self.serialize_reads = serialize_reads
        self.is_sqlite = is_sqlite
        self.read_only = read_only
        self._local_writer = threading.RLock()
        self._thread = _ThreadState()
        self._shared: _Held | None = None

    @property
    def in_transaction(self) -> bool:
        """True inside :meth:`transaction` on the calling thread."""
        return self._thread.kind == "transaction"

    def _held(self) -> Connection:
        """The calling thread's connection (the shared one for an in-memory database)."""
        if self.serialize_reads:
            if self._shared is None or not self._shared.usable():
                self._shared = _Held(self.engine.connect())
            return self._shared.connection
        held = self._thread.held
        if held is None or not held.usable():
            if held is not None:
                held.close()
            held = _Held(self.engine.connect())
            self._thread.held = held
        return held.connection

    def close(self) -> None:
        """Close the calling thread's connection and every pooled one."""
        for held in (self._thread.held, self._shared):
            if held is not None:
                held.close()
        self._thread.held = None
        self._shared = None
        self.engine.dispose()

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
        with self._local_writer if self.serialize_reads else _nothing():
            with classified_errors():
                connection = self._held()
                _begin(connection, self.is_sqlite, write=False)
            with (
                classified_errors(),
                _rolled_back_on_error(connection),
                self._joined(connection, "read"),
            ):
                yield connection
                _end_read(connection)

    def write(self, work: Callable[[Connection], T], *, pipeline: bool = False) -> T:
        """Run ``work`` in one write transaction, retrying it while the database is busy.

        ``work`` may run more than once, so it must not change anything but the database.
        Inside an open write transaction, ``work`` runs once in a savepoint of it. With
        ``pipeline`` (for work made of :class:`~contextstore.storage.sql.Statement` calls
        only), PostgreSQL gets the transaction in psycopg's pipeline mode: ``BEGIN`` goes out
        with the first statement and ``COMMIT`` with the last writes, so an append is two
        round trips. SQLAlchemy statements cannot run inside (their results arrive late).

        Raises:
            ReadOnlyError: the store was opened read-only.
            DatabaseBusyError: other writers held the lock through every attempt.
        """
        self.check_writable()
        joined = self._thread.joined
        if joined is not None and self._thread.kind != "read":
            with _translated_errors(), joined.begin_nested():
                return work(joined)
        if joined is not None:
            # A write from inside a read (a caller's hook reading the store, say) gets a
            # connection of its own, as it would on another thread.
            return self._write_apart(work)
        delay = 0.02
        for attempt in range(WRITE_ATTEMPTS):
            try:
                with _translated_errors(), self._local_writer:
                    connection = self._begin_write()
                    with (
                        _rolled_back_on_error(connection),
                        self._joined(connection, "write"),
                        pipelined(connection) if pipeline else _nothing(),
                    ):
                        result = work(connection)
                        _commit(connection)
                        return result
            except ConcurrentChangeError:
                raise
            except DatabaseBusyError:
                if attempt == WRITE_ATTEMPTS - 1:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")  # pragma: no cover

    def _write_apart(self, work: Callable[[Connection], T]) -> T:
        with _translated_errors(), self.engine.connect() as connection:
            if self.is_sqlite:
                connection = connection.execution_options(contextstore_begin="IMMEDIATE")
            with connection.begin():
                return work(connection)

    def _begin_write(self) -> Connection:
        connection = self._held()
        _begin(connection, self.is_sqlite, write=True)
        return connection

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
        with self._local_writer:
            connection = self._begin_with_retry()
            with (
                _rolled_back_on_error(connection),
                self._joined(connection, "transaction"),
                _translated_errors(),
            ):
                yield
                _commit(connection)

    def _begin_with_retry(self) -> Connection:
        delay = 0.02
        for attempt in range(WRITE_ATTEMPTS):
            try:
                with _translated_errors():
                    return self._begin_write()
            except DatabaseBusyError:
                if attempt == WRITE_ATTEMPTS - 1:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")  # pragma: no cover

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
def _nothing() -> Iterator[None]:
    yield


def _driver(connection: Connection) -> Any:
    return connection.connection.driver_connection


def _begin(connection: Connection, is_sqlite: bool, *, write: bool) -> None:
    """Open a transaction on the driver itself (SQLAlchemy's begin costs more than SQLite
    takes to run it): ``BEGIN IMMEDIATE`` for a SQLite write, so the write lock is taken
    up front; on PostgreSQL psycopg begins with the first statement, at the isolation level
    set here. Statements run through SQLAlchemy inside join this transaction."""
    if is_sqlite:
        _driver(connection).execute(_BEGIN["IMMEDIATE" if write else "DEFERRED"])
    else:
        _postgres_isolation(connection, None if write else "REPEATABLE READ")


def _commit(connection: Connection) -> None:
    """Commit, through SQLAlchemy when code inside used it (it then tracks the transaction)."""
    if connection.in_transaction():
        connection.commit()
    else:
        _driver(connection).commit()


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


@contextmanager
def _rolled_back_on_error(connection: Connection) -> Iterator[None]:
    """Leave the held connection idle whatever happens inside (no transaction left open)."""
    try:
        yield
    except BaseException:
        try:
            if connection.in_transaction():
                connection.rollback()
            else:
                _driver(connection).rollback()
        except Exception:
            connection.invalidate()
        raise


def _postgres_isolation(connection: Connection, level: str | None) -> None:
    """Set the isolation level psycopg will put on its next ``BEGIN`` (None: the default)."""
    raw = connection.connection.driver_connection
    import psycopg

    wanted = None if level is None else psycopg.IsolationLevel.REPEATABLE_READ
    if raw.isolation_level != wanted:  # type: ignore[union-attr]
        raw.isolation_level = wanted  # type: ignore[union-attr]


@contextmanager
def _translated_errors() -> Iterator[None]:
    """Driver errors raised by a write, as the store's own errors."""
    try:
        yield
    except Exception as exc:
        driver = _driver_error(exc)
        if driver is None:
            raise
        if _is_integrity(driver):
            # A concurrent writer got there first (two creators of one conversation id on
            # PostgreSQL), or a row broke a constraint: the transaction rolled back whole.
            raise IntegrityViolationError(
                f"the write broke a database constraint and was rolled back ({driver}); "
                "nothing was written. If another process created the same row, retry."
            ) from exc
        classified = classify_database_error(driver)
        if classified is not None:
            raise classified from exc
        if _is_read_only(driver):
            raise ReadOnlyLocationError(
                "the database file is read-only; check its permissions or open the store "
                "with read_only=True (--read-only on the command line)."
            ) from exc
        if _is_busy(driver):
            raise DatabaseBusyError(
                f"the database stayed locked by other writers for {WRITE_ATTEMPTS} attempts; "
                "retry later or reduce concurrent writers."
            ) from exc
        if _is_unstorable(driver):
            raise InvalidInputError(
                f"PostgreSQL cannot store a value of this write ({driver}); its text and JSON "
                "cannot hold NUL characters. Nothing was written."
            ) from exc
        raise
