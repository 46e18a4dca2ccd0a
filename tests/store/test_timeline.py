"""One timeline per conversation: the clock, checkpoints, rollback and as-of rendering."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from contextstore import CheckpointNotFoundError, ContextStore, InvalidInputError
from contextstore.storage.history import load_messages
from contextstore.storage.tables import ARCHIVES
from contextstore.storage.timeline import first_after
from tests.conftest import StoreFactory, assistant, session, tool_result, tool_use, user


def _all_ts(store: ContextStore, conv_id: str) -> list[int]:
    stamps = [r.ts for r in store.requests(conv_id)] + [c.ts for c in store.checkpoints(conv_id)]
    stamps += [u["ts"] for u in store.context_updates(conv_id)]
    with store.database.read() as connection:
        from contextstore.storage.history import load_messages

        stamps += load_messages(connection, conv_id)[1]
    return stamps


def test_every_row_kind_gets_a_strictly_increasing_ts(store: ContextStore) -> None:
    conv = store.create_conversation()
    a = store.append(conv.id, "user", "task")
    r = store.record_request(conv.id, tokens_in=10)
    cp = store.checkpoint(conv.id, "one")
    b = store.append(conv.id, "assistant", "reply")
    u = store.add_context_update(conv.id, 1, 0, "rewritten")
    stamps = [a.ts, r.ts, cp.ts, b.ts, u]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert len(set(_all_ts(store, conv.id))) == 5


def test_rollback_removes_later_rows_archives_them_and_reports_counts(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(2))
    cp = store.checkpoint(conv.id, "before-refactor")
    at_checkpoint = store.render(conv.id)
    store.append(
        conv.id, [assistant("oops", tool_use("x", path="p")), user(tool_result("x", "bad"))]
    )
    store.record_request(conv.id, tokens_in=5)
    store.add_context_update(conv.id, 2, 0, "hidden")
    store.set_deleted_range(conv.id, 3)
    store.checkpoint(conv.id, "later")

    report = store.rollback(conv.id, to="before-refactor")

    assert report.removed == {
        "context_updates": 1,
        "deleted_ranges": 1,
        "api_requests": 1,
        "checkpoints": 1,
        "source_records": 0,
        "lineage": 1,
        "processor_runs": 0,
        "blocks": 3,
        "messages": 2,
    }
    assert report.cutoff_ts == cp.ts and report.archived
    assert store.render(conv.id) == at_checkpoint
    assert [c.label for c in store.checkpoints(conv.id)] == ["before-refactor"]
    with store.database.read() as connection:
        archived = [
            name
            for name, table in ARCHIVES.items()
            for _ in connection.execute(
                select(table.c.rollback_id).where(table.c.rollback_id == report.rollback_id)
            )
        ]
    assert sorted(archived) == sorted(
        ["context_updates", "deleted_ranges", "api_requests", "checkpoints", "lineage"]
        + ["blocks"] * 3
        + ["messages"] * 2
    )


def test_a_rollback_returns_the_counts_of_rows_removed_per_table(store: ContextStore) -> None:
    """DESIGN: ``rollback(...)  # -> counts of rows removed per table``: the report reads
    as those counts themselves, beside its other fields."""
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    cp = store.checkpoint(conv.id, "start")
    store.append(conv.id, [assistant("a"), user("b")])
    counts = store.rollback(conv.id, to="start", dry_run=True)
    assert counts["messages"] == 2 and counts["blocks"] == 2
    assert dict(counts) == counts.removed and counts == counts.removed
    assert set(counts) == set(counts.removed) and len(counts) == len(counts.removed)
    done = store.rollback(conv.id, to=cp.ts)
    assert done == counts.removed and done != counts  # another rollback_id and dry_run
    assert done != {**counts.removed, "messages": 1}
    with pytest.raises(TypeError):
        hash(done)


def test_purge_keeps_no_archive(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    cp = store.checkpoint(conv.id)
    store.append(conv.id, "assistant", "x")
    report = store.rollback(conv.id, cp.ts, purge=True)
    assert report.removed["messages"] == 1 and not report.archived
    counts = store.row_counts(conv.id)
    assert sum(counts[table.name] for table in ARCHIVES.values()) == 0


def test_the_clock_after_a_rollback_never_reuses_a_removed_ts(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    cp = store.checkpoint(conv.id, "cp")
    removed = store.append(conv.id, [assistant("a"), user("b")])
    store.rollback(conv.id, "cp")
    again = store.append(conv.id, "assistant", "again")
    assert again.index == 1
    assert again.ts > max(m.ts for m in removed) > cp.ts


def test_rollback_to_an_unknown_label_names_the_known_ones(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    store.checkpoint(conv.id, "known")
    before = store.row_counts()
    with pytest.raises(CheckpointNotFoundError, match="'known'"):
        store.rollback(conv.id, "unknown")
    with pytest.raises(InvalidInputError):
        store.rollback(conv.id, 1.5)  # type: ignore[arg-type]
    assert store.row_counts() == before


def test_a_checkpoint_id_passed_as_the_moment_is_refused_naming_its_label(
    store: ContextStore,
) -> None:
    """``rollback(cid, to=cp.id)`` read the id as milliseconds after 1970 and archived the
    whole conversation; the command line refused it, the library (and JSON-RPC) did not."""
    cid = store.create_conversation().id
    store.append(cid, [user("task"), assistant("done")])
    labelled = store.checkpoint(cid, "cp")
    unlabelled = store.checkpoint(cid)
    store.append(cid, [user("more")])
    for checkpoint, instead in ((labelled, "to='cp'"), (unlabelled, f"to={unlabelled.ts}")):
        with pytest.raises(InvalidInputError, match=f"not as checkpoint {checkpoint.id}; pass "):
            store.rollback(cid, to=checkpoint.id)
        with pytest.raises(InvalidInputError, match=re.escape(instead)):
            store.rollback(cid, to=checkpoint.id, dry_run=True)
    with pytest.raises(InvalidInputError, match="pass at='cp'"):
        store.fork(cid, at=labelled.id)
    assert store.message_count(cid) == 3 and len(store.list_conversations()) == 1
    # Milliseconds that are no checkpoint's id, and 0, still name moments.
    assert store.rollback(cid, to=0, dry_run=True).removed["messages"] == 3
    assert store.rollback(cid, to=unlabelled.id + 1, dry_run=True).removed["messages"] == 3


def test_rollback_keeps_overlays_written_before_the_checkpoint(store: ContextStore) -> None:
    """Cline's restore wiped every overlay edit, even older ones; here only later ones go."""
    conv = store.create_conversation()
    store.append(conv.id, session(3))
    store.add_context_update(conv.id, 2, 0, "early rewrite")
    store.checkpoint(conv.id, "cp")
    store.add_context_update(conv.id, 2, 0, "late rewrite")
    store.rollback(conv.id, "cp")
    assert store.render(conv.id)[2]["content"][0]["content"] == "early rewrite"


@pytest.mark.parametrize(("count", "held"), [(0, "no messages"), (1, "one message")])
def test_a_range_in_a_conversation_too_short_for_one_says_so(
    store: ContextStore, count: int, held: str
) -> None:
    """With no message, or one, there is no "last message but one" to name (it said
    "index -2")."""
    conv = store.create_conversation()
    if count:
        store.append(conv.id, "user", "hello")
    with pytest.raises(InvalidInputError) as refused:
        store.set_deleted_range(conv.id, 1)
    assert str(refused.value) == (
        f"end 1 is beyond the last message but one: the conversation has {held}, and the "
        "newest message always stays visible; append messages first."
    )
    assert store.deleted_range(conv.id) is None


def test_deleted_range_and_set_deleted_range_rules(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(3))
    assert store.deleted_range(conv.id) is None
    first = store.set_deleted_range(conv.id, 4, keep="half", reason="test")
    assert store.deleted_range(conv.id) == (2, 4)
    assert store.deleted_range(conv.id, as_of=first - 1) is None
    with pytest.raises(InvalidInputError, match="shrink"):
        store.set_deleted_range(conv.id, 3)
    with pytest.raises(
        InvalidInputError, match=r"^end 6 is beyond the last message but one \(index 5\); "
    ):
        store.set_deleted_range(conv.id, 6)
    view = store.render(conv.id)
    # the range ends on a user message, so message 1's call would be followed by an
    # assistant message: the view inserts its placeholder result
    assert [m["role"] for m in view] == ["user", "assistant", "user", "assistant", "user"]
    assert view[2]["content"][0]["content"] == "result missing"


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("range"), st.integers(0, 5)),
        st.tuples(st.just("update"), st.integers(0, 20)),
        st.tuples(st.just("checkpoint"), st.none()),
        st.tuples(st.just("request"), st.integers(0, 10_000)),
        st.tuples(st.just("rollback"), st.none()),
    ),
    min_size=1,
    max_size=25,
)


def _apply(store: ContextStore, conv_id: str, op: str, arg: Any, turn: int) -> None:
    count = len(store.messages(conv_id))
    if op == "append":
        pairs = [assistant(f"a{turn}-{i}", tool_use(f"t{turn}-{i}")) for i in range(arg)]
        batch: list[dict[str, Any]] = []
        for i, call in enumerate(pairs):
            batch += [call, user(tool_result(f"t{turn}-{i}", f"r{turn}-{i}"))]
        store.append(conv_id, batch)
    elif op == "range" and count > 3:
        current = store.deleted_range(conv_id)
        end = min(count - 2, (current[1] if current else 1) + arg)
        if end >= 1 and (current is None or end >= current[1]):
            store.set_deleted_range(conv_id, end)
    elif op == "update" and count:
        idx = arg % count
        store.add_context_update(conv_id, idx, 0, f"rewrite {turn}", mode="block")
    elif op == "checkpoint":
        store.checkpoint(conv_id, f"cp{turn}")
    elif op == "request":
        store.record_request(conv_id, tokens_in=arg)
    elif op == "rollback":
        points = store.checkpoints(conv_id)
        if points:
            store.rollback(conv_id, points[len(points) // 2].ts)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_render_as_of_t_equals_what_render_returned_at_t(
    fresh_store: StoreFactory, ops: list[tuple[str, Any]]
) -> None:
    with fresh_store() as store:
        conv = store.create_conversation()
        store.append(conv.id, [user("task"), assistant("first")])
        seen: list[tuple[int, list[dict[str, Any]]]] = []
        for turn, (op, arg) in enumerate(ops):
            _apply(store, conv.id, op, arg, turn)
            if op == "rollback":
                seen = [(t, v) for t, v in seen if t <= store.get_conversation(conv.id).last_ts]
                cut = max((c.ts for c in store.checkpoints(conv.id)), default=0)
                seen = [(t, v) for t, v in seen if t <= cut] if store.checkpoints(conv.id) else seen
            seen.append((store.get_conversation(conv.id).last_ts, store.render(conv.id)))
        for stamp, view in seen:
            assert store.render(conv.id, as_of=stamp) == view


def test_a_damaged_stored_value_is_a_clear_error_never_a_silent_reset(
    file_store: ContextStore,
) -> None:
    from sqlalchemy import text as sql

    from contextstore import CorruptRowError

    conv = file_store.create_conversation()
    file_store.append(conv.id, [user("a", tool_result("t", "x")), assistant("b")])
    file_store.add_context_update(conv.id, 1, 0, "rewritten")
    with file_store.database.engine.begin() as connection:
        connection.execute(sql("UPDATE blocks SET data = '{broken' WHERE block_idx = 1"))
    with pytest.raises(CorruptRowError, match="not valid JSON"):
        file_store.render(conv.id)
    with file_store.database.engine.begin() as connection:
        connection.execute(
            sql("UPDATE blocks SET data = :data WHERE block_idx = 1"),
            {"data": '{"type": "tool_result", "tool_use_id": "t", "content": "x"}'},
        )
        connection.execute(sql("UPDATE context_updates SET metadata = '[1'"))
    with pytest.raises(CorruptRowError):
        file_store.render(conv.id)


@pytest.mark.parametrize("damage", ["5", '"text"', "[]"])
def test_a_stored_value_of_the_wrong_shape_is_a_clear_error(
    store: ContextStore, damage: str
) -> None:
    """Valid JSON of the wrong shape, which every backend can hold (PostgreSQL refuses the
    invalid JSON of the test above, so that one runs on SQLite only)."""
    from sqlalchemy import text as sql

    from contextstore import CorruptRowError

    conv = store.create_conversation()
    store.append(conv.id, [user("a", tool_result("t", "x")), assistant("b")])
    with store.database.engine.begin() as connection:
        connection.execute(
            sql("UPDATE blocks SET data = :data WHERE block_idx = 1"), {"data": damage}
        )
    with pytest.raises(CorruptRowError, match=r"block 0\.1 "):
        store.render(conv.id)


def test_a_dry_run_reports_what_would_go_and_writes_nothing(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(2))
    cp = store.checkpoint(conv.id, "cp")
    store.append(
        conv.id, [assistant("oops", tool_use("x", path="p")), user(tool_result("x", "bad"))]
    )
    store.record_request(conv.id, tokens_in=5)
    before = store.row_counts(conv.id)
    last = store.get_conversation(conv.id).last_ts

    preview = store.rollback(conv.id, to="cp", dry_run=True)

    assert preview.dry_run and preview.rollback_id is None and not preview.archived
    assert preview.cutoff_ts == cp.ts
    assert store.row_counts(conv.id) == before
    assert store.get_conversation(conv.id).last_ts == last
    done = store.rollback(conv.id, to="cp")
    assert done.removed == preview.removed
    assert preview.removed["messages"] == 2 and preview.removed["blocks"] == 3


def test_restore_puts_archived_rows_back_exactly(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(2))
    store.checkpoint(conv.id, "cp")
    store.append(
        conv.id, [assistant("later", tool_use("x", path="p")), user(tool_result("x", "r"))]
    )
    store.record_request(conv.id, tokens_in=7)
    store.add_context_update(conv.id, 5, 0, "rewritten later")
    store.set_deleted_range(conv.id, 3)
    store.checkpoint(conv.id, "later")
    view, messages = store.render(conv.id), store.messages(conv.id)
    requests, checkpoints = store.requests(conv.id), store.checkpoints(conv.id)
    updates = store.context_updates(conv.id)

    report = store.rollback(conv.id, to="cp")
    assert report.rollback_id is not None
    restored = store.restore(conv.id, report.rollback_id)

    assert restored.restored == report.removed
    assert store.render(conv.id) == view and store.messages(conv.id) == messages
    assert store.requests(conv.id) == requests and store.checkpoints(conv.id) == checkpoints
    assert store.context_updates(conv.id) == updates
    assert store.deleted_range(conv.id) == (2, 3)
    assert restored.ts > report.cutoff_ts
    # the conversation goes on after the restore, on the same timeline
    appended = store.append(conv.id, "assistant", "after the restore")
    assert appended.index == len(messages) and appended.ts > restored.ts
    with pytest.raises(InvalidInputError, match="already restored"):
        store.restore(conv.id, report.rollback_id)


def test_restore_is_refused_once_rows_were_written_after_the_cutoff(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(1))
    store.checkpoint(conv.id, "cp")
    store.append(conv.id, [assistant("a"), user("b")])
    report = store.rollback(conv.id, to="cp")
    assert report.rollback_id is not None
    store.append(conv.id, "assistant", "written over the archived rows")
    before = store.row_counts(conv.id)
    with pytest.raises(InvalidInputError, match="written after"):
        store.restore(conv.id, report.rollback_id)
    assert store.row_counts(conv.id) == before
    # rolling back what was written since makes the restore possible again
    store.rollback(conv.id, to="cp")
    store.restore(conv.id, report.rollback_id)
    assert [m["content"] for m in store.messages(conv.id)][-2:] == [
        [{"type": "text", "text": "a"}],
        [{"type": "text", "text": "b"}],
    ]


def test_a_later_rollback_to_an_earlier_moment_is_restored_first(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [user("m0"), assistant("m1")])
    store.checkpoint(conv.id, "cp1")
    store.append(conv.id, [user("m2"), assistant("m3")])
    store.checkpoint(conv.id, "cp2")
    store.append(conv.id, [user("m4"), assistant("m5")])
    whole = store.messages(conv.id)
    later = store.rollback(conv.id, to="cp2").rollback_id
    earlier = store.rollback(conv.id, to="cp1").rollback_id
    assert later is not None and earlier is not None
    before = store.row_counts(conv.id)
    # rollback `later`'s rows continue m2 and m3, which rollback `earlier` holds
    with pytest.raises(InvalidInputError, match=f"restore rollback {earlier} first"):
        store.restore(conv.id, later)
    assert store.row_counts(conv.id) == before
    store.restore(conv.id, earlier)
    store.restore(conv.id, later)
    assert store.messages(conv.id) == whole
    assert not store.check(conv.id, raise_on_problems=False).problems


def test_a_purged_later_rollback_leaves_nothing_to_restore_onto(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [user("m0"), assistant("m1")])
    store.checkpoint(conv.id, "cp1")
    store.append(conv.id, [user("m2"), assistant("m3")])
    store.checkpoint(conv.id, "cp2")
    store.append(conv.id, [user("m4"), assistant("m5")])
    later = store.rollback(conv.id, to="cp2").rollback_id
    assert later is not None
    store.rollback(conv.id, to="cp1", purge=True)
    with pytest.raises(InvalidInputError, match=r"purged rows .* gap"):
        store.restore(conv.id, later)
    assert [m["content"][0]["text"] for m in store.messages(conv.id)] == ["m0", "m1"]
    store.append(conv.id, "user", "the conversation goes on")


def test_a_later_rollback_that_removed_nothing_does_not_block_a_restore(
    store: ContextStore,
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [user("m0"), assistant("m1")])
    store.checkpoint(conv.id, "cp1")
    store.append(conv.id, [user("m2"), assistant("m3")])
    first = store.rollback(conv.id, to="cp1").rollback_id
    assert first is not None
    nothing = store.rollback(conv.id, to=store.checkpoints(conv.id)[0].ts)
    assert nothing.total_removed == 0
    store.restore(conv.id, first)
    assert len(store.messages(conv.id)) == 4


def test_restore_refuses_purged_and_unknown_rollbacks(store: ContextStore) -> None:
    from contextstore import RollbackNotFoundError

    conv = store.create_conversation()
    store.append(conv.id, session(1))
    store.checkpoint(conv.id, "cp")
    store.append(conv.id, "assistant", "gone for good")
    purged = store.rollback(conv.id, to="cp", purge=True)
    assert purged.rollback_id is not None
    with pytest.raises(InvalidInputError, match="purged"):
        store.restore(conv.id, purged.rollback_id)
    with pytest.raises(RollbackNotFoundError):
        store.restore(conv.id, purged.rollback_id + 100)
    other = store.create_conversation()
    with pytest.raises(RollbackNotFoundError):
        store.restore(other.id, purged.rollback_id)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(["message", "checkpoint", "request"]), max_size=12),
    offsets=st.lists(st.integers(-1, 1), min_size=1, max_size=4),
)
def test_the_first_message_after_a_cutoff_is_the_first_with_a_later_ts(
    fresh_store: StoreFactory, kinds: list[str], offsets: list[int]
) -> None:
    """``first_after`` reads back from the newest message through the key (no index covers
    ``messages.ts``); it names the same message as the definition, the lowest index whose
    ``ts`` is past the cutoff, for cutoffs at, just before and just after every row."""
    with fresh_store() as store:
        conversation = store.create_conversation()
        cid, stamps = conversation.id, [conversation.created_ts]
        for position, kind in enumerate(kinds):
            if kind == "message":
                stamps.append(store.append(cid, "user" if position % 2 else "assistant", "x").ts)
            elif kind == "checkpoint":
                stamps.append(store.checkpoint(cid).ts)
            else:
                stamps.append(store.record_request(cid, tokens_in=1).ts)
        with store.database.read() as connection:
            message_ts = load_messages(connection, cid)[1]
            for cutoff in {s + o for s in stamps for o in offsets}:
                later = [idx for idx, ts in enumerate(message_ts) if ts > cutoff]
                expected = later[0] if later else None
                assert first_after(connection, cid, cutoff) == expected, (cutoff, message_ts)
