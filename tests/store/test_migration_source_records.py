"""Revision 0005 (source_records, api_requests.details): down and up again keep the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect

from contextstore import ContextStore
from contextstore.core.rows import MessageRow, RequestRow, SourceRecordRow
from contextstore.storage import migrate
from tests.conftest import POSTGRES_URL, postgres_schema_store, user

START = 1_700_000_000_000


def _fill(store: ContextStore) -> str:
    conv = store.create_conversation(id="c", created_ts=START)
    store.import_timeline(
        conv.id,
        [
            SourceRecordRow(START + 1, "cline", "say:text", {"say": "text"}),
            MessageRow(START + 2, user("hello")),
            RequestRow(START + 3, tokens_in=7, details={"tokens": {"input": 7}}),
        ],
    )
    store.checkpoint(conv.id, "cp", ts=START + 4)
    return conv.id


def _round_trip(store: ContextStore, is_sqlite: bool) -> dict[str, Any]:
    engine = store.database.engine
    migrate.downgrade(engine, is_sqlite=is_sqlite, revision="0003")
    names = set(inspect(engine).get_table_names())
    columns = {c["name"] for c in inspect(engine).get_columns("api_requests")}
    migrate.upgrade(engine, is_sqlite=is_sqlite)
    return {"tables": names, "columns": columns}


def _check(store: ContextStore, seen: dict[str, Any]) -> None:
    assert "source_records" not in seen["tables"] and "details" not in seen["columns"]
    assert store.messages("c") == [user("hello")]
    (request,) = store.requests("c")
    assert (request.tokens_in, request.details) == (7, None)
    assert store.source_records("c") == []  # the records went with their table
    assert [c.label for c in store.checkpoints("c")] == ["cp"]
    assert store.render("c", format="gemini")
    store.import_timeline("c", [SourceRecordRow(START + 10, "cline", "k", {"again": True})])


def _views(store: ContextStore) -> dict[str, str | None]:
    engine = store.database.engine
    return {
        name: inspect(engine).get_view_definition(name) for name in inspect(engine).get_view_names()
    }


def test_sqlite_down_and_up_keeps_the_rest_and_every_view(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "m.db") as store:
        _fill(store)
        views = _views(store)
        seen = _round_trip(store, is_sqlite=True)
    with ContextStore.open(tmp_path / "m.db") as store:
        _check(store, seen)
        assert _views(store) == views and "request_usage" in views


def test_postgres_down_and_up_keeps_the_rest() -> None:
    if not POSTGRES_URL:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    store, cleanup = postgres_schema_store()
    try:
        _fill(store)
        seen = _round_trip(store, is_sqlite=False)
        _check(store, seen)
    finally:
        cleanup()
