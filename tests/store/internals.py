"""The one place store tests look beneath the public API: settings of a live connection.

Durability is a property of the connections the store's engine hands out, which no public
method reports. Everything else in the store tests goes through ``ContextStore``; if the
storage layer changes how it holds its engine, this helper is the only code to follow it.
"""

from __future__ import annotations

from contextlib import ExitStack

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
