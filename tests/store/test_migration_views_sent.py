"""Revision 0017: ``active_nodes`` and ``masked_secrets`` leave out the tool results the view
drops (view rules 11), ``effective_blocks`` and ``active_nodes`` keep a rewritten list
result's other texts, ``audit_rollbacks.purged`` is 0 or 1 on both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect

from contextstore import ContextStore
from contextstore.storage import migrate
from tests.conftest import (
    POSTGRES_URL,
    assistant,
    postgres_schema_store,
    text,
    tool_result,
    tool_use,
    user,
)


def _fill(store: ContextStore) -> str:
    """Messages 2-3 hidden; message 4 answers the hidden message 3's call ``t0``, an id
    message 1 issued too (the view drops it); message 6's result is a list of two texts,
    its first rewritten; a purged rollback."""
    cid = store.create_conversation(id="c").id
    store.append_many(
        cid,
        [
            user("task"),
            assistant(tool_use("t0", "run")),
            user(tool_result("t0", "ok")),
            assistant(tool_use("t0", "run")),
            user(tool_result("t0", "[REDACTED:github_token]")),
            assistant(tool_use("t1", "write_file")),
            user(tool_result("t1", [text("first item"), text("second item")])),
        ],
    )
    store.set_deleted_range(cid, 3)
    store.add_context_update(cid, 6, 0, "rewritten result")
    store.checkpoint(cid, "cp")
    store.append(cid, "assistant", "undone")
    store.rollback(cid, to="cp", purge=True)
    return cid


def _seen(store: ContextStore) -> dict[str, Any]:
    def rows(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in store.query(sql).rows]

    return {
        "nodes": rows("SELECT node_id FROM active_nodes ORDER BY message_idx, block_idx"),
        "effective": rows("SELECT effective_text FROM effective_blocks WHERE message_idx = 6"),
        "text": rows("SELECT text FROM active_nodes WHERE message_idx = 6"),
        "masked": rows("SELECT message_idx, kind FROM masked_secrets"),
        "purged": rows("SELECT purged FROM audit_rollbacks"),
    }


FIXED = {
    "nodes": [("m0.b0",), ("m1.b0",), ("m5.b0",), ("m6.b0",)],
    "effective": [("rewritten result\nsecond item",)],
    "text": [("rewritten result\nsecond item",)],
    "masked": [],
    "purged": [(1,)],
}


def _round_trip(store: ContextStore) -> None:
    engine = store.database.engine
    is_sqlite = engine.dialect.name == "sqlite"
    views = set(inspect(engine).get_view_names())
    _fill(store)
    after = _seen(store)
    assert after == FIXED and [type(p) for (p,) in after["purged"]] == [int]
    assert [n.id for n in store.nodes("c", view="active")] == [n for (n,) in FIXED["nodes"]]
    migrate.downgrade(engine, is_sqlite=is_sqlite, revision="0016")
    before = _seen(store)
    assert ("m4.b0",) in before["nodes"]
    assert before["effective"] == before["text"] == [("rewritten result",)]
    assert before["masked"] == [(4, "github_token")]
    # PostgreSQL gave the column as a boolean, SQLite as 0/1.
    assert [type(p) for (p,) in before["purged"]] == [int if is_sqlite else bool]
    migrate.upgrade(engine, is_sqlite=is_sqlite)
    assert set(inspect(engine).get_view_names()) == views
    after = _seen(store)
    assert after == FIXED and [type(p) for (p,) in after["purged"]] == [int]


def test_sqlite_views_before_and_after(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "v.db") as store:
        _round_trip(store)


def test_postgres_views_before_and_after() -> None:
    if not POSTGRES_URL:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    store, cleanup = postgres_schema_store()
    try:
        _round_trip(store)
    finally:
        cleanup()
