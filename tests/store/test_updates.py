"""Block rewrites: the ``base_hash`` guard, and what a pipeline's proposals become as rows.

``add_context_update(..., base_hash=h)`` writes only while the block's visible text still
hashes to ``h``. A pipeline's proposals are collapsed to one row per block: the last
text, and the ``base_hash`` of the first proposal (the hash of the text the pipeline read
from the store, which a later writer checks against), never of an intermediate text.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from contextstore import ContextStore, InvalidInputError, text_hash
from contextstore.core.overlays import BlockUpdate, UpdateKind
from contextstore.processors import IndexedView, Pipeline
from tests.conftest import POSTGRES_URL, assistant, pooled_postgres_store, user


class Rewrite:
    """A processor that rewrites block 0 of message 1 from ``before`` to ``after``."""

    def __init__(self, name: str, before: str, after: str) -> None:
        self.name = name
        self.before = before
        self.after = after

    def config(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        return [
            BlockUpdate(
                1, 0, UpdateKind.PROCESSOR, self.after, self.name, {}, text_hash(self.before)
            )
        ]


class Twice(Rewrite):
    """A faulty processor: a second proposal for the block it already rewrote."""

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        second = BlockUpdate(
            1, 0, UpdateKind.PROCESSOR, "second", self.name, {}, text_hash(self.after)
        )
        return [*super().propose(view), second]


def _shown(store: ContextStore, cid: str, pipeline: Pipeline | None = None) -> str:
    """The text of message 1 as the model sees it."""
    text: str = store.render(cid, pipeline=pipeline)[1]["content"][0]["text"]
    return text


def _conversation(store: ContextStore) -> str:
    conv = store.create_conversation()
    store.append(conv.id, [user("task"), assistant("original"), user("next")])
    return conv.id


def test_an_update_with_the_current_base_hash_is_written(store: ContextStore) -> None:
    cid = _conversation(store)
    ts = store.add_context_update(cid, 1, 0, "first", base_hash=text_hash("original"))
    assert _shown(store, cid) == "first"
    store.add_context_update(cid, 1, 0, "second", base_hash=text_hash("first"))
    assert _shown(store, cid) == "second"
    written = [(u["ts"] > ts, u["text"]) for u in store.context_updates(cid)]
    assert written == [(False, "first"), (True, "second")]


@pytest.mark.parametrize("stale", ["original", "other", ""])
def test_an_update_with_a_stale_base_hash_is_refused_and_writes_nothing(
    store: ContextStore, stale: str
) -> None:
    cid = _conversation(store)
    store.add_context_update(cid, 1, 0, "rewritten")
    before = store.row_counts()
    last = store.get_conversation(cid).last_ts
    with pytest.raises(InvalidInputError, match="base_hash"):
        store.add_context_update(cid, 1, 0, "too late", base_hash=text_hash(stale))
    assert store.row_counts() == before
    assert store.get_conversation(cid).last_ts == last
    assert _shown(store, cid) == "rewritten"


def test_a_base_hash_is_checked_against_the_view_as_of_now(store: ContextStore) -> None:
    """After a rollback removes the rewrite, the original text is current again."""
    cid = _conversation(store)
    store.checkpoint(cid, "cp")
    store.add_context_update(cid, 1, 0, "rewritten")
    store.rollback(cid, "cp")
    store.add_context_update(cid, 1, 0, "again", base_hash=text_hash("original"))
    assert _shown(store, cid) == "again"


def test_two_processors_on_one_block_leave_one_row_with_the_first_base_hash(
    store: ContextStore,
) -> None:
    cid = _conversation(store)
    pipeline = Pipeline([Rewrite("p1", "original", "middle"), Rewrite("p2", "middle", "final")])
    assert _shown(store, cid, pipeline=pipeline) == "final"
    store.prepare_request(cid, pipeline=pipeline)
    (row,) = store.context_updates(cid)
    assert (row["message_idx"], row["block_idx"], row["text"]) == (1, 0, "final")
    assert row["base_hash"] == text_hash("original") != text_hash("middle")
    assert (row["kind"], row["source"]) == ("processor", "p1+p2")
    assert store.messages(cid)[1] == assistant("original")


def test_a_second_proposal_for_a_block_from_one_processor_is_dropped(
    store: ContextStore,
) -> None:
    cid = _conversation(store)
    faulty = Pipeline([Twice("twice", "original", "first")])
    report = faulty.run_report(
        [(i, m) for i, m in enumerate(store.render(cid, pipeline=Pipeline([])))]
    )
    (step,) = report.steps
    assert [u.text for u in step.accepted] == ["first"]
    assert [u.text for u in step.dropped] == ["second"]
    assert _shown(store, cid, pipeline=faulty) == "first"
    store.prepare_request(cid, pipeline=faulty)
    assert [u["text"] for u in store.context_updates(cid)] == ["first"]


def test_a_proposal_made_against_text_that_changed_is_not_written(store: ContextStore) -> None:
    cid = _conversation(store)
    store.add_context_update(cid, 1, 0, "edited by hand")
    pipeline = Pipeline([Rewrite("p1", "original", "from a stale read")])
    assert _shown(store, cid, pipeline=pipeline) == "edited by hand"
    store.prepare_request(cid, pipeline=pipeline)
    assert [u["source"] for u in store.context_updates(cid)] == ["caller"]


def test_an_update_and_a_range_name_the_argument_they_refuse(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, [user("a"), assistant("b"), user("c"), assistant("d")])
    with pytest.raises(InvalidInputError, match=r"^text must be"):
        store.add_context_update(cid, 1, 0, None, kind="manual", source="test")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"^summary must not contain a NUL"):
        store.set_deleted_range(cid, 3, summary="a\x00b")
    with pytest.raises(InvalidInputError, match=r"^reason must not contain a NUL"):
        store.set_deleted_range(cid, 3, reason="a\x00b")
    assert store.context_updates(cid) == [] and store.deleted_range(cid) is None


def test_a_rewrite_holding_a_nul_reads_back_exactly(store: ContextStore) -> None:
    """PostgreSQL's text columns cannot hold NUL: the store keeps such a rewrite's exact text
    aside and reads it back, so every backend shows the same text."""
    cid = store.create_conversation().id
    store.append(cid, [user("a"), assistant("b")])
    store.add_context_update(cid, 1, 0, "before\x00after", kind="manual", source="test")
    assert store.render(cid)[1]["content"][0]["text"] == "before\x00after"
    (update,) = store.context_updates(cid)
    assert update["text"] == "before\x00after"


def test_a_render_reads_its_rows_in_the_order_of_their_keys(tmp_path: Path) -> None:
    """The messages with their blocks, and the effective updates, come in the order of the
    tables' keys: SQLite plans no sort of their own (the plan, not a time, is checked). The
    updates are read by (ts, block) since a block has one update per ts; read by (ts, id)
    they needed a temporary b-tree."""
    path = tmp_path / "order.db"
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        cid = store.create_conversation().id
        store.append(cid, [user("task"), assistant("a"), user("b"), assistant("c"), user("d")])
        store.set_deleted_range(cid, 2)
        for idx, text in ((4, "first 4"), (3, "rewritten 3"), (4, "rewritten 4")):
            store.add_context_update(cid, idx, 0, text)
        seen: list[tuple[str, Any]] = []

        def record(_conn: Any, _cursor: Any, statement: str, params: Any, *_rest: Any) -> None:
            if statement.lstrip().startswith("SELECT"):
                seen.append((statement, params))

        event.listen(store.database.engine, "before_cursor_execute", record)
        shown = store.render(cid)
        event.remove(store.database.engine, "before_cursor_execute", record)
    assert [m["content"][0]["text"] for m in shown[2:]] == ["rewritten 3", "rewritten 4"]
    reads = [(s, p) for s, p in seen if "FROM context_updates" in s or "JOIN blocks" in s]
    assert len(reads) == 2
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        for statement, params in reads:
            plan = connection.execute(f"EXPLAIN QUERY PLAN {statement}", params).fetchall()
            assert not any("TEMP B-TREE" in row[-1] for row in plan), (statement, plan)


def test_postgresql_hands_a_render_its_json_columns_as_text() -> None:
    """psycopg decodes every jsonb value it reads (with json.loads, in Python); a render
    reads its JSON columns (messages' metadata, blocks' data, updates' metadata) as text and
    decodes only those not {}: the driver decodes none of them."""
    if not POSTGRES_URL:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    from psycopg.types.json import set_json_loads

    decoded: list[bytes] = []

    def counting(data: bytes) -> Any:
        decoded.append(data)
        return json.loads(data)

    set_json_loads(counting)
    try:
        store, cleanup = pooled_postgres_store(pipeline=Pipeline([]))
        try:
            cid = store.create_conversation().id
            call = {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}}
            result = {"type": "tool_result", "tool_use_id": "t1", "content": "body"}
            store.append(cid, [user("task"), assistant("reading", call), user(result)])
            store.append(cid, "assistant", [{"type": "text", "text": "done"}], meta={"id": 7})
            store.add_context_update(cid, 2, 0, "trimmed", metadata={"why": "long"})
            decoded.clear()
            shown = store.render(cid)
        finally:
            cleanup()
    finally:
        set_json_loads(json.loads)
    assert shown[1]["content"][1]["input"] == {"path": "a"}
    assert shown[2]["content"][0]["content"] == "trimmed" and shown[3]["id"] == 7
    assert decoded == []
