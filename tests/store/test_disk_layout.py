"""What a store keeps on disk, checked by counts: the page size of a new file, the one
index ``blocks`` has besides its key (and the rows it covers), no value in two columns,
and revision 0010 moving an existing file to that layout and back without a VACUUM."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, inspect, text

from contextstore import ContextStore
from contextstore.processors.pipeline import Pipeline
from contextstore.storage import engine as storage_engine
from contextstore.storage import migrate
from contextstore.storage.tables import TOOL_CALLS_ONLY, blocks
from tests.conftest import assistant, tool_result, tool_use, user


def _history(calls: int) -> list[Any]:
    messages: list[Any] = [user("task")]
    for number in range(calls):
        messages.append(
            assistant(f"reading {number}", tool_use(f"t{number}", path=f"f{number}.py"))
        )
        messages.append(user(tool_result(f"t{number}", f"contents of f{number}.py " * 40)))
    return messages


def _sqlite(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _block_indexes(connection: sqlite3.Connection) -> dict[str, str]:
    return dict(
        connection.execute(
            "SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'blocks'"
        ).fetchall()
    )


def test_the_configured_page_size_is_the_measured_best() -> None:
    measured = storage_engine.PAGE_SIZE_MEASURED
    assert storage_engine.PAGE_SIZE in measured
    best = min(measured, key=lambda size: sum(measured[size]))
    assert best == storage_engine.PAGE_SIZE


def test_a_new_file_reads_back_the_configured_page_size(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "new.db") as store:
        store.append(store.create_conversation().id, _history(2))
    with _sqlite(tmp_path / "new.db") as connection:
        assert connection.execute("PRAGMA page_size").fetchone()[0] == storage_engine.PAGE_SIZE


def test_blocks_have_their_key_and_one_index_of_tool_calls(tmp_path: Path) -> None:
    path = tmp_path / "layout.db"
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        store.append(store.create_conversation().id, _history(5))
    with _sqlite(path) as connection:
        indexes = _block_indexes(connection)
        assert sorted(indexes) == ["ix_blocks_tool_use_id", "sqlite_autoindex_blocks_1"]
        assert indexes["ix_blocks_tool_use_id"].endswith(f"WHERE {TOOL_CALLS_ONLY}")
        entries = connection.execute(
            "SELECT count(*) FROM blocks INDEXED BY ix_blocks_tool_use_id "
            f"WHERE {TOOL_CALLS_ONLY} AND tool_use_id IS NOT NULL"
        ).fetchone()[0]
        calls, results = (
            connection.execute("SELECT count(*) FROM blocks WHERE type = ?", (kind,)).fetchone()[0]
            for kind in ("tool_use", "tool_result")
        )
        assert (entries, calls, results) == (5, 5, 5)


def test_the_calls_lookup_reads_the_partial_index(tmp_path: Path) -> None:
    """A result appended by another store object is typed from the stored call: that one
    SELECT is planned on ``ix_blocks_tool_use_id`` (the plan, not a time, is checked)."""
    path = tmp_path / "plan.db"
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        conv = store.create_conversation()
        store.append(conv.id, _history(3)[:-1])
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        lookups: list[tuple[str, Any]] = []

        def seen(_conn: Any, _cursor: Any, statement: str, params: Any, *_rest: Any) -> None:
            if "FROM blocks" in statement and TOOL_CALLS_ONLY in statement:
                lookups.append((statement, params))

        event.listen(store.database.engine, "before_cursor_execute", seen)
        store.append(conv.id, [user(tool_result("t2", "late result"))])
        event.remove(store.database.engine, "before_cursor_execute", seen)
        assert store.nodes(conv.id)[-1].path == "f2.py"
    assert len(lookups) == 1
    with _sqlite(path) as connection:
        plan = connection.execute(f"EXPLAIN QUERY PLAN {lookups[0][0]}", lookups[0][1]).fetchall()
    assert any("USING INDEX ix_blocks_tool_use_id" in row[-1] for row in plan), plan


def test_no_block_value_is_kept_in_two_columns(tmp_path: Path) -> None:
    """Text, call ids and tool names live in their columns; ``data`` holds what no column
    holds (a call's input), so every text and id is stored once."""
    path = tmp_path / "once.db"
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        store.append(store.create_conversation().id, _history(4))
    with _sqlite(path) as connection:
        rows = connection.execute("SELECT type, text, tool_use_id, tool_name, data FROM blocks")
        for kind, body, use_id, name, data in rows:
            for value in (body, use_id, name):
                assert value is None or f'"{value}"' not in data, (kind, data)
            assert kind not in data


def test_the_tables_say_the_same_indexes_as_the_file() -> None:
    assert {index.name for index in blocks.indexes} == {"ix_blocks_tool_use_id"}


def test_revision_0010_changes_indexes_only_and_keeps_the_page_size(tmp_path: Path) -> None:
    """An existing file moves to the new indexes and back; its rows and its page size stay
    (nothing vacuums it), and the store reads and appends as before."""
    path = tmp_path / "old.db"
    messages = _history(6)
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        conv = store.create_conversation()
        store.append(conv.id, messages)
    with _sqlite(path) as connection:
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        rows = connection.execute("SELECT * FROM blocks ORDER BY 1, 2, 3").fetchall()
    engine = create_engine(f"sqlite:///{path}")
    migrate.downgrade(engine, is_sqlite=True, revision="0009")
    with _sqlite(path) as connection:
        old = _block_indexes(connection)
        assert sorted(old) == [
            "ix_blocks_path",
            "ix_blocks_tool_use_id",
            "sqlite_autoindex_blocks_1",
        ]
        assert old["ix_blocks_tool_use_id"].endswith("WHERE tool_use_id IS NOT NULL")
        assert connection.execute("SELECT * FROM blocks ORDER BY 1, 2, 3").fetchall() == rows
    migrate.upgrade(engine, is_sqlite=True)
    with engine.connect() as connection:
        assert {ix["name"] for ix in inspect(connection).get_indexes("blocks")} == {
            "ix_blocks_tool_use_id"
        }
        assert connection.execute(text("PRAGMA page_size")).scalar() == page_size
    engine.dispose()
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        assert store.messages(conv.id) == messages
        store.append(conv.id, "assistant", "after the round trip")
        assert len(store.messages(conv.id)) == len(messages) + 1


def test_every_backend_has_the_one_partial_index_of_tool_calls(store: ContextStore) -> None:
    store.append(store.create_conversation().id, _history(2))
    with store.database.engine.connect() as connection:
        indexes = inspect(connection).get_indexes("blocks")
        assert [index["name"] for index in indexes] == ["ix_blocks_tool_use_id"]
        assert indexes[0]["column_names"] == ["conversation_id", "tool_use_id"]
        if connection.dialect.name == "postgresql":
            definition = connection.execute(
                text(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                    "AND indexname = 'ix_blocks_tool_use_id'"
                )
            ).scalar_one()
            assert definition.endswith("WHERE ((type)::text = 'tool_use'::text)"), definition
