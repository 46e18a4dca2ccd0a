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

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError
from sqlalchemy.pool import StaticPool

from contextstore.core.errors import (
    DatabaseBusyError,
    IntegrityViolationError,
    InvalidInputError,
    ReadOnlyError,
)

T = TypeVar("T")
Durability = Literal["full", "normal"]

BUSY_TIMEOUT_MS = 5_000
PAGE_SIZE = 4_096
"""Chosen by measurement (``contextstore bench``): rows just over 2 KB waste about half of
4 KiB pages, but for an agent's realistic mix of message sizes (log-uniform 100 B-20 KB)
contextstore's file is smallest with 4 KiB pages (17.6 % overhead, against 21.5 % with
8 KiB and 27.8 % with 16 KiB)."""
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


def create_private_file(path: Path) -> None:
    """Create ``path`` (and its directory) readable by its owner only, if it is missing.

    Several processes may open a new database at the same instant: whoever loses the race
    to create the file simply uses the winner's (``O_EXCL`` makes the creation atomic).
    """
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def make_engine(
    target: DatabaseTarget,
    *,
    durability: Durability = "full",
    read_only: bool = False,
    engine_kwargs: dict[str, Any] | None = None,
) -> Engine:
    """Create the engine for ``target`` with contextstore's settings applied to it alone."""
    if durability not in ("full", "normal"):
        raise InvalidInputError(
            f"durability {durability!r} is not valid; use 'full' (the default) or 'normal'."
        )
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
        if read_only:
            if not target.sqlite_path.exists():
                raise InvalidInputError(
                    f"{target.sqlite_path} does not exist; a read-only store needs an "
                    "existing database."
                )
            url = f"sqlite:///file:{target.sqlite_path}?mode=ro&uri=true"
        else:
            create_private_file(target.sqlite_path)
            url = target.url
        engine = create_engine(url, connect_args={"check_same_thread": False}, **kwargs)
    else:
        engine = create_engine(target.url, pool_pre_ping=True, **kwargs)
    if target.is_sqlite:
        _configure_sqlite(engine, durability, in_memory=target.in_memory, read_only=read_only)
    return engine


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
                cursor.execute("PRAGMA query_only = ON")
            elif not in_memory:
                cursor.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                _enable_wal(cursor)
            cursor.execute(f"PRAGMA synchronous = {durability.upper()}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = connection.get_execution_options().get("contextstore_begin", "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")


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


def _is_busy(exc: BaseException) -> bool:
    if isinstance(exc, OperationalError):
        text = str(exc.orig).lower()
        return "locked" in text or "busy" in text
    if isinstance(exc, DBAPIError):
        code = getattr(exc.orig, "sqlstate", None)
        return code in ("40001", "40P01", "55P03")
    return False


def _is_read_only(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError) and "readonly" in str(exc.orig).lower().replace(
        "-", ""
    ).replace(" ", "")


class Database:
    """An engine plus the two kinds of transaction contextstore runs.

    A write transaction may also be opened explicitly with :meth:`transaction`; every
    :meth:`write` and :meth:`read` on the same thread then joins it (each write in a
    savepoint, so a refused call inside leaves nothing behind), and it commits or rolls
    back as a whole.
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
        self._open = threading.local()

    @property
    def in_transaction(self) -> bool:
        """True inside :meth:`transaction` on the calling thread."""
        return getattr(self._open, "connection", None) is not None

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction: every query inside sees the same snapshot."""
        joined: Connection | None = getattr(self._open, "connection", None)
        if joined is not None:
            yield joined
            return
        if self.serialize_reads:
            # One shared in-memory connection: a reader must not interleave with a writer.
            with self._local_writer, self.engine.connect() as connection, connection.begin():
                yield connection
            return
        with self.engine.connect() as connection:
            if not self.is_sqlite:
                # READ COMMITTED (PostgreSQL's default) gives each statement its own snapshot:
                # a render reads messages, then blocks, then overlays, and a rollback
                # committing in between would show messages without their blocks.
                # REPEATABLE READ takes one snapshot for the whole read transaction.
                connection = connection.execution_options(isolation_level="REPEATABLE READ")
            with connection.begin():
                yield connection

    def write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one write transaction, retrying it while the database is busy.

        ``work`` may run more than once, so it must not change anything but the database.
        Inside :meth:`transaction`, ``work`` runs once in a savepoint of that transaction.

        Raises:
            ReadOnlyError: the store was opened read-only.
            DatabaseBusyError: other writers held the lock through every attempt.
        """
        self._refuse_if_read_only()
        joined: Connection | None = getattr(self._open, "connection", None)
        if joined is not None:
            with _translated_errors(), joined.begin_nested():
                return work(joined)
        delay = 0.02
        for attempt in range(WRITE_ATTEMPTS):
            try:
                with (
                    _translated_errors(),
                    self._local_writer,
                    self._write_connection() as connection,
                    connection.begin(),
                ):
                    return work(connection)
            except DatabaseBusyError:
                if attempt == WRITE_ATTEMPTS - 1:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction around everything the calling thread does inside it.

        The write lock is taken at the start (retried while other writers hold it), so
        the body runs once. Nested use joins the outer transaction.

        Raises:
            ReadOnlyError: the store was opened read-only.
            DatabaseBusyError: other writers held the lock through every attempt.
        """
        self._refuse_if_read_only()
        if self.in_transaction:
            yield
            return
        with self._local_writer:
            connection, outer = self._begin_with_retry()
            self._open.connection = connection
            try:
                with _translated_errors():
                    yield
                    outer.commit()
            finally:
                self._open.connection = None
                if outer.is_active:
                    outer.rollback()
                connection.close()

    def _begin_with_retry(self) -> tuple[Connection, Any]:
        delay = 0.02
        for attempt in range(WRITE_ATTEMPTS):
            connection = self._write_connection()
            try:
                with _translated_errors():
                    return connection, connection.begin()
            except DatabaseBusyError:
                connection.close()
                if attempt == WRITE_ATTEMPTS - 1:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
            except BaseException:
                connection.close()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _write_connection(self) -> Connection:
        connection = self.engine.connect()
        if self.is_sqlite:
            connection = connection.execution_options(contextstore_begin="IMMEDIATE")
        return connection

    def _refuse_if_read_only(self) -> None:
        if self.read_only:
            raise ReadOnlyError(
                "this store was opened read-only; open it without read_only=True to write."
            )


@contextmanager
def _translated_errors() -> Iterator[None]:
    """Driver errors raised by a write, as the store's own errors."""
    try:
        yield
    except IntegrityError as exc:
        # A concurrent writer got there first (two creators of one conversation id on
        # PostgreSQL), or a row broke a constraint: the transaction rolled back whole.
        raise IntegrityViolationError(
            f"the write broke a database constraint and was rolled back ({exc.orig}); "
            "nothing was written. If another process created the same row, retry."
        ) from exc
    except DBAPIError as exc:
        if _is_read_only(exc):
            raise ReadOnlyError(
                "the database file is read-only; check its permissions or open the store read-only."
            ) from exc
        if _is_busy(exc):
            raise DatabaseBusyError(
                f"the database stayed locked by other writers for {WRITE_ATTEMPTS} attempts; "
                "retry later or reduce concurrent writers."
            ) from exc
        raise
