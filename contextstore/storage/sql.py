"""Statements built once: SQLAlchemy Core compiled once per dialect, run on the driver.

The hot statements (an append's clock and inserts, a render's selects) run thousands of
times per process with the same shape. Building a Core expression, computing its cache key
and going through SQLAlchemy's execution context costs more than SQLite takes to run it, so
each such statement is a :class:`Statement`: built on first use, compiled once per dialect
to its SQL text, and executed on the DBAPI cursor of the SQLAlchemy connection (inside the
transaction that connection holds). The driver then reuses its own prepared statement
(``sqlite3``'s statement cache, psycopg's server-side prepare).

Values go in as the driver takes them (JSON already encoded, by :mod:`.codec`) and come out
as plain tuples. Listeners of the engine's ``before_cursor_execute`` event still see every
statement, so instrumentation and the tests that count statements keep working.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.sql.expression import ClauseElement

Params = Mapping[str, Any]


class _Compiled:
    """SQL text, the order of positional parameters (None for named ones) and the values
    of parameters the expression itself fixed (``literal``)."""

    __slots__ = ("_getter", "defaults", "order", "sql")

    def __init__(self, sql: str, order: tuple[str, ...] | None, defaults: dict[str, Any]) -> None:
        self.sql = sql
        self.order = order
        self.defaults = defaults
        # An itemgetter of two names or more gives a tuple; of one, the bare value.
        self._getter: Callable[[Params], tuple[Any, ...]] | None = (
            None if order is None or len(order) < 2 else itemgetter(*order)
        )

    def bind(self, params: Params) -> Any:
        """``params`` as the driver takes them."""
        if self.defaults:
            params = {**self.defaults, **params}
        if self._getter is not None:
            return self._getter(params)
        if self.order is None:
            return params
        return tuple([params[name] for name in self.order])


class Statement:
    """One SQL statement, named by its docstring'd function, compiled once per dialect.

    ``build`` returns the Core expression; every bound value in it must be an explicit
    ``bindparam(name)``, and calls pass values by those names.
    """

    _every: weakref.WeakSet[Statement] = weakref.WeakSet()

    def __init__(self, build: Callable[[], ClauseElement]) -> None:
        self._build = build
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()
        Statement._every.add(self)

    @classmethod
    def forget_compiled(cls) -> None:
        """Drop every statement's compiled forms, so that each is built again on next use.

        A process builds each statement once; a mutation run, which changes the code that
        builds them between tests, calls this before each test so that every test runs the
        statements its own code builds."""
        for statement in list(cls._every):
            with statement._lock:
                statement._compiled.clear()

    def compiled(self, connection: Connection) -> _Compiled:
        """The statement as compiled for ``connection``'s dialect (built on first use)."""
        dialect = connection.dialect
        found = self._compiled.get(dialect.name)
        if found is None:
            with self._lock:
                compiled = self._build().compile(dialect=dialect)
                positional = dialect.paramstyle in ("qmark", "numeric", "format")
                names = getattr(compiled, "positiontup", None) or ()
                order = tuple(names) if positional else None
                defaults = {k: v for k, v in compiled.params.items() if v is not None}
                found = _Compiled(str(compiled), order, defaults)
                self._compiled[dialect.name] = found
        return found

    def sql(self, connection: Connection) -> str:
        """The SQL text this statement runs as on ``connection``."""
        return self.compiled(connection).sql

    def run(self, connection: Connection, params: Params | None = None) -> Any:
        """Execute once; returns the driver's cursor (``fetchall``, ``rowcount``...)."""
        compiled = self.compiled(connection)
        sql = compiled.sql
        bound = compiled.bind(params or {})
        cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
        _notify(connection, cursor, sql, bound, many=False)
        cursor.execute(sql, bound)
        return cursor

    def run_many(self, connection: Connection, rows: Sequence[Params]) -> None:
        """Execute once per parameter set, in one driver call (``executemany``)."""
        if not rows:
            return
        compiled = self.compiled(connection)
        sql = compiled.sql
        bound = [compiled.bind(row) for row in rows]
        cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
        _notify(connection, cursor, sql, bound, many=True)
        cursor.executemany(sql, bound)
        cursor.close()

    def rows(self, connection: Connection, params: Params | None = None) -> list[tuple[Any, ...]]:
        """Every result row, as tuples."""
        cursor = self.run(connection, params)
        found: list[tuple[Any, ...]] = cursor.fetchall()
        cursor.close()
        return found

    def first(self, connection: Connection, params: Params | None = None) -> tuple[Any, ...] | None:
        """The first result row, or None."""
        cursor = self.run(connection, params)
        found: tuple[Any, ...] | None = cursor.fetchone()
        cursor.close()
        return found

    def scalar(self, connection: Connection, params: Params | None = None) -> Any:
        """The first column of the first row, or None when there is no row."""
        row = self.first(connection, params)
        return None if row is None else row[0]

    def count(self, connection: Connection, params: Params | None = None) -> int:
        """Rows the statement changed (``rowcount``).

        In psycopg's pipeline mode a row count is known only once the pipeline syncs: the
        statement then runs in a nested pipeline block, whose end syncs.
        """
        if connection.dialect.name == "postgresql":
            with connection.connection.driver_connection.pipeline():  # type: ignore[union-attr]
                cursor = self.run(connection, params)
        else:
            cursor = self.run(connection, params)
        changed = int(cursor.rowcount)
        cursor.close()
        return changed


_UNCHANGED: AbstractContextManager[Any] = nullcontext()


def pipelined(connection: Connection) -> AbstractContextManager[Any]:
    """On PostgreSQL, statements whose results are not read inside go to the server together
    (psycopg's pipeline mode: one round trip for all of them); elsewhere, nothing changes."""
    if connection.dialect.name != "postgresql":
        return _UNCHANGED
    raw: Any = connection.connection.driver_connection
    if raw.pgconn.pipeline_status:
        return _UNCHANGED  # already in a pipeline (a nested block would sync)
    pipeline: AbstractContextManager[Any] = raw.pipeline()
    return pipeline


def _notify(connection: Connection, cursor: Any, sql: str, params: Any, *, many: bool) -> None:
    """Tell the engine's ``before_cursor_execute`` listeners, as SQLAlchemy itself would."""
    if connection._has_events or connection.engine._has_events:
        listeners = connection.dispatch.before_cursor_execute
        if listeners:  # the engine's own listeners are of other events
            for listener in listeners:
                listener(connection, cursor, sql, params, None, many)
