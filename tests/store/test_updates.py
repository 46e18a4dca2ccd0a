"""Block rewrites: the ``base_hash`` guard, and what a pipeline's proposals become as rows.

``add_context_update(..., base_hash=h)`` writes only while the block's visible text still
hashes to ``h``. A pipeline's proposals are collapsed to one row per block: the last
text, and the ``base_hash`` of the first proposal (the hash of the text the pipeline read
from the store, which a later writer checks against), never of an intermediate text.
"""

from __future__ import annotations

from typing import Any

import pytest

from contextstore import ContextStore, InvalidInputError, text_hash
from contextstore.core.overlays import BlockUpdate, UpdateKind
from contextstore.processors import IndexedView, Pipeline
from tests.conftest import assistant, user


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
