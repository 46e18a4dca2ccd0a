"""Migration 0008: the downgrade keeps every message, block and request; the upgrade types
existing blocks exactly as an append does, archived ones included, and links prepared
requests to their prompt nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, inspect, text

from contextstore import ContextStore
from contextstore.storage.migrate import downgrade, upgrade
from tests.conftest import (
    POSTGRES_URL,
    assistant,
    file_read,
    new_postgres_schema,
    tool_result,
    tool_use,
    user,
)
from tests.pg_schemas import connect_args

TOOLS = [{"name": "read_file", "description": "read", "input_schema": {"type": "object"}}]
NODE_COLUMNS = "node_type, path, line_start, line_end, token_count"


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """A database location and the engine arguments that reach it."""
    if request.param == "sqlite":
        yield str(tmp_path / "nodes.db"), {}
        return
    with new_postgres_schema() as schema:
        assert POSTGRES_URL
        yield POSTGRES_URL, connect_args(schema)


def _engine(location: str, kwargs: dict[str, Any]) -> Engine:
    url = location if "://" in location else f"sqlite:///{location}"
    return create_engine(url, **kwargs)


def _history(store: ContextStore) -> tuple[str, int]:
    cid = store.create_conversation(id="c").id
    store.append_many(
        cid,
        [
            user('<task>fix <file_content path="docs/a.md">alpha</file_content></task>'),
            assistant("looking", tool_use("t1", path="src/x.py")),
            user(file_read("t1", "src/x.py", "x = 1\n")),
            assistant(tool_use("t2", "read_file", file_path="lib.ts", offset=4, limit=2)),
            user(tool_result("t2", "export {}")),
        ],
    )
    store.prepare_request(cid, system="be careful", tools=TOOLS)
    cp = store.checkpoint(cid, "cp")
    store.append(cid, "assistant", [tool_use("t3", path="late.py")])
    store.append(cid, "user", [file_read("t3", "late.py", "late = True\n")])
    report = store.rollback(cid, to="cp")
    assert cp.ts and report.rollback_id is not None
    return cid, report.rollback_id


def _rows(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    with engine.connect() as connection:
        return [tuple(r) for r in connection.execute(text(sql))]


def _strip_archived_node_fields(engine: Engine) -> None:
    """Archived blocks as a rollback before revision 0008 kept them."""
    fields = ("node_type", "path", "line_start", "line_end", "token_count")
    if engine.dialect.name == "sqlite":
        stripped = "json_remove(data, " + ", ".join(f"'$.{f}'" for f in fields) + ")"
    else:
        stripped = "data - " + " - ".join(f"'{f}'" for f in fields)
    with engine.begin() as connection:
        changed = connection.execute(
            text(f"UPDATE archived_rows SET data = {stripped} WHERE table_name = 'blocks'")
        )
        assert changed.rowcount == 2


def test_downgrade_keeps_data_and_upgrade_types_it_again(
    target: tuple[str, dict[str, Any]],
) -> None:
    location, kwargs = target
    with ContextStore.open(location, engine_kwargs=kwargs) as store:
        cid, rollback_id = _history(store)
        messages = store.messages(cid)
        nodes = store.nodes(cid)
    engine = _engine(location, kwargs)
    is_sqlite = engine.dialect.name == "sqlite"
    typed = _rows(
        engine, f"SELECT message_idx, block_idx, {NODE_COLUMNS} FROM blocks ORDER BY 1, 2"
    )
    linked = _rows(engine, "SELECT id, system_sha256, tools_sha256 FROM api_requests ORDER BY id")
    prompts = _rows(engine, "SELECT * FROM context_nodes ORDER BY sha256")
    try:
        downgrade(engine, is_sqlite=is_sqlite, revision="0006")
        columns = {c["name"] for c in inspect(engine).get_columns("blocks")}
        assert "node_type" not in columns and "token_count" not in columns
        assert "context_nodes" not in inspect(engine).get_table_names()
        assert "pristine_nodes" not in inspect(engine).get_view_names()
        assert _rows(engine, "SELECT COUNT(*) FROM blocks") == [(len(typed),)]
        assert _rows(engine, "SELECT COUNT(*) FROM api_requests") == [(len(linked),)]
        _strip_archived_node_fields(engine)
        upgrade(engine, is_sqlite=is_sqlite)
        assert (
            _rows(
                engine, f"SELECT message_idx, block_idx, {NODE_COLUMNS} FROM blocks ORDER BY 1, 2"
            )
            == typed
        )
        assert (
            _rows(engine, "SELECT id, system_sha256, tools_sha256 FROM api_requests ORDER BY id")
            == linked
        )
        assert _rows(engine, "SELECT * FROM context_nodes ORDER BY sha256") == prompts
    finally:
        engine.dispose()
    assert any(row[1] is not None for row in linked) and len(prompts) == 2
    with ContextStore.open(location, engine_kwargs=kwargs) as store:
        assert store.messages(cid) == messages
        assert store.nodes(cid) == nodes
        # the archived blocks were typed too: restored, they are typed rows again
        store.restore(cid, rollback_id)
        restored = store.nodes(cid)[-1]
        store.check(cid)
    assert (restored.node_type, restored.path) == ("file_content", "late.py")
    assert restored.token_count > 0


def test_upgrade_types_rows_written_before_nodes_existed(tmp_path: Path) -> None:
    """Rows as revision 0006 wrote them (no node columns) get the types an append gives."""
    path = tmp_path / "old.db"
    with ContextStore.open(path) as store:
        cid, _ = _history(store)
        expected = [(n.id, n.node_type, n.path, n.line_start, n.line_end) for n in store.nodes(cid)]
    engine = _engine(str(path), {})
    try:
        downgrade(engine, is_sqlite=True, revision="0006")
        with engine.begin() as connection:
            # a block written at 0006 with nothing but its provider columns
            connection.execute(
                text(
                    "INSERT INTO messages (conversation_id, idx, ts, role, token_count, "
                    "was_string, meta) VALUES ('c', 5, 9999999999999, 'user', 9, 0, '{}')"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO blocks (conversation_id, message_idx, block_idx, type, text, "
                    "data) VALUES ('c', 5, 0, 'text', "
                    "'[read_file for ''old.py''] Result:\nold', '{}')"
                )
            )
        upgrade(engine, is_sqlite=True)
    finally:
        engine.dispose()
    with ContextStore.open(path) as store:
        found = [(n.id, n.node_type, n.path, n.line_start, n.line_end) for n in store.nodes(cid)]
    assert found[:-1] == expected
    assert found[-1] == ("m5.b0", "file_content", "old.py", None, None)
    assert ("m4.b0", "file_content", "lib.ts", 5, 6) in found
