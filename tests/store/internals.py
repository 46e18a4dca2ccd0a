"""Where store tests look beneath the public API: settings of a live connection, and the
SQL statements a call runs.

Durability is a property of the connections the store's engine hands out, and the number
of statements an operation costs is a property of what its engine executes; no public
method reports either. If the storage layer changes how it holds its engine, these helpers
are the code to follow it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from sqlalchemy import event

from contextstore import ContextStore


def connection_settings(store: ContextStore, name: str, connections: int) -> list[str]:
    """SQLite ``PRAGMA name`` or PostgreSQL ``SHOW name`` as text (SQLite's ``synchronous``
    FULL reads ``"2"``), read on ``connections`` connections of the store's own engine held
    open together, so the pool has to hand out that many distinct ones."""
    engine = store.database.engine
    statement = f"PRAGMA {name}" if engine.dialect.name == "sqlite" else f"SHOW {name}"
    with ExitStack() as held:
        opened = [held.enter_context(engine.connect()) for _ in range(connections)]
        return [str(c.exec_driver_sql(statement).scalar_one()) for c in opened]


def connection_setting(store: ContextStore, name: str) -> str:
    """One connection's value of ``name`` (see :func:`connection_settings`)."""
    return connection_settings(store, name, 1)[0]


@contextmanager
def recorded_statements(store: ContextStore) -> Iterator[list[str]]:
    """The SQL text of each statement the store's engine runs inside the ``with`` block, in
    order (from the engine's ``before_cursor_execute`` event, which the storage layer's
    prepared statements also fire); the list is complete once the block ends."""
    seen: list[str] = []

    def record(_connection: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        seen.append(statement)

    engine = store.database.engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def held_connection_setting(store: ContextStore, name: str) -> str:
    """SQLite ``PRAGMA name`` on the connection the calling thread's reads and writes go
    through (the store holds one per thread, apart from the engine's pool)."""
    with store.database.read() as connection:
        return str(connection.exec_driver_sql(f"PRAGMA {name}").scalar_one())
