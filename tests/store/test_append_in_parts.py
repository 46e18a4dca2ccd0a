"""A long batch on PostgreSQL is written in parts, each sent while the next is made: the
same rows as one statement, all or nothing, and no more waits on the server."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore import (
    ContentTooLargeError,
    ContextStore,
    ConversationNotFoundError,
    NodeInvariantError,
    TimelineError,
)
from contextstore.core import nodes as core_nodes
from contextstore.core.nodes import NodeRow
from contextstore.core.tokens import TiktokenCounter
from contextstore.storage import appends
from contextstore.storage import nodes as stored_nodes
from tests.conftest import assistant, file_read, open_backend, tool_result, tool_use, user
from tests.store.internals import recorded_statements
from tests.store.test_round_trips import round_trips


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of 4 messages, the last 2 apart: a batch of 8 or more goes in parts."""
    monkeypatch.setattr(appends, "APPEND_PART", 4)
    monkeypatch.setattr(appends, "APPEND_TAIL", 2)


def _one_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(appends, "APPEND_PART", 10**9)


def test_part_sizes_at_their_boundaries() -> None:
    assert appends.APPEND_PART == 250 and appends.APPEND_TAIL == 50
    assert appends.part_sizes(1_000) == [250, 250, 250, 200, 50]
    assert appends.part_sizes(500) == [250, 200, 50]
    assert appends.part_sizes(550) == [250, 250, 50]
    assert appends.part_sizes(551) == [250, 250, 1, 50]
    assert appends.part_sizes(520) == [250, 250, 20]
    assert appends.part_sizes(30) == [30]


@given(st.integers(min_value=1, max_value=5_000))
def test_parts_cover_the_batch_in_order_and_end_short(count: int) -> None:
    sizes = appends.part_sizes(count)
    assert sum(sizes) == count
    assert all(0 < size <= appends.APPEND_PART for size in sizes)
    assert sizes[-1] <= appends.APPEND_TAIL


def _batch(first_call: int) -> list[dict[str, Any]]:
    """Twenty messages whose results answer calls across the parts' boundaries: a result
    answering a call stored before the batch, calls answered two parts later, and a
    result whose id names no call, paired by position with the call just before it."""
    n = first_call
    messages: list[dict[str, Any]] = [
        user(tool_result(f"c{n - 1}", "x = 1\n")),  # its call was stored earlier
        assistant("reading", tool_use(f"c{n}", path="a.py"), tool_use(f"c{n + 1}", path="b.py")),
    ]
    for turn in range(5):
        messages.append(user(f"note {turn}"))
        messages.append(assistant(f"thinking {turn}"))
    messages.append(user(file_read(f"c{n}", "a.py", "print('a')\n"), tool_result(f"c{n + 1}")))
    messages.append(assistant("next", tool_use(f"c{n + 2}", "execute_command", command="ls")))
    messages.append(user(tool_result(f"c{n + 2}", "a.py b.py")))
    # The call (17) and its response (18) straddle the boundary of the parts 16-17 and 18-19.
    messages += [user("more"), assistant("ok"), assistant("gemini", tool_use(f"g{n}", path="c.py"))]
    messages.append(user(tool_result(f"response-{n}", "c = 3\n")))
    messages.append(assistant("done"))
    assert len(messages) == 20
    return messages


def _stored(store: ContextStore, cid: str) -> tuple[Any, ...]:
    nodes = [(n.id, n.node_type, n.path, n.token_count, n.ts) for n in store.nodes(cid)]
    return store.messages(cid), nodes


def test_a_batch_in_parts_writes_what_one_statement_writes(
    postgres: ContextStore, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Indices, timestamps, token counts and every node's type, the results typed by calls
    in other parts, in the store, or paired across a boundary."""
    in_parts, whole = postgres.create_conversation().id, postgres.create_conversation().id
    for cid in (in_parts, whole):
        postgres.append(
            cid, [user("<task>t</task>"), assistant("go", tool_use("c99", path="before.py"))]
        )
    postgres._recent_calls.clear()  # the stored call is read back, as in another process
    with recorded_statements(postgres) as statements:
        parted = postgres.append_many(in_parts, _batch(100))
    assert sum("INSERT INTO blocks" in s for s in statements) == len(appends.part_sizes(20)) == 6

    _one_statement(monkeypatch)
    postgres._recent_calls.clear()
    whole_appended = postgres.append_many(whole, _batch(100))

    assert [(a.index, a.role, a.token_count) for a in parted] == [
        (a.index, a.role, a.token_count) for a in whole_appended
    ]
    assert [a.index for a in parted] == list(range(2, 22))
    ts = [a.ts for a in parted]
    assert ts == list(range(ts[0], ts[0] + 20))
    messages, nodes = _stored(postgres, in_parts)
    whole_messages, whole_nodes = _stored(postgres, whole)
    assert messages == whole_messages
    first_ts = whole_appended[0].ts - parted[0].ts
    assert [n[:4] for n in nodes] == [n[:4] for n in whole_nodes]
    assert [n[4] + first_ts for n in nodes[3:]] == [n[4] for n in whole_nodes[3:]]
    typed = {n[0]: n[1:3] for n in nodes}
    assert typed["m2.b0"] == ("file_content", "before.py")  # its call read from the store
    assert typed["m14.b0"] == ("file_content", "a.py")  # its call three parts back
    assert typed["m20.b0"] == ("file_content", "c.py")  # paired across the boundary


def test_each_part_goes_to_the_server_before_the_next_is_counted(
    postgres: ContextStore, small_parts: None
) -> None:
    cid = postgres.create_conversation().id
    messages = [user(f"message {i}") if i % 2 == 0 else assistant(f"reply {i}") for i in range(20)]
    sent_when_counted: list[int] = []
    counter = TiktokenCounter()

    class Watching:
        name = counter.name

        def count(self, text: str) -> int:
            if text.startswith(("message", "reply")):
                sent_when_counted.append(sum("INSERT INTO blocks" in s for s in statements))
            return counter.count(text)

    postgres.token_counter = Watching()
    with recorded_statements(postgres) as statements:
        postgres.append_many(cid, messages)
    starts = [0, 4, 8, 12, 16, 18]
    assert [sent_when_counted[start] for start in starts] == [0, 1, 2, 3, 4, 5]
    assert len(postgres.messages(cid)) == 20


def test_a_long_batch_waits_on_the_server_as_often_as_a_short_one(
    postgres: ContextStore, tmp_path: Path
) -> None:
    """BEGIN, the reservation, the COMMIT: the five parts of 1,000 messages go out unread."""
    cid = postgres.create_conversation().id
    postgres.append(cid, "user", "<task>t</task>")
    batch = [assistant(f"a{i}") if i % 2 == 0 else user(f"u{i}") for i in range(1_000)]
    assert round_trips(postgres, tmp_path, lambda: postgres.append_many(cid, batch)) == 3
    assert len(postgres.messages(cid)) == 1_001


@pytest.mark.parametrize("where", ["first part", "last part"])
def test_a_message_too_large_in_any_part_writes_nothing(
    tmp_path: Path, small_parts: None, where: str
) -> None:
    store, cleanup = open_backend("postgres", tmp_path, max_message_bytes=2_000)
    try:
        cid = store.create_conversation().id
        store.append(cid, "user", "<task>t</task>")
        before = store.get_conversation(cid)
        batch = [assistant(f"a{i}") if i % 2 == 0 else user(f"u{i}") for i in range(20)]
        batch[0 if where == "first part" else 19] = assistant("x" * 3_000)
        with pytest.raises(ContentTooLargeError):
            store.append_many(cid, batch)
        assert store.get_conversation(cid) == before
        assert len(store.messages(cid)) == 1
        assert store.row_counts()["blocks"] == 1
    finally:
        cleanup()


def test_a_refused_reservation_writes_nothing(postgres: ContextStore, small_parts: None) -> None:
    cid = postgres.create_conversation().id
    first = postgres.append(cid, "user", "<task>t</task>")
    batch = [assistant(f"a{i}") if i % 2 == 0 else user(f"u{i}") for i in range(20)]
    with pytest.raises(TimelineError):
        postgres.append_many(cid, batch, ts=first.ts)
    with pytest.raises(ConversationNotFoundError):
        postgres.append_many("0" * 32, batch)
    assert len(postgres.messages(cid)) == 1
    assert postgres.row_counts()["blocks"] == 1
    appended = postgres.append_many(cid, batch, ts=first.ts + 1_000)
    assert [a.ts for a in appended] == list(range(first.ts + 1_000, first.ts + 1_020))


def test_batches_in_parts_from_two_threads_stay_whole_and_in_order(
    postgres: ContextStore, small_parts: None
) -> None:
    """Each batch's reservation holds the conversation's row until its COMMIT: batches of
    two threads land one after the other, never interleaved, every index used once."""
    cid = postgres.create_conversation().id
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            for batch in range(4):
                postgres.append_many(
                    cid,
                    [
                        user(f"{name} {batch} {i}") if i % 2 == 0 else assistant(f"{name} {i}")
                        for i in range(20)
                    ],
                )
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stored = postgres.messages(cid)
    assert len(stored) == 160
    for start in range(0, 160, 20):
        batch = stored[start : start + 20]
        first = batch[0]["content"][0]["text"]
        name, number = first.split()[:2]
        assert [m["content"][0]["text"] for m in batch[::2]] == [
            f"{name} {number} {i}" for i in range(0, 20, 2)
        ]
    ts = [n.ts for n in postgres.nodes(cid)]
    assert ts == sorted(ts) and len(set(ts)) == 160


def _blocks_statements(store: ContextStore, cid: str, batch: list[dict[str, Any]]) -> int:
    with recorded_statements(store) as statements:
        appended = store.append_many(cid, batch)
    assert {a.conversation_id for a in appended} == {cid}
    assert [a.ts for a in appended] == [n.ts for n in store.nodes(cid)[-len(batch) :]]
    return sum("INSERT INTO blocks" in s for s in statements)


def test_a_batch_of_two_parts_exactly_goes_in_parts(
    postgres: ContextStore, small_parts: None
) -> None:
    """One message short of two parts is one statement; two parts are three (4, 2 and 2).
    Either way the appended messages name their conversation and the ``ts`` stored."""
    cid = postgres.create_conversation().id
    batch = [user(f"u{i}") if i % 2 == 0 else assistant(f"a{i}") for i in range(8)]
    assert _blocks_statements(postgres, cid, batch[:7]) == 1
    assert _blocks_statements(postgres, cid, batch) == len(appends.part_sizes(8)) == 3
    assert len(postgres.messages(cid)) == 15


def test_a_result_is_paired_with_the_calls_that_end_the_part_before(
    postgres: ContextStore, small_parts: None
) -> None:
    """A result whose id names no call, first in its part, pairs with the calls of the
    message that ends the part before: its last message, not another of the part's."""
    cid = postgres.create_conversation().id
    batch = [
        user("<task>t</task>"),
        user("note"),  # the part's second message: no calls to pair with
        assistant("thinking"),
        assistant("gemini", tool_use("g1", path="c.py")),  # ends the first part of 4
        user(tool_result("response-1", "c = 3\n")),  # begins the second
    ]
    batch += [assistant("ok") if i % 2 == 0 else user(f"u{i}") for i in range(7)]
    postgres.append_many(cid, batch)
    typed = {n.id: (n.node_type, n.path) for n in postgres.nodes(cid)}
    assert typed["m4.b0"] == ("file_content", "c.py")


def test_a_broken_invariant_in_a_later_part_names_its_message(
    postgres: ContextStore, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = postgres.create_conversation().id
    postgres.append(cid, "user", "kept")
    real = core_nodes.node_rows
    typed = 0

    def one_miscounted(kinds: Any, counts: Any) -> list[NodeRow]:
        nonlocal typed
        typed += 1
        rows = real(kinds, counts)
        if typed == 14:  # the batch's 14th message, at index 14: the 2nd of the 4th part
            return [row._replace(token_count=row.token_count + 1) for row in rows]
        return rows

    monkeypatch.setattr(core_nodes, "node_rows", one_miscounted)
    batch = [assistant(f"a{i}") if i % 2 == 0 else user(f"u{i}") for i in range(20)]
    with pytest.raises(NodeInvariantError, match=r"node m14\.b0 .*recount"):
        postgres.append_many(cid, batch)
    assert postgres.messages(cid) == [{"role": "user", "content": "kept"}]


def test_only_the_calls_this_store_does_not_remember_are_looked_up(
    postgres: ContextStore, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch in parts answering a remembered call and one another process appended (as
    far as this store knows) looks up the second only; the batch's own calls are then
    remembered, so answering them needs no lookup."""
    cid = postgres.create_conversation().id
    postgres.append_many(
        cid,
        [
            user("<task>t</task>"),
            assistant("reading", tool_use("c1", path="a.py"), tool_use("c2", path="b.py")),
        ],
    )
    del postgres._recent_calls[(cid, "c1")]
    looked_up: list[list[str]] = []
    real = stored_nodes.find_calls

    def find_calls(connection: Any, conversation_id: str, ids: Any) -> Any:
        looked_up.append(list(ids))
        return real(connection, conversation_id, ids)

    monkeypatch.setattr(stored_nodes, "find_calls", find_calls)
    batch = [user(tool_result("c1", "a = 1\n"), tool_result("c2", "b = 2\n"))]
    batch += [assistant("ok") if i % 2 == 0 else user(f"u{i}") for i in range(8)]
    batch.append(assistant("next", tool_use("c3", path="c.py")))
    postgres.append_many(cid, batch)
    assert looked_up == [["c1"]]
    typed = {n.id: (n.node_type, n.path) for n in postgres.nodes(cid)}
    assert typed["m2.b0"] == ("file_content", "a.py")
    assert typed["m2.b1"] == ("file_content", "b.py")

    postgres.append(cid, "user", [tool_result("c3", "c = 3\n")])
    assert looked_up == [["c1"]]
    assert postgres.nodes(cid)[-1].node_type == "file_content"
