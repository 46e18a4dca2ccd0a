"""import_timeline (many stamped rows, one transaction), source records on the timeline
(rollback, archive, restore, fork, delete), and replacing imported rows in place."""

from __future__ import annotations

from typing import Any

import pytest

from contextstore import ContextStore, InvalidInputError, TimelineError
from contextstore.core.rows import (
    CheckpointRow,
    MessageRow,
    RangeRow,
    RequestRow,
    SourceRecordRow,
    UpdateRow,
)
from tests.conftest import assistant, user
from tests.store.internals import recorded_statements

START = 1_700_000_000_000


def _rows() -> list[Any]:
    return [
        SourceRecordRow(START + 1, "cline", "say:text", {"ts": 5, "say": "text"}, 5),
        MessageRow(START + 2, user("task")),
        RequestRow(
            START + 3,
            tokens_in=10,
            cache_reads=5,
            failure="user_cancelled",
            details={"retries": [{"attempt": 1}]},
        ),
        MessageRow(START + 4, assistant("first")),
        CheckpointRow(START + 5, label="cline:5", git_hash="ab" * 20),
        MessageRow(START + 6, user("more")),
        MessageRow(START + 7, assistant("second")),
        MessageRow(START + 8, user("again")),
        RangeRow(START + 9, 3, reason="imported", tokens_total=15),
        UpdateRow(START + 10, 1, 0, "rewritten", source="import"),
        SourceRecordRow(START + 11, "cline", "say:completion_result", {"say": "done"}),
    ]


def _imported(store: ContextStore) -> str:
    conv = store.create_conversation(created_ts=START)
    assert store.import_timeline(conv.id, _rows()) == {
        "messages": 5,
        "source_records": 2,
        "api_requests": 1,
        "checkpoints": 1,
        "deleted_ranges": 1,
        "context_updates": 1,
    }
    return conv.id


def test_rows_land_at_their_ts_and_read_back(store: ContextStore) -> None:
    cid = _imported(store)
    assert store.message_timestamps(cid) == [START + 2, START + 4, START + 6, START + 7, START + 8]
    (request,) = store.requests(cid)
    assert (request.ts, request.tokens_in, request.failure) == (START + 3, 10, "user_cancelled")
    assert request.details == {"retries": [{"attempt": 1}]}
    assert [(c.ts, c.git_hash) for c in store.checkpoints(cid)] == [(START + 5, "ab" * 20)]
    assert store.deleted_range(cid, as_of=START + 8) is None
    assert store.deleted_range(cid, as_of=START + 9) == (2, 3)
    assert store.render(cid, as_of=START + 10)[1]["content"][0]["text"] == "rewritten"
    records = store.source_records(cid)
    assert [(r.ts, r.kind, r.source_ts) for r in records] == [
        (START + 1, "say:text", 5),
        (START + 11, "say:completion_result", None),
    ]
    assert store.source_records(cid, as_of=START + 10) == records[:1]
    assert store.source_records(cid, origin="gemini") == []
    assert store.get_conversation(cid).last_ts == START + 11


def test_rows_that_break_the_timeline_are_refused_and_nothing_is_written(
    store: ContextStore,
) -> None:
    conv = store.create_conversation(created_ts=START)
    before = store.row_counts()
    with pytest.raises(TimelineError, match="row 1 has ts"):
        store.import_timeline(
            conv.id, [MessageRow(START + 2, user("a")), MessageRow(START + 2, user("b"))]
        )
    with pytest.raises(TimelineError, match="not later than the conversation's last ts"):
        store.import_timeline(conv.id, [MessageRow(START, user("a"))])
    assert store.row_counts() == before
    assert store.import_timeline(conv.id, []) == dict.fromkeys(
        [
            "messages",
            "source_records",
            "api_requests",
            "checkpoints",
            "deleted_ranges",
            "context_updates",
        ],
        0,
    )


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (MessageRow(START + 9, {"role": "system", "content": "x"}), "row 3 \\(message\\)"),
        (RangeRow(START + 9, 2), "beyond the last message but one"),
        (RangeRow(START + 9, 0), "end must be"),
        (UpdateRow(START + 9, 3, 0, "x"), "message 3 has no block 0"),
        (UpdateRow(START + 9, 0, 5, "x"), "has no block 5"),
        (UpdateRow(START + 9, 0, 0, "x", kind="nope"), "kind 'nope' is unknown"),
        (RequestRow(START + 9, tokens_in=-1), "tokens_in must be"),
        (RequestRow(START + 9, tokens_in=2**31 - 1, cache_reads=1), "must total at most"),
        (CheckpointRow(START + 9, git_hash="x" * 65), "git_hash must be"),
        (SourceRecordRow(START + 9, "", "k", {}), "origin must be"),
        (SourceRecordRow(START + 9, "cline", "k", {"x": object()}), "which JSON cannot hold"),
        (SourceRecordRow(START + 9, "cline", "k", [1, 2]), "data must be a mapping"),  # type: ignore[arg-type]
    ],
)
def test_each_row_is_checked_as_its_own_method_would(
    store: ContextStore, bad: Any, match: str
) -> None:
    conv = store.create_conversation(created_ts=START)
    rows = [
        MessageRow(START + 1, user("a")),
        MessageRow(START + 2, assistant("b")),
        MessageRow(START + 3, user("c")),
        bad,
    ]
    with pytest.raises(InvalidInputError, match=match):
        store.import_timeline(conv.id, rows)
    assert store.messages(conv.id) == []


def test_a_range_may_stand_without_messages_but_never_shrinks(store: ContextStore) -> None:
    conv = store.create_conversation(created_ts=START)
    store.import_timeline(conv.id, [RangeRow(START + 1, 17), RangeRow(START + 2, 39)])
    assert store.deleted_range(conv.id) == (2, 39)
    with pytest.raises(InvalidInputError, match="would shrink"):
        store.import_timeline(conv.id, [RangeRow(START + 3, 20)])


def test_an_update_may_address_a_message_stored_before(store: ContextStore) -> None:
    cid = _imported(store)
    store.import_timeline(cid, [UpdateRow(START + 20, 4, 0, "later rewrite")])
    assert store.render(cid)[-1]["content"][0]["text"] == "later rewrite"


def test_source_records_roll_back_archive_restore_fork_and_delete(store: ContextStore) -> None:
    cid = _imported(store)
    report = store.rollback(cid, to=START + 5)
    assert report.removed["source_records"] == 1 and report.removed["messages"] == 3
    assert [r.ts for r in store.source_records(cid)] == [START + 1]
    (removed,) = store.removed_source_records(cid)
    assert removed.rollback_id == report.rollback_id and removed.cutoff_ts == START + 5
    assert [r.data for r in removed.records] == [{"say": "done"}]
    restored = store.restore(cid, report.rollback_id)  # type: ignore[arg-type]
    assert restored.restored["source_records"] == 1
    assert store.removed_source_records(cid) == []
    assert len(store.source_records(cid)) == 2
    fork = store.fork(cid, at=START + 5)
    assert [r.data for r in store.source_records(fork.id)] == [{"ts": 5, "say": "text"}]
    assert store.delete_conversation(cid)["source_records"] == 2
    assert store.source_records(fork.id)[0].conversation_id == fork.id


def test_removed_source_records_are_listed_in_rollback_order(store: ContextStore) -> None:
    cid = _imported(store)
    late = store.rollback(cid, to=START + 10)
    early = store.rollback(cid, to=START + 5)
    assert late.removed["source_records"] == 1 and early.removed["source_records"] == 0
    after = store.get_conversation(cid).last_ts
    store.import_timeline(cid, [SourceRecordRow(after + 1, "cline", "k", {"again": 1})])
    last = store.rollback(cid, to=after)
    listed = store.removed_source_records(cid)
    assert [r.rollback_id for r in listed] == [late.rollback_id, last.rollback_id]
    assert [[record.data for record in r.records] for r in listed] == [
        [{"say": "done"}],
        [{"again": 1}],
    ]


def test_imported_rows_can_be_replaced_until_a_rollback(store: ContextStore) -> None:
    cid = _imported(store)
    # the range, the update and the lineage edge it recorded, the completion record
    assert store.discard_imported_rows(cid, after=START + 8).total_removed == 4
    assert store.get_conversation(cid).last_ts == START + 8
    assert store.deleted_range(cid) is None
    store.import_timeline(cid, [SourceRecordRow(START + 9, "cline", "k", {"new": 1})])
    with pytest.raises(InvalidInputError, match="later than"):
        store.discard_imported_rows(cid, after=START + 100)
    with pytest.raises(InvalidInputError, match=r"^after must be"):
        store.discard_imported_rows(cid, after=None)  # type: ignore[arg-type]
    store.rollback(cid, to=START + 5)
    with pytest.raises(InvalidInputError, match="a rollback or restore ran after"):
        store.discard_imported_rows(cid, after=START + 4)


def test_replaced_imported_rows_are_archived_and_can_be_restored(store: ContextStore) -> None:
    """An importer's replacement of rows archives them under a rollback of their own, as a
    rollback does (they were deleted for good): the audit lists it, a restore puts them
    back once the rows written over them are rolled back, and no exporter reports it as a
    rollback the agent should hear of (the agent made the change)."""
    cid = _imported(store)
    before = (store.render(cid), store.source_records(cid), store.deleted_range(cid))
    report = store.discard_imported_rows(cid, after=START + 8)
    assert report.archived and report.rollback_id is not None and report.cutoff_ts == START + 8
    assert report.removed["source_records"] == report.removed["deleted_ranges"] == 1
    (event,) = store.audit(cid).rollbacks
    assert (event.rollback_id, event.cutoff_ts, event.target) == (
        report.rollback_id,
        START + 8,
        None,
    )
    assert event.rows_archived == report.total_removed == 4 and not event.purged
    assert store.removed_source_records(cid) == []
    assert store.get_conversation(cid).last_ts == START + 8
    store.import_timeline(cid, [SourceRecordRow(START + 9, "cline", "k", {"new": 1})])
    # a second replacement after the first is no rollback a caller asked for: allowed
    again = store.discard_imported_rows(cid, after=START + 8)
    assert again.removed["source_records"] == 1
    store.import_timeline(cid, [SourceRecordRow(START + 9, "cline", "k", {"new": 2})])
    with pytest.raises(InvalidInputError, match="rows were written after"):
        store.restore(cid, report.rollback_id)
    store.rollback(cid, to=START + 8)
    store.restore(cid, report.rollback_id)
    assert (store.render(cid), store.source_records(cid), store.deleted_range(cid)) == before
    store.check(cid)


def test_many_rows_take_one_statement_per_table(store: ContextStore) -> None:
    """The import's cost does not grow with statements per row (3,000 messages: one
    transaction, a fixed number of INSERTs)."""
    conv = store.create_conversation(created_ts=START)
    rows: list[Any] = []
    for i in range(300):
        rows.append(MessageRow(START + 1 + 3 * i, user(f"q{i}") if i % 2 == 0 else assistant("a")))
        rows.append(SourceRecordRow(START + 2 + 3 * i, "cline", "say:text", {"i": i}))
        rows.append(RequestRow(START + 3 + 3 * i, tokens_in=i))
    with recorded_statements(store) as ran:
        store.import_timeline(conv.id, rows)
    statements: list[str] = []
    for statement in ran:
        words = statement.split()
        statements.append(" ".join(words[:1] + words[2:3]) if words[0] == "INSERT" else words[0])
    inserts = [s for s in statements if s.startswith("INSERT")]
    assert sorted(inserts) == sorted(
        ["INSERT messages", "INSERT blocks", "INSERT source_records", "INSERT api_requests"]
    )
    assert len(statements) < 15
