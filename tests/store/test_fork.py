"""Forks: a new conversation holding exactly the parent's rows with ``ts <= at``.

The history below stamps its rows on consecutive milliseconds (the first append forces a
``ts`` far in the future, so the clock's ``max(now, last + 1)`` is always ``last + 1``).
Forking at every row's ``ts``, and one millisecond before it, checks the cutoff on each
table: the row at the cutoff is copied, the row at cutoff + 1 is not.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from contextstore import ContextStore
from tests.conftest import assistant, tool_result, tool_use, user

FUTURE = 4_000_000_000_000  # 2096, in milliseconds: later than any clock running the tests


@dataclasses.dataclass
class History:
    conversation_id: str
    rows: list[tuple[str, int]]
    """(table, ts) of every row written, in order."""


def _build(store: ContextStore) -> History:
    conv = store.create_conversation(model_id="m", context_window=64_000, title="parent")
    cid = conv.id
    rows: list[tuple[str, int]] = []

    def messages(*written: Any) -> None:
        rows.extend(("messages", m.ts) for m in written)

    messages(store.append(cid, "user", "<task>t</task>", ts=FUTURE))
    messages(*store.append(cid, [assistant("reading", tool_use("t1", path="a.py"))]))
    messages(store.append(cid, "user", [tool_result("t1", "body of a.py")]))
    rows.append(("api_requests", store.record_request(cid, tokens_in=100, tokens_out=5).ts))
    rows.append(("checkpoints", store.checkpoint(cid, "first", note="n").ts))
    rows.append(("context_updates", store.add_context_update(cid, 1, 0, "rewritten")))
    messages(*store.append(cid, [assistant("a"), user("b"), assistant("c"), user("d")]))
    rows.append(("deleted_ranges", store.set_deleted_range(cid, 3, reason="test")))
    prepared = store.prepare_request(cid, system="be brief")
    rows.append(("api_requests", store.requests(cid)[-1].ts))
    store.record_request(cid, request_id=prepared.request_id, tokens_in=50, tokens_out=2)
    rows.append(("checkpoints", store.checkpoint(cid, "second").ts))
    rows.append(("context_updates", store.add_context_update(cid, 4, 0, "later rewrite")))
    messages(*store.append(cid, [assistant("e"), user("f")]))
    stamps = [ts for _, ts in rows]
    assert stamps == list(range(FUTURE, FUTURE + len(rows))), "one row per millisecond"
    return History(cid, rows)


def _without_ids(rows: list[Any]) -> list[dict[str, Any]]:
    plain = [r if isinstance(r, dict) else dataclasses.asdict(r) for r in rows]
    return [{k: v for k, v in r.items() if k not in ("id", "conversation_id")} for r in plain]


def _block_count(messages: list[dict[str, Any]]) -> int:
    return sum(len(m["content"]) if isinstance(m["content"], list) else 1 for m in messages)


def _assert_fork_equals_parent_as_of(store: ContextStore, parent: str, fork: str, at: int) -> None:
    assert store.messages(fork) == store.messages(parent, as_of=at)
    assert store.render(fork) == store.render(parent, as_of=at)
    assert store.deleted_range(fork) == store.deleted_range(parent, as_of=at)
    assert _without_ids(store.context_updates(fork)) == _without_ids(
        store.context_updates(parent, as_of=at)
    )
    assert _without_ids(store.requests(fork)) == _without_ids(store.requests(parent, as_of=at))
    assert _without_ids(store.checkpoints(fork)) == _without_ids(
        [c for c in store.checkpoints(parent) if c.ts <= at]
    )


def test_a_fork_at_each_row_holds_it_and_a_fork_just_before_does_not(store: ContextStore) -> None:
    history = _build(store)
    parent = history.conversation_id
    for position, (table, ts) in enumerate(history.rows):
        for at, expected in ((ts, position + 1), (ts - 1, position)):
            fork = store.fork(parent, at=at)
            assert fork.forked_at_ts == at and fork.parent_id == parent
            written = history.rows[:expected]
            counts = store.row_counts(fork.id)
            for name in ("messages", "deleted_ranges", "context_updates", "api_requests"):
                assert counts[name] == sum(t == name for t, _ in written), (table, at, name)
            assert counts["checkpoints"] == sum(t == "checkpoints" for t, _ in written)
            assert counts["blocks"] == _block_count(store.messages(parent, as_of=at))
            archived = sum(n for t, n in counts.items() if t.startswith("archived_"))
            assert counts["rollbacks"] == archived == 0
            _assert_fork_equals_parent_as_of(store, parent, fork.id, at)


def test_a_fork_at_a_label_or_now_copies_every_table(store: ContextStore) -> None:
    history = _build(store)
    parent = history.conversation_id
    whole = store.fork(parent, title="copy")
    assert store.get_conversation(whole.id).title == "copy"
    parent_counts = store.row_counts(parent)
    assert store.row_counts(whole.id) == {**parent_counts, "conversations": 1}
    _assert_fork_equals_parent_as_of(store, parent, whole.id, history.rows[-1][1])

    first = store.checkpoints(parent)[0]
    labelled = store.fork(parent, at="first")
    assert labelled.forked_at_ts == first.ts
    _assert_fork_equals_parent_as_of(store, parent, labelled.id, first.ts)


def test_a_forked_request_payload_is_rebuilt_from_the_forks_rows(store: ContextStore) -> None:
    history = _build(store)
    parent = history.conversation_id
    fork = store.fork(parent)
    prepared = [r for r in store.requests(parent) if r.payload_sha256]
    copied = [r for r in store.requests(fork.id) if r.payload_sha256]
    assert len(prepared) == len(copied) == 1
    assert store.request_payload(fork.id, copied[0].id) == store.request_payload(
        parent, prepared[0].id
    )


def test_a_fork_has_its_own_future(store: ContextStore) -> None:
    history = _build(store)
    parent = history.conversation_id
    cutoff = history.rows[5][1]
    fork = store.fork(parent, at=cutoff)
    added = store.append(fork.id, "assistant", "only in the fork")
    assert added.ts > cutoff and added.index == 3
    assert len(store.messages(parent)) == 9
    store.rollback(fork.id, "first")
    assert store.messages(fork.id) == store.messages(parent, as_of=history.rows[4][1])
    assert len(store.messages(parent)) == 9


@pytest.mark.parametrize("at", ["no-such-label", -1, True, 1.5])
def test_a_fork_at_an_unknown_point_is_refused_and_writes_nothing(
    store: ContextStore, at: Any
) -> None:
    from contextstore import ContextStoreError

    history = _build(store)
    before = store.row_counts()
    with pytest.raises(ContextStoreError):
        store.fork(history.conversation_id, at=at)
    assert store.row_counts() == before


def test_a_fork_s_stored_record_names_its_parent_and_its_moment(store: ContextStore) -> None:
    parent = store.create_conversation(title="parent")
    store.append(parent.id, "user", "task")
    store.checkpoint(parent.id, "here")
    store.append(parent.id, "assistant", "later")
    at = store.checkpoints(parent.id)[0].ts
    fork = store.fork(parent.id, at="here")
    for record in (
        store.get_conversation(fork.id),
        next(c for c in store.list_conversations() if c.id == fork.id),
    ):
        assert (record.parent_id, record.forked_at_ts) == (parent.id, at)
    original = store.get_conversation(parent.id)
    assert (original.parent_id, original.forked_at_ts) == (None, None)


def test_a_past_moment_after_the_last_row_forks_at_the_last_row(store: ContextStore) -> None:
    from contextstore.core.rows import MessageRow

    parent = store.create_conversation(created_ts=1_700_000_000_000)
    store.import_timeline(
        parent.id,
        [MessageRow(1_700_000_000_100, user("a")), MessageRow(1_700_000_000_200, assistant("b"))],
    )
    fork = store.fork(parent.id, at=1_700_000_086_400)  # a day later, long past
    assert fork.forked_at_ts == 1_700_000_000_200
    assert fork.last_ts >= fork.created_ts  # the fork's clock: when it was made
    assert store.messages(fork.id) == store.messages(parent.id)


def test_a_fork_at_a_future_moment_is_refused_and_writes_nothing(store: ContextStore) -> None:
    from contextstore import InvalidInputError

    history = _build(store)
    parent = store.get_conversation(history.conversation_id)
    before = store.row_counts()
    with pytest.raises(InvalidInputError, match=r"fork at \(ts \d+\) is in the future"):
        store.fork(parent.id, at=parent.last_ts + 86_400_000_000)
    assert store.row_counts() == before


def test_rows_sharing_a_ts_keep_their_order_in_the_fork(store: ContextStore) -> None:
    conv = store.create_conversation(context_window=128_000)
    for i in range(8):
        store.append(conv.id, "user" if i % 2 == 0 else "assistant", f"m{i}")
    store.truncate(conv.id, keep="half")  # a notice and a first-user cue at one ts
    fork = store.fork(conv.id)

    def written(cid: str) -> list[tuple[int, int, str]]:
        return [(u["ts"], u["message_idx"], u["kind"]) for u in store.context_updates(cid)]

    assert len({ts for ts, _, _ in written(conv.id)}) < len(written(conv.id))
    assert written(fork.id) == written(conv.id)
