"""Revision 0016: ``blocks.type`` and ``archived_blocks.type`` hold the server tool block
types (``text_editor_code_execution_tool_result`` has 38 characters; PostgreSQL refused it in
the 32 that 0015 allowed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import inspect

from contextstore import ContextStore, MigrationError
from contextstore.storage import migrate
from tests.conftest import POSTGRES_URL, postgres_schema_store
from tests.server_tools import code_use, editor_result

LONGEST = "text_editor_code_execution_tool_result"


def _type_lengths(store: ContextStore) -> dict[str, Any]:
    columns = {
        table: {c["name"]: c["type"] for c in inspect(store.database.engine).get_columns(table)}
        for table in ("blocks", "archived_blocks")
    }
    return {table: getattr(found["type"], "length", None) for table, found in columns.items()}


def _turn(store: ContextStore) -> str:
    """A conversation whose last message holds a block of the longest type, after a
    checkpoint ``cp`` (a rollback to it archives that block)."""
    conv = store.create_conversation(id="c")
    store.append(conv.id, "user", "edit the file")
    store.checkpoint(conv.id, "cp")
    store.append(conv.id, "assistant", [code_use(EDITOR, EDITOR_TOOL), editor_result(EDITOR)])
    return conv.id


def _archived_types(store: ContextStore) -> set[str]:
    with store.database.engine.connect() as connection:
        return set(connection.execute(sa.text("SELECT type FROM archived_blocks")).scalars())


EDITOR, EDITOR_TOOL = "srvtoolu_05", "text_editor_code_execution"


def test_sqlite_widens_the_column_and_keeps_rows_and_views(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "m.db") as store:
        views = set(inspect(store.database.engine).get_view_names())
        store.create_conversation(id="old")
        store.append("old", "user", "kept")
        engine = store.database.engine
        migrate.downgrade(engine, is_sqlite=True, revision="0015")
        assert _type_lengths(store) == {"blocks": 32, "archived_blocks": 32}
        migrate.upgrade(engine, is_sqlite=True)
        assert _type_lengths(store) == {"blocks": 64, "archived_blocks": 64}
        assert set(inspect(engine).get_view_names()) == views
        assert store.messages("old") == [{"role": "user", "content": "kept"}]
        assert store.render(_turn(store))[1]["content"][1]["type"] == LONGEST
        assert store.rollback("c", to="cp").removed["blocks"] == 2
        assert LONGEST in _archived_types(store)


def test_the_downgrade_refuses_while_a_longer_type_is_stored(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "m.db") as store:
        _turn(store)
        engine = store.database.engine
        with pytest.raises(MigrationError, match="block type of 38 characters"):
            migrate.downgrade(engine, is_sqlite=True, revision="0015")
        assert _type_lengths(store)["blocks"] == 64  # rolled back
        store.delete_conversation("c")
        migrate.downgrade(engine, is_sqlite=True, revision="0015")
        migrate.upgrade(engine, is_sqlite=True)


def test_postgres_refused_the_long_type_before_and_takes_it_after() -> None:
    if not POSTGRES_URL:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    store, cleanup = postgres_schema_store()
    try:
        engine = store.database.engine
        migrate.downgrade(engine, is_sqlite=False, revision="0015")
        assert _type_lengths(store) == {"blocks": 32, "archived_blocks": 32}
        with pytest.raises(sa.exc.DataError), engine.begin() as connection:
            connection.execute(
                sa.text(
                    "INSERT INTO blocks (conversation_id, message_idx, block_idx, type, data, "
                    "node_type, token_count) VALUES ('x', 0, 0, :t, '{}', 'tool_output', 0)"
                ),
                {"t": LONGEST},
            )
        migrate.upgrade(engine, is_sqlite=False)
        assert _type_lengths(store) == {"blocks": 64, "archived_blocks": 64}
        conv = _turn(store)
        assert store.render(conv)[1]["content"][1]["type"] == LONGEST
        assert store.rollback(conv, to="cp").removed["blocks"] == 2
        assert LONGEST in _archived_types(store)
    finally:
        cleanup()
