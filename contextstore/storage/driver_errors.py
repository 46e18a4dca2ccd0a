"""Driver errors as the store's own: what a database error means, named once for both backends.

SQLAlchemy wraps the driver's exceptions; statements run on the driver itself (see
:mod:`.sql`) raise them bare. Either way the driver's exception decides: SQLite's result
codes and message texts, PostgreSQL's SQLSTATEs. :func:`classify_database_error` names a
damaged, full or read-only database (for opening, checking and reading);
:func:`translated_errors` adds what a write can meet besides (a broken constraint, a lock
held by other writers, a value PostgreSQL cannot store).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from contextstore.core.errors import (
    ContextStoreError,
    CorruptDatabaseError,
    DatabaseBusyError,
    DatabaseUnavailableError,
    IntegrityViolationError,
    InvalidInputError,
    ReadOnlyLocationError,
    StorageFullError,
)
from contextstore.storage.engine import WRITE_ATTEMPTS
from contextstore.storage.privileges import INSUFFICIENT_PRIVILEGE, identity, refused
from contextstore.storage.sqlite_file import RECOVER_HINT


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


def _is_unavailable(driver: BaseException) -> bool:
    """PostgreSQL could not be reached or refused or dropped the connection: a connection
    SQLSTATE (class 08, a missing database, a refused login, a server shutting down), or
    psycopg's ``OperationalError`` without one (a refused or timed-out connect)."""
    state = getattr(driver, "sqlstate", None)
    if isinstance(state, str):
        return state.startswith("08") or state in _POSTGRES_UNAVAILABLE
    return any(
        kind.__name__ == "OperationalError" and kind.__module__.startswith("psycopg")
        for kind in type(driver).__mro__
    )


def _is_dropped(driver: BaseException) -> bool:
    """PostgreSQL ended a connection that was open (an administrator's or a shutdown's
    termination, a connection lost mid-call), as opposed to one it never opened."""
    if getattr(driver, "sqlstate", None) in _POSTGRES_DROPPED:
        return True
    text = str(driver).lower()
    return _is_unavailable(driver) and any(sign in text for sign in _DROPPED_SIGNS)


_POSTGRES_DROPPED = ("57P01", "57P02", "57P05", "25P03")
"""An administrator's or a shutdown's termination, and the server's ``idle_session_timeout``
and ``idle_in_transaction_session_timeout`` (a role's or database's setting ends idle
connections)."""
_DROPPED_SIGNS = ("server closed the connection", "connection is lost", "terminating connection")
_POSTGRES_UNAVAILABLE = ("3D000", "28000", "28P01", "57P01", "57P02", "57P03")
_SQLITE_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
_POSTGRES_CORRUPT = ("XX001", "XX002")
_POSTGRES_FULL = ("53100",)
_POSTGRES_READ_ONLY = ("25006",)
_POSTGRES_CANCELLED = "57014"
"""``query_canceled``: a ``statement_timeout`` ran out, or an administrator cancelled the
statement (``pg_cancel_backend``)."""


_SQLITE_BAD_JSON = "malformed JSON"
"""SQLite's whole message when a JSON function (``json_extract``, ``json_each``, ``->>``) reads
text that is not JSON (generic ``SQLITE_ERROR``)."""


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (drivers append context lines), or its class name
    when it has no text: what a message quotes of the database's own words."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


_SQLITE_MESSAGES = {
    "database disk image is malformed": "SQLITE_CORRUPT",
    "file is not a database": "SQLITE_NOTADB",
    "database or disk is full": "SQLITE_FULL",
    "attempt to write a readonly database": "SQLITE_READONLY",
    _SQLITE_BAD_JSON: "SQLITE_ERROR",
}
"""SQLite's own message for each result code recognised here, for Python 3.10, whose
``sqlite3`` errors carry no ``sqlite_errorname`` (3.11 added it): there a damaged, full or
read-only database was an internal error. Extended codes have no message of their own."""


def sqlite_code(driver: BaseException) -> str:
    """SQLite's result code name of a ``sqlite3`` error (``SQLITE_FULL``), or ``""``."""
    name = getattr(driver, "sqlite_errorname", None)
    if isinstance(name, str):
        return name
    return _SQLITE_MESSAGES.get(first_line(driver), "")


def classify_database_error(
    exc: BaseException, engine: Engine | None = None
) -> ContextStoreError | None:
    """The store's error for a damaged, full, unreachable or read-only database behind
    ``exc``, or None.

    SQLite's result codes (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``, ``SQLITE_FULL``,
    ``SQLITE_READONLY``) and PostgreSQL's SQLSTATEs (``XX001``/``XX002`` data or index
    corrupted, ``53100`` disk full, ``25006`` a read-only server, connection failures,
    ``42501`` a privilege the role lacks, ``57014`` a cancelled statement) are recognised;
    other errors are left to the caller. ``engine``: where a refused privilege's message
    looks up the role and schema to name in the grants (a new connection, only then).
    """
    driver = _driver_error(exc)
    if driver is None:
        return None
    code = sqlite_code(driver)
    state = getattr(driver, "sqlstate", None)
    reason = first_line(driver)
    if code.startswith(_SQLITE_CORRUPT) or state in _POSTGRES_CORRUPT:
        return CorruptDatabaseError(
            f"the database is damaged ({reason}); 'contextstore check' shows where; {RECOVER_HINT}."
        )
    if code == "SQLITE_ERROR" and reason == _SQLITE_BAD_JSON:
        # Only contextstore writes these columns, and always valid JSON (PostgreSQL's jsonb
        # cannot hold anything else): a value SQLite's JSON functions cannot read is damage.
        return CorruptDatabaseError(
            f"the database holds a value that is not valid JSON ({reason}); 'contextstore "
            f"check' shows where; {RECOVER_HINT}."
        )
    if code == "SQLITE_IOERR_SHMSIZE":
        return StorageFullError(
            f"the disk or quota is full: SQLite could not grow the shared-memory index it "
            f"keeps beside the database (the -shm file; {reason}), so it cannot read or "
            "write the store; nothing was changed. Free space and retry."
        )
    if code.startswith("SQLITE_FULL") or state in _POSTGRES_FULL:
        return StorageFullError(
            f"the disk or quota is full ({reason}); the write was rolled back, so the store is "
            "unchanged and still readable. Free space and retry."
        )
    if _is_dropped(driver):
        return DatabaseUnavailableError(
            f"the database server closed the connection ({reason}); the next call opens a "
            "new one, so retry once the server is back (a write cut off during its commit "
            "may have been saved: look before repeating it)."
        )
    if _is_unavailable(driver):
        return DatabaseUnavailableError(
            f"the database server cannot be reached or refused the connection ({reason}); "
            "check the URL (host, port, database name, user) and that the server is "
            "running, then retry."
        )
    if state == INSUFFICIENT_PRIVILEGE:
        return refused(reason, None if engine is None else identity(engine), writing=False)
    if state == _POSTGRES_CANCELLED:
        return cancelled(reason)
    if state in _POSTGRES_READ_ONLY:
        situation = f"PostgreSQL refuses writes on this connection ({reason})"
        return ReadOnlyLocationError(
            f"{situation}: the server is a standby, or default_transaction_read_only is on for "
            "the role, the database or the URL's options; connect to the primary or turn the "
            "setting off, or open the store with read_only=True (--read-only on the command "
            "line). Nothing was written.",
            situation=situation,
        )
    if code.startswith("SQLITE_READONLY"):
        situation = f"the database cannot be written there ({reason})"
        return ReadOnlyLocationError(
            f"{situation}; check the file's and its directory's permissions, or open the "
            "store with read_only=True (--read-only on the command line). Nothing was written.",
            situation=situation,
        )
    return None


def cancelled(reason: str) -> DatabaseBusyError:
    """The error for a statement the server cancelled (see :data:`_POSTGRES_CANCELLED`); a
    write's bounded retry does not run it again (:func:`is_cancelled`)."""
    return DatabaseBusyError(
        f"the database server cancelled a statement ({reason}): a statement_timeout of the "
        "role, database or connection ran out, or an administrator cancelled it; nothing was "
        "written. Retry, or raise the timeout (ALTER ROLE ... SET statement_timeout, or the "
        "URL's options=-cstatement_timeout%3D...)."
    )


def is_cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is :func:`cancelled`'s error, or the driver's cancelled statement."""
    cause = exc.__cause__ if isinstance(exc, ContextStoreError) else exc
    driver = None if cause is None else _driver_error(cause)
    return driver is not None and getattr(driver, "sqlstate", None) == _POSTGRES_CANCELLED


@contextmanager
def classified_errors(engine: Engine | None = None) -> Iterator[None]:
    """Damaged, full and read-only databases raised as the store's errors (for opening and
    reading; ``engine``: see :func:`classify_database_error`)."""
    try:
        yield
    except ContextStoreError:
        raise
    except Exception as exc:
        classified = classify_database_error(exc, engine)
        if classified is None:
            raise
        raise classified from exc


def _is_unstorable(driver: BaseException) -> bool:
    """A value PostgreSQL cannot hold (NUL in text or jsonb, an unencodable character)."""
    return getattr(driver, "sqlstate", None) in ("22P05", "22021")


@contextmanager
def translated_errors(engine: Engine | None = None) -> Iterator[None]:
    """Driver errors raised by a write, as the store's own errors (``engine``: see
    :func:`classify_database_error`)."""
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
        if getattr(driver, "sqlstate", None) == INSUFFICIENT_PRIVILEGE:
            who = None if engine is None else identity(engine)
            raise refused(first_line(driver), who, writing=True) from exc
        classified = classify_database_error(driver)
        if classified is not None:
            raise classified from exc
        if _is_read_only(driver):
            raise ReadOnlyLocationError(
                "the database file is read-only; check its permissions or open the store "
                "with read_only=True (--read-only on the command line).",
                situation="the database file is read-only",
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
