"""The plumbing under every write: statements bound as the driver takes them, pipelines
opened only where they send something, and a write's transaction joined by the calls inside
it and rolled back whole when its work fails."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, Text, bindparam, insert, literal, select

from contextstore import ContextStore
from contextstore.storage.sql import Statement, pipelined

_table = Table("t", MetaData(), Column("a", Integer), Column("b", Text), Column("c", Text))

SHAPES = {
    "several names": Statement(
        lambda: insert(_table).values({n: bindparam(n) for n in ("a", "b", "c")})
    ),
    "one name": Statement(lambda: select(_table.c.a).where(_table.c.a == bindparam("a"))),
    "a fixed value": Statement(
        lambda: select(_table.c.a).where(_table.c.b == literal("x"), _table.c.a == bindparam("a"))
    ),
    "no name": Statement(lambda: select(_table.c.a)),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_values_are_bound_in_the_statement_s_order(store: ContextStore, shape: str) -> None:
    statement = SHAPES[shape]
    params: dict[str, Any] = {"a": 7, "b": None, "c": "\x00z"}
    with store.database.read() as connection:
        compiled = statement.compiled(connection)
    merged = {**compiled.defaults, **params}
    bound = compiled.bind(params)
    if compiled.order is None:  # PostgreSQL: named parameters
        assert bound == merged
    else:
        assert bound == tuple(merged[name] for name in compiled.order)
        assert isinstance(bound, tuple)


def test_sqlite_statements_run_outside_any_pipeline(file_store: ContextStore) -> None:
    with file_store.database.read() as connection:
        assert pipelined(connection) is pipelined(connection)  # the shared no-op
        with pipelined(connection):
            pass


def test_postgresql_statements_share_one_pipeline(store: ContextStore) -> None:
    """A pipeline opens where none is; inside one, no second is nested (its end would sync)."""
    if store.database.engine.dialect.name != "postgresql":
        return
    with store.database.read() as connection:
        raw: Any = connection.connection.driver_connection
        with pipelined(connection):
            assert raw.pgconn.pipeline_status
            nested = pipelined(connection)
            assert nested is pipelined(connection)  # the shared no-op, not a nested pipeline
            with nested:
                assert raw.pgconn.pipeline_status
        assert not raw.pgconn.pipeline_status


@pytest.mark.parametrize("pipeline", [False, True])
def test_calls_inside_a_write_join_its_transaction(store: ContextStore, pipeline: bool) -> None:
    conv = store.create_conversation()
    seen: list[Any] = []

    def work(connection: Any) -> str:
        with store.database.read() as inside:
            seen.append(inside is connection)
        return "done"

    assert store.database.write(work, pipeline=pipeline) == "done"
    assert seen == [True]
    _a_transaction_opens_anew(store, conv.id)


@pytest.mark.parametrize("pipeline", [False, True])
def test_a_write_whose_work_fails_leaves_nothing(store: ContextStore, pipeline: bool) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "kept")
    before = store.row_counts(conv.id)

    def work(connection: Any) -> None:
        store.checkpoint(conv.id, "lost")  # joins this write, in a savepoint of it
        raise KeyError("the work gave up")

    with pytest.raises(KeyError):
        store.database.write(work, pipeline=pipeline)
    assert store.row_counts(conv.id) == before
    assert store.checkpoints(conv.id) == []
    _a_transaction_opens_anew(store, conv.id)


def _a_transaction_opens_anew(store: ContextStore, conversation_id: str) -> None:
    """The thread left the write behind: a transaction opened now is its own, and undoes
    its calls when it fails (joined to a leftover write, it would undo nothing)."""
    before = store.row_counts(conversation_id)
    with pytest.raises(KeyError), store.transaction():
        store.append(conversation_id, "assistant", "undone")
        raise KeyError("the caller gave up")
    assert store.row_counts(conversation_id) == before
    store.append(conversation_id, "assistant", "kept")
    assert store.messages(conversation_id)[-1]["content"] == "kept"
