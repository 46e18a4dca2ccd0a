"""How rows are laid out: each block value stored once, exactly, in the fewest statements;
revision 0006 moves old rows to that layout and back."""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, inspect, text

from contextstore import ContextStore
from contextstore.facade.render_cache import RenderCache
from contextstore.processors.pipeline import Pipeline
from contextstore.storage import history, migrate, timeline
from contextstore.storage.codec import decode_block, encode_block
from tests.conftest import assistant, open_backend, session, tool_result, tool_use, user
from tests.store.internals import recorded_statements

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="\x00"),
    min_size=1,
    max_size=8,
)
"""Ids, names and other fields: only texts may carry NUL (the exact form covers texts)."""
plain = st.fixed_dictionaries({"type": st.just("text"), "text": texts})
results = st.fixed_dictionaries(
    {
        "type": st.just("tool_result"),
        "tool_use_id": names,
        "content": st.one_of(texts, st.lists(plain, max_size=3)),
    },
    optional={"is_error": st.booleans()},
)
calls = st.fixed_dictionaries(
    {
        "type": st.just("tool_use"),
        "id": names,
        "name": names,
        "input": st.dictionaries(names, names, max_size=3),
    }
)
thinking = st.fixed_dictionaries(
    {"type": st.just("thinking"), "thinking": texts, "signature": names}
)


@settings(max_examples=300)
@given(block=st.one_of(plain, results, calls, thinking))
def test_every_block_decodes_to_itself_and_its_json_never_holds_nul(block: Any) -> None:
    kind, column, tool_use_id, tool_name, data = encode_block(block)
    assert "\\u0000" not in data and "\x00" not in data
    assert column is None or "\x00" not in column
    assert decode_block(kind, column, tool_use_id, tool_name, data, 0, 0) == block
    # PostgreSQL hands jsonb back decoded.
    assert decode_block(kind, column, tool_use_id, tool_name, json.loads(data), 0, 0) == block


def _block_rows(store: ContextStore) -> list[Any]:
    with store.database.engine.connect() as connection:
        return list(
            connection.execute(
                text("SELECT message_idx, type, text, data FROM blocks ORDER BY message_idx")
            )
        )


def test_a_tool_result_text_is_stored_once(file_store: ContextStore) -> None:
    body = "x" * 2_000
    conv = file_store.create_conversation()
    file_store.append(
        conv.id,
        [user("task"), assistant(tool_use("t1", path="a.py")), user(tool_result("t1", body))],
    )
    rows = _block_rows(file_store)
    assert [(r.type, r.data) for r in rows] == [
        ("text", "{}"),
        ("tool_use", '{"input":{"path":"a.py"}}'),
        ("tool_result", "{}"),
    ]
    assert rows[2].text == body


def test_one_append_is_three_statements_whatever_it_holds(file_store: ContextStore) -> None:
    conv = file_store.create_conversation()
    file_store.append(conv.id, session(3))
    with recorded_statements(file_store) as statements:
        file_store.append(conv.id, "user", "one more")
    assert len(statements) == 3, statements
    assert "RETURNING" in statements[0] and "message_count" in statements[0]
    with recorded_statements(file_store) as statements:
        file_store.append(conv.id, session(20)[1:])
    assert len(statements) == 3, statements


def test_an_append_on_postgresql_is_one_statement_whatever_it_holds(store: ContextStore) -> None:
    """The clock, the message rows and the block rows in one statement, which the server
    commits on its own (no BEGIN, no COMMIT): one round trip per append."""
    if store.database.engine.dialect.name != "postgresql":
        return  # SQLite: three statements (above)
    conv = store.create_conversation()
    store.append(conv.id, session(3))
    for write in (
        lambda: store.append(conv.id, "user", "one more"),
        lambda: store.append(conv.id, "assistant", [tool_use("t9", path="b.py")]),
        lambda: store.append(conv.id, "user", [tool_result("t9", "body")]),
        lambda: store.append(conv.id, session(20)[1:]),
    ):
        with recorded_statements(store) as statements:
            write()
        assert len(statements) == 1, statements
        (statement,) = statements
        assert statement.startswith("WITH") and "UPDATE conversations" in statement
        assert "INSERT INTO messages" in statement and "INSERT INTO blocks" in statement
    assert len(store.messages(conv.id)) == len(session(3)) + 3 + len(session(20)) - 1


def test_an_append_answering_a_call_the_store_does_not_remember_reads_it_first(
    store: ContextStore,
) -> None:
    """A result whose call this store did not append (another process did) is typed by the
    call read from the database, in the append's transaction; the rows are those the
    remembered call gives."""
    calls = [user("task"), assistant(tool_use("t1", path="a.py"))]
    answer = [tool_result("t1", "one\ntwo")]
    remembered, forgotten = store.create_conversation(), store.create_conversation()
    store.append(remembered.id, calls)
    store.append(remembered.id, "user", answer)
    store.append(forgotten.id, calls)
    store._recent_calls.clear()  # as in another process
    with recorded_statements(store) as statements:
        store.append(forgotten.id, "user", answer)
    assert any(s.startswith("SELECT") and "tool_use_id" in s for s in statements), statements

    def shown(conversation_id: str) -> list[tuple[Any, ...]]:
        return [
            (n.id, n.node_type, n.path, n.line_start, n.line_end, n.token_count)
            for n in store.nodes(conversation_id)
        ]

    assert shown(forgotten.id) == shown(remembered.id)
    assert shown(forgotten.id)[-1][1:3] == ("file_content", "a.py")


def test_a_rollback_moves_rows_in_the_database_in_as_many_statements_at_any_size(
    file_store: ContextStore,
) -> None:
    counted = []
    for extra in (2, 40):
        conv = file_store.create_conversation()
        file_store.append(conv.id, session(3))
        file_store.checkpoint(conv.id, "cp")
        file_store.append(conv.id, session(extra)[1:])
        with recorded_statements(file_store) as statements:
            report = file_store.rollback(conv.id, "cp")
        assert report.removed["messages"] == 2 * extra
        counted.append(len(statements))
        assert any("INSERT INTO archived_messages" in s and "SELECT" in s for s in statements)
        assert not any("json" in s.lower() for s in statements if "archived_" in s)
    assert counted[0] == counted[1]


def test_the_render_cache_is_bounded_by_bytes_not_entries() -> None:
    cache = RenderCache(max_bytes=100)
    cache.put("a", ("a",), 60)
    cache.put("b", ("b",), 40)
    assert cache.bytes == 100 and cache.get("a") == ("a",)
    cache.put("c", ("c",), 1)
    assert cache.get("b") is None and cache.get("a") == ("a",) and cache.bytes == 61
    cache.put("huge", ("h",), 101)
    assert cache.get("huge") is None and cache.bytes == 61


def test_the_render_cache_at_its_budget_and_its_recency_order() -> None:
    cache = RenderCache(max_bytes=10)
    cache.put("whole", "w", 10)  # exactly the budget fits
    assert cache.get("whole") == "w" and cache.bytes == 10 and len(cache) == 1
    cache.put("whole", "w2", 4)  # a key put again replaces its size
    assert cache.get("whole") == "w2" and cache.bytes == 4
    cache.put("a", "a", 3)
    cache.put("b", "b", 3)
    assert cache.get("whole") == "w2"  # now the most recently used
    cache.put("c", "c", 3)  # 13 bytes: the least recently used ("a") goes
    assert cache.get("a") is None
    assert [cache.get(k) for k in ("b", "c", "whole")] == ["b", "c", "w2"]
    assert cache.bytes == 10 and len(cache) == 3
    hits, misses = cache.hits, cache.misses
    cache.get("missing")
    assert (cache.hits, cache.misses) == (hits, misses + 1)
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0 and cache.get("b") is None
    cache.put("d", "d", 10)
    assert cache.bytes == 10 and cache.get("d") == "d"


def test_a_repeat_render_keeps_only_the_rewrites_in_memory(memory_store: ContextStore) -> None:
    conv = memory_store.create_conversation()
    memory_store.append(conv.id, [user("x" * 50_000), assistant("token ghp_" + "a" * 36)])
    memory_store.render(conv.id)
    assert 0 < memory_store.render_cache.bytes < 1_000


class _Rows(list[Any]):
    """A list of rows that can be watched with a weak reference."""


@pytest.mark.parametrize("masking", [True, False], ids=["masked", "plain"])
def test_a_render_lets_the_rows_it_read_go_before_it_reads_the_rewrites(
    memory_store: ContextStore, monkeypatch: pytest.MonkeyPatch, masking: bool
) -> None:
    """A render's peak memory: the history's rows as read are decoded and let go before the
    rewrites are read, so the two are never held at once (with or without the hash of the
    rows a pipeline's render is cached under)."""
    conv = memory_store.create_conversation()
    token = "ghp_R8x2Kq9ZtW4mN7vB3cL6yP1dF5hJ0sGaE2uQ"
    memory_store.append(conv.id, [user("read it"), assistant(f"done {token}")])
    memory_store.add_context_update(conv.id, 0, 0, "rewritten")
    watched: list[weakref.ref[_Rows]] = []
    alive_at_overlays: list[bool] = []
    read_rows = history._history_rows
    read_overlays = history.load_overlays

    def rows(*args: Any) -> Any:
        found, hidden = read_rows(*args)
        kept = _Rows(found)
        watched.append(weakref.ref(kept))
        return kept, hidden

    def overlays(*args: Any, **kwargs: Any) -> Any:
        alive_at_overlays.append(watched[-1]() is not None)
        return read_overlays(*args, **kwargs)

    monkeypatch.setattr(history, "_history_rows", rows)
    monkeypatch.setattr(history, "load_overlays", overlays)
    view = memory_store.render(conv.id, pipeline=None if masking else Pipeline([]))
    assert view[0]["content"][0]["text"] == "rewritten"
    assert (token in json.dumps(view)) is not masking
    assert alive_at_overlays == [False]


def test_revision_0006_slims_old_block_rows_and_keeps_what_they_decode_to(
    tmp_path: Path,
) -> None:
    path = tmp_path / "layout.db"
    messages = [
        user("task"),
        assistant("reading", tool_use("t1", path="a.py")),
        user(
            tool_result("t1", "body\x00with nul"),
            tool_result("t1", [{"type": "text", "text": "x"}]),
        ),
    ]
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        conv = store.create_conversation()
        store.append(conv.id, messages)
        slim = _block_rows(store)
    engine = create_engine(f"sqlite:///{path}")
    migrate.downgrade(engine, is_sqlite=True, revision="0005")
    with engine.connect() as connection:
        old = list(connection.execute(text("SELECT type, data FROM blocks ORDER BY message_idx")))
    assert json.loads(old[2].data) == {
        "type": "tool_use",
        "id": "t1",
        "name": "read_file",
        "input": {"path": "a.py"},
    }
    assert json.loads(old[3].data)["content"] == "body\x00with nul"
    migrate.upgrade(engine, is_sqlite=True)
    engine.dispose()
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        assert _block_rows(store) == slim
        assert store.messages(conv.id) == messages
        assert store.get_conversation(conv.id).id == conv.id
        store.append(conv.id, "assistant", "after the round trip")
        assert len(store.messages(conv.id)) == 4


def test_a_rollback_on_postgresql_removes_and_archives_in_one_statement(
    store: ContextStore,
) -> None:
    """Every table's rows leave and reach the archive inside the server, in one round trip
    (on SQLite one statement per table; either way the same at any size)."""
    conv = store.create_conversation()
    store.append(conv.id, session(3))
    store.checkpoint(conv.id, "cp")
    store.append(conv.id, session(10)[1:])
    store.record_request(conv.id, tokens_in=1)
    with recorded_statements(store) as statements:
        report = store.rollback(conv.id, "cp")
    assert report.removed["messages"] == 20 and report.removed["api_requests"] == 1
    removing = [s for s in statements if "DELETE" in s]
    if store.database.engine.dialect.name == "postgresql":
        assert len(removing) == 1, removing
        assert removing[0].count("INSERT INTO archived_") == len(timeline.REMOVAL_ORDER)
        assert "jsonb" not in removing[0], "rows move as they are, without JSON building"
    else:
        assert len(removing) == len(timeline.REMOVAL_ORDER), removing
    assert store.restore(conv.id, report.rollback_id or 0).restored["messages"] == 20


def test_messages_are_one_b_tree_keyed_by_conversation_and_index(store: ContextStore) -> None:
    """Revision 0012: ``messages`` has its primary key and no other index (no ``ts`` index);
    on SQLite it is ``WITHOUT ROWID``, so its rows live in the key's b-tree and an append
    writes one b-tree of it, not three."""
    with store.database.read() as connection:
        if store.database.is_sqlite:
            create = connection.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages'"
            ).scalar_one()
            assert create.rstrip().endswith("WITHOUT ROWID"), create
            keys = connection.exec_driver_sql("PRAGMA index_list(messages)").all()
            assert [(row[1], row[3]) for row in keys] == [("sqlite_autoindex_messages_1", "pk")]
        else:
            indexes = connection.exec_driver_sql(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = 'messages'"
            ).scalars()
            assert sorted(indexes) == ["pk_messages"]


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_revision_0012_keys_messages_and_its_downgrade_brings_the_ts_index_back(
    tmp_path: Path, backend: str
) -> None:
    """Across 0012 down and up the messages, their order and the views stay; 0011's shape
    (a rowid table on SQLite, the unique ``(conversation_id, ts)``) comes back on the way
    down, and the rollback found through the key after the way up is the same."""
    store, cleanup = open_backend(backend, tmp_path)
    try:
        cid = store.create_conversation().id
        store.append(cid, session(3))
        checkpoint = store.checkpoint(cid, "middle")
        store.append(cid, session(2)[1:])
        before, stored = store.render(cid), store.messages(cid)
        engine = store.database.engine
        is_sqlite = engine.dialect.name == "sqlite"
        store.database.close()
        migrate.downgrade(engine, is_sqlite=is_sqlite, revision="0011")
        unique = inspect(engine).get_unique_constraints("messages")
        assert [u["column_names"] for u in unique] == [["conversation_id", "ts"]]
        if is_sqlite:
            with engine.connect() as connection:
                create = connection.exec_driver_sql(
                    "SELECT sql FROM sqlite_master WHERE name = 'messages'"
                ).scalar_one()
            assert "WITHOUT ROWID" not in create
        assert store.messages(cid) == stored
        migrate.upgrade(engine, is_sqlite=is_sqlite)
        assert inspect(engine).get_unique_constraints("messages") == []
        assert store.render(cid) == before and store.messages(cid) == stored
        report = store.rollback(cid, "middle")
        assert report.cutoff_ts == checkpoint.ts and report.removed["messages"] == 4
        assert store.check(full=True).ok
    finally:
        cleanup()
