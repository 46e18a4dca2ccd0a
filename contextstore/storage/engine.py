"""Engines: where a store lives, and SQLite's settings on the engine contextstore creates.

SQLite (the default) is opened with WAL, foreign keys on, a busy timeout, a page size
chosen by measurement and a documented durability level, all through a ``connect``
listener on the engine contextstore creates (never a global listener); a ``begin``
listener makes SQLAlchemy's own transactions ``BEGIN DEFERRED`` or ``BEGIN IMMEDIATE``.
A SQLite file is checked and created by :mod:`.sqlite_file` before SQLite opens it.
PostgreSQL (psycopg 3) gets the same engine otherwise. Transactions on the engine are
:mod:`.database`'s; the driver errors they meet are named in :mod:`.driver_errors`.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from contextstore.core.errors import InvalidInputError, NotFoundError
from contextstore.core.validate import check_choice, readable_text
from contextstore.storage.paths import expand_user
from contextstore.storage.sqlite_file import (
    check_before_open,
    create_database_file,
    read_only_uri,
)

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
--cline-tasks ../shared/real/cline`` on 2026-12-01 (``docs/performance.md``, "Disk")."""
PAGE_SIZE = 8_192
"""8 KiB: the page size with the least file over content across the three measurements of
:data:`PAGE_SIZE_MEASURED` (a test checks it is their best). 4 KiB pages hold one 2 KB row
each (half the file empty); 16 KiB pages leave half a page free after long texts, and every
table and index of an empty store takes one page (36 of them: 0.34 MB at 8 KiB, 0.66 MB at
16 KiB), which is most of a small history's file. Applies to new files only (SQLite fixes
the page size when the first table is made; an existing file keeps its own until VACUUM)."""
WRITE_ATTEMPTS = 8
"""Attempts a write transaction gets while other writers hold the lock (see :mod:`.database`)."""
LOCK_TIMEOUT_MS = BUSY_TIMEOUT_MS
"""PostgreSQL's ``lock_timeout`` on the store's connections, read as each one opens: how long
one statement waits for a lock another transaction holds (a conversation's row, while that
transaction writes it), as SQLite's busy timeout bounds one attempt of a write. The wait
then ends with SQLSTATE 55P03, which the write's bounded retry takes as busy, so a write
gives up after about :data:`WRITE_ATTEMPTS` times this (``DatabaseBusyError``) where it
waited for as long as the other transaction stayed open. A connection that has a
``lock_timeout`` already (the URL's ``options=-c lock_timeout=...``) keeps it. Migrations
wait without limit."""


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

    @property
    def opens_file_read_only(self) -> bool:
        """True for a SQLite ``file:`` URI that opens its file read-only (``mode=ro``) or
        as immutable (``immutable=1``): SQLite will not write it, whatever the store asks."""
        url = make_url(self.url)
        if self.sqlite_path is None or not _is_sqlite_uri(url):
            return False
        query = url.query
        mode, immutable = query.get("mode", ""), query.get("immutable", "")
        return "ro" in _values(mode) or not {"1", "true"}.isdisjoint(_values(immutable))


def location_text(location: object) -> str:
    """``location`` (a path or a URL) as text, checked: a string or path object, not empty.

    Raises:
        InvalidInputError: any other type, a bytes path, an empty or blank location, or
            one holding a NUL character.
    """
    text = os.fspath(location) if isinstance(location, str | os.PathLike) else None
    if not isinstance(text, str):
        raise InvalidInputError(
            "a store's location is a file path or a database URL (a str or a path object), "
            f"got {type(location).__name__}."
        )
    if not text.strip():
        raise InvalidInputError(
            "the store's location is empty; pass a file path, ':memory:' or a database URL."
        )
    if "\x00" in text:
        raise InvalidInputError(
            f"the store's location {text!r} holds a NUL character, which no file name or URL "
            "can; pass a file path, ':memory:' or a database URL."
        )
    check_utf8_name(text, "the store's location")
    return text


def check_utf8_name(text: str, what: str) -> None:
    """Refuse a location or file name that is not UTF-8 text: a name in another encoding
    (Python reads its bytes as lone surrogates, ``\\udcff``), which SQLAlchemy's URLs, the
    ``file:`` URI of a read-only open and PostgreSQL's driver cannot encode; each raised
    ``UnicodeEncodeError``, an internal error on the command line.

    Raises:
        InvalidInputError: ``text`` holds a lone surrogate.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{what} {readable_text(text)} is not UTF-8 text (a name in another encoding); "
            "contextstore names databases only in UTF-8: rename the file or link to it under "
            "a UTF-8 name, or name another path."
        ) from exc


def resolve_target(location: str | os.PathLike[str] | None, default: Path) -> DatabaseTarget:
    """Turn a path, a SQLAlchemy URL, ``":memory:"`` or None into a :class:`DatabaseTarget`."""
    text = location_text(default if location is None else location)
    if text in (":memory:", "sqlite://", "sqlite:///:memory:"):
        return DatabaseTarget("sqlite://", None, True)
    if "://" in text:
        try:
            url = make_url(text)
        except (ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
            raise InvalidInputError(
                f"{shown_url(text)!r} is not a valid database URL: {exc}; write it as "
                "postgresql://USER:PASSWORD@HOST:PORT/DATABASE, or give a file path."
            ) from exc
        if url.get_backend_name() == "sqlite":
            _check_sqlite_url(text, url)
            database = url.database
            if not database or database == ":memory:":
                return DatabaseTarget("sqlite://", None, True)
            if _is_sqlite_uri(url):
                return DatabaseTarget(text, _sqlite_uri_path(text, url), False)
            return DatabaseTarget(text, Path(database), False)
        return DatabaseTarget(_postgres_url(url), None, False)
    return sqlite_file_target(expand_user(text))


def sqlite_file_target(path: Path) -> DatabaseTarget:
    """The SQLite file at ``path``, whatever its name holds.

    The URL is built, not written out: SQLAlchemy reads a ``?`` in a URL as the start of
    its query and decodes ``%xx``, so ``a?b.db`` and ``c%20d.db`` named other files (``a``,
    ``c d.db``), which were created.

    Raises:
        InvalidInputError: the name is not UTF-8 text (:func:`check_utf8_name`).
    """
    check_utf8_name(str(path), "the database file")
    return DatabaseTarget(_path_url(path), path, False)


def _path_url(path: Path) -> str:
    """The URL text of the SQLite file ``path`` (SQLAlchemy 2.1 escapes its ``?``; 2.0
    writes it as it is, so only the :class:`URL` object names the file exactly)."""
    return URL.create("sqlite", database=str(path)).render_as_string(hide_password=False)


_PASSWORD = re.compile(r"^([^:/?#]+://[^:/?#@]*:)[^@]*@")

_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def refuse_database_url(name: str, text: str, command: str) -> None:
    """Refuse a database URL given where a SQLite file is named (``recover``'s files, a
    backup's destination), unless a file of that name exists: read as a path, its ``//``
    became ``/`` and the message named a file or folder made of the URL, password shown.

    Raises:
        InvalidInputError: ``text`` is a URL (shown with its password masked).
    """
    if _URL_SCHEME.match(text) and not os.path.lexists(text):
        raise InvalidInputError(
            f"{name} {shown_url(text)!r} is a database URL, but {command} reads and writes "
            "SQLite files; name a file. A PostgreSQL database is backed up with pg_dump, "
            "restored with pg_restore and checked with pg_amcheck."
        )


_QUERY_PARAMETER = re.compile(r"([?&])([^=&#]*)=([^&#]*)")
"""One ``key=value`` of a URL's query string."""

_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
"""The libpq connection parameters that hold a secret (a URL may give them as query
parameters: ``postgresql://u@host/db?password=...``)."""


def _masked_parameter(match: re.Match[str]) -> str:
    key = urllib.parse.unquote_plus(match.group(2)).strip().lower()
    if key in _SECRET_PARAMETERS:
        return f"{match.group(1)}{match.group(2)}=***"
    return match.group(0)


def shown_url(text: str) -> str:
    """A database URL for a message: its password masked, the one before the host and those
    given as query parameters (``password``, ``sslpassword``), even in a URL that does not
    parse."""
    try:
        shown = make_url(text).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        shown = _PASSWORD.sub(r"\1***@", text)
    base, mark, query = shown.partition("?")
    if not mark:
        return shown
    return base + _QUERY_PARAMETER.sub(_masked_parameter, mark + query)


SQLITE_URL_OPTIONS = frozenset(
    {"timeout", "isolation_level", "detect_types", "check_same_thread", "cached_statements", "uri"}
)
"""The query parameters of a ``sqlite://`` URL that SQLAlchemy's sqlite3 dialect reads (it
ignores any other, with a warning, unless the database is a ``file:`` URI)."""


def _check_sqlite_url(text: str, url: URL) -> None:
    """Refuse the parts of a ``sqlite://`` URL that would be ignored: a host (the URL then
    names a file on this machine all the same) and query parameters the driver drops.

    Raises:
        InvalidInputError: naming the part and how to write the URL.
    """
    if url.host:
        raise InvalidInputError(
            f"{shown_url(text)!r} names a host ({url.host}), but a SQLite database is a file "
            "on this machine: write sqlite:///relative/path.db or sqlite:////absolute/path.db "
            "(no host), or give the path itself."
        )
    ignored = sorted(set(url.query) - SQLITE_URL_OPTIONS)
    if ignored and not _is_sqlite_uri(url):
        names = ", ".join(repr(name) for name in ignored)
        raise InvalidInputError(
            f"{shown_url(text)!r} has {names} in its query, which SQLite's driver does not "
            f"take and would ignore; drop it, or for SQLite's own URI parameters write "
            "sqlite:///file:PATH?NAME=VALUE&uri=true."
        )


def _values(value: str | tuple[str, ...]) -> set[str]:
    """A URL query parameter's values, lowercased (a repeated parameter gives several)."""
    return {v.lower() for v in ((value,) if isinstance(value, str) else value)}


def _is_sqlite_uri(url: URL) -> bool:
    """True for ``sqlite:///file:...?uri=true``: SQLite reads the database name as a URI."""
    flag = url.query.get("uri", "")
    value = flag[-1] if isinstance(flag, tuple) else flag
    return value.lower() in ("true", "1") and (url.database or "").startswith("file:")


def _sqlite_uri_path(text: str, url: URL) -> Path:
    """The file a ``file:`` URI names (percent-escapes decoded), which contextstore checks
    and creates as it does a plain path.

    Raises:
        InvalidInputError: the URI names an in-memory database or another host.
    """
    parts = urllib.parse.urlsplit(url.database or "")
    path = urllib.parse.unquote(parts.path)
    if path == ":memory:" or "memory" in url.query.get("mode", ""):
        raise InvalidInputError(
            f"{text!r} names an in-memory SQLite database; contextstore keeps an in-memory "
            "store in one connection of its own: open it as ':memory:'."
        )
    if parts.netloc not in ("", "localhost") or not path:
        raise InvalidInputError(
            f"{text!r} does not name a local SQLite file; write it as "
            "sqlite:///file:/path/to/file.db?uri=true, or give the path itself."
        )
    return expand_user(path)


POSTGRES_SCHEMES = ("postgresql", "postgresql+psycopg", "postgres")
"""URL schemes taken as PostgreSQL through psycopg 3 (``postgres`` is libpq's short form)."""


def _postgres_url(url: URL) -> str:
    """``url`` as the SQLAlchemy URL of a PostgreSQL database reached through psycopg 3.

    Raises:
        InvalidInputError: the URL names another database or driver, or psycopg is not
            installed.
    """
    if url.drivername not in POSTGRES_SCHEMES:
        if url.drivername.startswith(("postgresql+", "postgres+")):
            raise InvalidInputError(
                f"{url.drivername!r} is a PostgreSQL driver contextstore does not use; it "
                "talks to PostgreSQL through psycopg 3: write the URL as "
                "postgresql://user@host:port/database."
            )
        raise InvalidInputError(
            f"the database URL is a {url.drivername!r} one; contextstore keeps its rows in "
            "SQLite (a file path, or sqlite:///path) or PostgreSQL "
            "(postgresql://user@host:port/database)."
        )
    if importlib.util.find_spec("psycopg") is None:
        raise InvalidInputError(
            "PostgreSQL needs the psycopg driver, which is not installed: "
            'pip install "contextstore[postgres]".'
        )
    return (
        _socket_host(url).set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    )


def _socket_host(url: URL) -> URL:
    """``url`` with a Unix socket's directory written as libpq writes it in a URL's host,
    percent-encoded (``postgresql://user@%2Fvar%2Frun%2Fpostgresql/db``), moved to the
    ``host`` parameter, where SQLAlchemy passes it on: SQLAlchemy keeps a host as written,
    and the driver looked up ``%2Fvar%2Frun%2Fpostgresql`` as a host name."""
    host = urllib.parse.unquote(url.host or "")
    if not host.startswith("/") or "host" in url.query:
        return url
    return url._replace(host=None).update_query_dict({"host": host})


def make_engine(
    target: DatabaseTarget,
    *,
    durability: Durability = "full",
    read_only: bool = False,
    create: bool = True,
    engine_kwargs: dict[str, Any] | None = None,
) -> Engine:
    """Create the engine for ``target`` with contextstore's settings applied to it alone.

    ``create``: a SQLite file that does not exist is created (else refused, see
    :func:`~contextstore.storage.sqlite_file.check_before_open`)."""
    check_choice("durability", durability, DURABILITIES)
    kwargs = _engine_options(engine_kwargs)
    _refuse_own_options(kwargs, target)
    if target.in_memory:
        engine = _created(
            "sqlite://",
            poolclass=StaticPool,
            connect_args={"check_same_thread": False},
            **kwargs,
        )
    elif target.is_sqlite:
        assert target.sqlite_path is not None
        url = _sqlite_file_url(target, read_only=read_only, create=create)
        kwargs.setdefault("max_overflow", -1)
        engine = _created(url, connect_args={"check_same_thread": False}, **kwargs)
        if not read_only:  # made once the engine is, so that refused options leave no file
            create_database_file(target.sqlite_path, PAGE_SIZE)
    else:
        # Each thread holds its connection (see Database), so there is no checkout to ping on;
        # a connection the server dropped is replaced on its next use.
        kwargs.setdefault("max_overflow", -1)
        engine = _created(target.url, **kwargs)
    if target.is_sqlite:
        _configure_sqlite(engine, durability, in_memory=target.in_memory, read_only=read_only)
    else:
        _configure_postgres(engine)
    return engine


def _sqlite_file_url(target: DatabaseTarget, *, read_only: bool, create: bool) -> str | URL:
    """Check the file before SQLite sees it, and choose how to open it (a new file is
    created once the engine is made).

    Raises:
        InvalidInputError: a read-only store was asked for a file that does not exist.
        NotFoundError: the file does not exist and ``create`` is False, or the URL is a URI
            that opens its file read-only.
        CorruptDatabaseError: the file is not a whole SQLite database (an existing
            zero-length file included).
        ReadOnlyLocationError: the store was opened for writing where nothing can be written.
    """
    path = target.sqlite_path
    assert path is not None
    if target.opens_file_read_only and not path.exists():
        raise NotFoundError(
            f"there is no database at {path}; a SQLite URI with mode=ro or immutable=1 opens "
            "an existing file only."
        )
    check_before_open(path, read_only=read_only, create=create)
    if read_only:
        database, _, options = read_only_uri(path).partition("?")
        query = {**dict(urllib.parse.parse_qsl(options)), "uri": "true"}
        return URL.create("sqlite", database=database, query=query)
    if target.url == _path_url(path):
        # A path, not a URL the caller wrote: the URL object, since SQLAlchemy 2.0 reads a
        # ``?`` in the text as its query (``a?b.db`` opened a file named ``a``).
        return URL.create("sqlite", database=str(path))
    return target.url


def _engine_options(engine_kwargs: Any) -> dict[str, Any]:
    """A copy of the caller's extra ``create_engine`` arguments, checked to be a mapping of
    names.

    Raises:
        InvalidInputError: ``engine_kwargs`` is not a mapping with string keys.
    """
    if engine_kwargs is None:
        return {}
    if not isinstance(engine_kwargs, Mapping):
        got = type(engine_kwargs).__name__
    elif not all(isinstance(key, str) for key in engine_kwargs):
        got = "a key that is not a string"
    else:
        return dict(engine_kwargs)
    raise InvalidInputError(
        "engine_kwargs must be a dict of SQLAlchemy create_engine arguments by name "
        f"(for example {{'pool_size': 5}}), got {got}."
    )


def _refuse_own_options(kwargs: Mapping[str, Any], target: DatabaseTarget) -> None:
    """Refuse ``engine_kwargs`` that contextstore passes to ``create_engine`` itself for
    ``target`` (the URL; SQLite's ``connect_args``; an in-memory store's ``poolclass``):
    each raised Python's ``TypeError`` ("got multiple values for keyword argument").

    Raises:
        InvalidInputError: naming the arguments to leave out.
    """
    own = {"url"}
    if target.is_sqlite:
        own.add("connect_args")
    if target.in_memory:
        own.add("poolclass")
    taken = sorted(own & kwargs.keys())
    if taken:
        raise InvalidInputError(
            f"engine_kwargs cannot set {', '.join(taken)}: contextstore passes "
            f"{'it' if len(taken) == 1 else 'them'} to create_engine for this database; "
            f"leave {'it' if len(taken) == 1 else 'them'} out."
        )


def _created(url: str | URL, **kwargs: Any) -> Engine:
    """``create_engine(url, **kwargs)``, its refusal of an argument (a name this dialect
    and pool do not take, a value of the wrong type: a ``poolclass`` or ``module`` that is
    none raised ``AttributeError``, an ``echo`` that is no flag ``KeyError``) as
    :class:`InvalidInputError`."""
    try:
        return create_engine(url, **kwargs)
    except (TypeError, ValueError, ArgumentError, AttributeError, KeyError) as exc:
        raise InvalidInputError(
            f"SQLAlchemy refused the engine_kwargs given: {exc}; pass only arguments "
            "create_engine takes for this database."
        ) from exc


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
        raw.execute(BEGIN_STATEMENTS[mode])


def _configure_postgres(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        set_lock_timeout(dbapi_connection, LOCK_TIMEOUT_MS)


def set_lock_timeout(dbapi_connection: Any, milliseconds: int) -> None:
    """Set the session's ``lock_timeout`` on a new psycopg connection unless it has one
    already (given in the URL's ``options``, or a default of the role or database), outside
    any transaction (the setting would end with one that rolled back)."""
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    try:
        dbapi_connection.execute(
            "SELECT set_config('lock_timeout', %s, false) "
            "WHERE current_setting('lock_timeout') = '0'",
            (f"{int(milliseconds)}ms",),
        )
    finally:
        dbapi_connection.autocommit = autocommit


BEGIN_STATEMENTS = {mode: f"BEGIN {mode}" for mode in ("DEFERRED", "IMMEDIATE")}
"""SQLite's ``BEGIN`` for each mode a transaction may start in (a write takes ``IMMEDIATE``)."""


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
