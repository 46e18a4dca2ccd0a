"""Prepares reuse the previous prepare's work: the state read, the rewritten messages and
the rendered payload pieces. A reused prepare must equal one that reads and renders
everything again, whatever was written in between (appends, rewrites, ranges, rollbacks,
restores, forks, other processes); the work it saves is counted, never timed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextstore import ContextStore
from contextstore.core.records import PreparedRequest
from contextstore.facade.prepare_memo import PrepareMemo
from contextstore.renderers import anthropic
from contextstore.renderers.anthropic import RenderedMessage
from tests.conftest import (
    StoreFactory,
    assistant,
    session,
    text,
    tool_result,
    tool_use,
    user,
)

SECRET = "AKIA" + "ABCDEFGHJKLMNPQR"


def _turn(number: int, body: str = "") -> list[dict[str, Any]]:
    return [
        assistant(f"step {number}", tool_use(f"c{number}", path=f"f{number}.py")),
        user(tool_result(f"c{number}", body or f"contents of f{number}.py")),
    ]


def _memo(store: ContextStore, conversation_id: str) -> PrepareMemo:
    memo = store.prepare_cache.get(conversation_id)
    assert isinstance(memo, PrepareMemo)
    return memo


def _checked(store: ContextStore, conversation_id: str, **options: Any) -> PreparedRequest:
    """A prepare, checked against the payload rebuilt from rows (whose hash the stored one
    must match) and against a prepare that reuses nothing."""
    ctx = store.prepare_request(conversation_id, **options)
    assert store.request_payload(conversation_id, ctx.request_id) == ctx.payload
    kept = store.prepare_cache.get(conversation_id)
    store.prepare_cache.clear()
    fresh = store.prepare_request(conversation_id, **options)
    assert fresh.payload == ctx.payload
    assert fresh.messages == ctx.messages
    if kept is not None:
        store.prepare_cache.put(conversation_id, kept, kept.size)
    return ctx


def test_a_prepare_after_a_turn_reads_and_renders_only_the_turn(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(40))
    first = store.prepare_request(conv.id, system="Be brief.")
    earlier = _memo(store, conv.id)
    assert earlier.read_messages == 81
    assert earlier.rendered == 81
    store.record_request(conv.id, request_id=first.request_id, tokens_in=100, tokens_out=5)
    store.append(conv.id, _turn(40))
    second = store.prepare_request(conv.id, system="Be brief.")
    memo = _memo(store, conv.id)
    assert (memo.read_messages, memo.rendered) == (2, 2)
    # The earlier messages' entries are the earlier prepare's own: nothing built for them.
    kept = [key for key in memo.pieces if key in earlier.pieces]
    assert len(kept) == 81 and all(memo.pieces[key] is earlier.pieces[key] for key in kept)
    assert second.payload["messages"][:81] == first.payload["messages"]
    assert store.request_payload(conv.id, second.request_id) == second.payload


def test_after_a_cut_and_rewrites_only_the_new_turn_and_the_cut_s_edge_are_rebuilt(
    store: ContextStore,
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(30))
    store.set_deleted_range(conv.id, 21, keep="half", reason="test")
    for idx in range(22, 61, 4):
        store.add_context_update(conv.id, idx, 0, f"[trimmed {idx}]", source="test")
    _checked(store, conv.id)
    earlier = _memo(store, conv.id)
    store.append(conv.id, _turn(30))
    ctx = _checked(store, conv.id)
    memo = _memo(store, conv.id)
    # The two new messages, and the first message after the cut (repaired on every view).
    assert memo.read_messages == 2 and memo.rendered <= 3
    assert len(memo.cut) == len(earlier.cut) == 10
    assert all(memo.cut[i][2] is earlier.cut[i][2] for i in earlier.cut)
    assert len(ctx.messages) == len(store.render(conv.id))


def test_a_returned_payload_may_be_changed_without_changing_the_next(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(3))
    first = store.prepare_request(conv.id)
    first.payload["messages"][1]["content"][0]["text"] = "changed by the caller"
    first.payload["messages"][1]["content"][1]["input"]["path"] = "elsewhere"
    second = _checked(store, conv.id)
    assert second.messages[1]["content"][0]["text"] == "step 0"
    assert second.messages[1]["content"][1]["input"] == {"path": "f0.py"}


def test_rollbacks_and_discarded_rows_are_read_again(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(5))
    store.checkpoint(conv.id, "five")
    store.append(conv.id, _turn(5, f"a key {SECRET}"))
    _checked(store, conv.id)
    store.rollback(conv.id, "five")
    after_rollback = _checked(store, conv.id)
    assert _memo(store, conv.id).read_messages == 11
    assert len(after_rollback.messages) == 11
    stamp = store.checkpoint(conv.id, "eleven").ts
    store.append(conv.id, _turn(6, "replaced"))
    _checked(store, conv.id)
    # An importer replacing its rows in place: other content at the same timestamps.
    last = store.messages(conv.id)
    store.discard_imported_rows(conv.id, after=stamp)
    assert len(store.messages(conv.id)) == len(last) - 2
    store.append(conv.id, _turn(6, "replaced again"))
    ctx = _checked(store, conv.id)
    assert ctx.messages[-1]["content"][0]["content"] == "replaced again"


def test_a_restore_brings_the_removed_turn_back(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(4))
    store.checkpoint(conv.id, "four")
    store.append(conv.id, _turn(4))
    before = _checked(store, conv.id)
    report = store.rollback(conv.id, "four")
    assert report.rollback_id is not None
    store.restore(conv.id, report.rollback_id)
    ctx = _checked(store, conv.id)
    assert ctx.messages == before.messages


def test_writes_by_another_store_on_the_same_file_are_seen(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with ContextStore.open(path) as ours, ContextStore.open(path) as theirs:
        conv = ours.create_conversation()
        ours.append(conv.id, session(6))
        theirs.checkpoint(conv.id, "six")
        _checked(ours, conv.id)
        theirs.append(conv.id, _turn(6))
        _checked(ours, conv.id)
        assert _memo(ours, conv.id).read_messages == 2
        theirs.rollback(conv.id, "six")
        ctx = _checked(ours, conv.id)
        assert len(ctx.messages) == 13
        stamp = theirs.checkpoint(conv.id, "again").ts
        written = theirs.append(conv.id, _turn(7, "version one"))
        _checked(ours, conv.id)
        # Replaced in place: the same timestamps and token counts, another text.
        theirs.discard_imported_rows(conv.id, after=stamp)
        again = theirs.append(conv.id, _turn(7, "version two"), ts=written[0].ts)
        assert [m.ts for m in again] == [m.ts for m in written]
        assert [m.token_count for m in again] == [m.token_count for m in written]
        ctx = _checked(ours, conv.id)
        assert ctx.messages[-1]["content"][0]["content"] == "version two"


def test_forks_and_past_requests_are_rebuilt_the_same(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(5))
    early = _checked(store, conv.id)
    cp = store.checkpoint(conv.id, "five")
    store.append(conv.id, _turn(5))
    late = _checked(store, conv.id)
    fork = store.fork(conv.id, at=cp.ts)
    store.append(fork.id, _turn(50, "only in the fork"))
    forked = _checked(store, fork.id)
    assert forked.messages[:11] == early.messages
    assert forked.messages[-1]["content"][0]["content"] == "only in the fork"
    assert store.request_payload(conv.id, early.request_id) == early.payload
    assert store.request_payload(conv.id, late.request_id) == late.payload
    assert _checked(store, conv.id).messages == late.messages


def test_nothing_is_kept_inside_a_transaction_or_past_the_budget(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(3))
    with store.transaction():
        inside = store.prepare_request(conv.id)
    assert store.prepare_cache.get(conv.id) is None
    store.prepare_cache.max_bytes = 100
    ctx = store.prepare_request(conv.id)
    assert store.prepare_cache.get(conv.id) is None and store.prepare_cache.bytes == 0
    assert ctx.messages == inside.messages
    assert store.request_payload(conv.id, ctx.request_id) == ctx.payload


def test_other_formats_and_a_view_that_needs_merging_are_built_whole(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [user("task"), assistant("one"), assistant("two"), user("go")])
    ctx = _checked(store, conv.id)
    assert [m["role"] for m in ctx.messages] == ["user", "assistant", "user"]
    assert _memo(store, conv.id).pieces == {}
    for format in ("openai", "gemini"):
        ctx = _checked(store, conv.id, format=format)
        assert store.request_payload(conv.id, ctx.request_id) == ctx.payload


def test_a_final_assistant_message_is_sent_stripped_and_kept_as_rendered(
    store: ContextStore,
) -> None:
    """A prefill ending with whitespace (refused by Anthropic) is sent without it while it is
    last; the rendering kept for the next prepare, where it is no longer last, keeps it."""
    conv = store.create_conversation()
    store.append(conv.id, [*session(2), assistant("Here is the fix: \n")])
    first = _checked(store, conv.id)
    assert first.payload["messages"][-1]["content"] == [text("Here is the fix:")]
    assert _memo(store, conv.id).rendered == 6
    (kept,) = [
        piece
        for _, piece in _memo(store, conv.id).pieces.values()
        if piece.role == "assistant" and piece.message["content"][0]["text"].startswith("Here")
    ]
    assert kept.message["content"] == [text("Here is the fix: \n")]
    store.append(conv.id, [user("go on"), assistant("Done. ")])
    second = _checked(store, conv.id)
    assert _memo(store, conv.id).rendered == 2
    assert second.payload["messages"][-3]["content"] == [text("Here is the fix: \n")]
    assert second.payload["messages"][-1]["content"] == [text("Done.")]
    # built whole (no renderings kept), the payload is the same
    store.prepare_cache.clear()
    store.prepare_cache.max_bytes = 100
    assert store.prepare_request(conv.id).payload == second.payload


OPS = st.lists(
    st.sampled_from(["turn", "secret", "rewrite", "range", "checkpoint", "rollback", "fork"]),
    min_size=1,
    max_size=8,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, seed=st.integers(0, 1_000))
def test_a_reused_prepare_equals_a_fresh_one_after_any_writes(
    fresh_store: StoreFactory, ops: list[str], seed: int
) -> None:
    with fresh_store() as store:
        conv_id = store.create_conversation().id
        store.append(conv_id, session(4))
        turns = 4
        checkpoints: list[int] = []
        for number, op in enumerate(ops):
            count = len(store.messages(conv_id))
            if op in ("turn", "secret"):
                body = f"key {SECRET} in {number}" if op == "secret" else ""
                store.append(conv_id, _turn(turns, body))
                turns += 1
            elif op == "rewrite":
                idx = 2 + (seed + number) % (count - 2)
                store.add_context_update(conv_id, idx, 0, f"[rewritten {number}]", source="t")
            elif op == "range":
                current = store.deleted_range(conv_id)
                end = (current[1] if current else 1) + 2
                if end < count - 2:
                    store.set_deleted_range(conv_id, end, keep="half", reason="test")
            elif op == "checkpoint":
                checkpoints.append(store.checkpoint(conv_id, f"cp{number}").ts)
            elif op == "rollback" and checkpoints:
                store.rollback(conv_id, checkpoints.pop())
            elif op == "fork":
                conv_id = store.fork(conv_id).id
                checkpoints = []
            _checked(store, conv_id)


def test_the_prepare_cache_keeps_the_most_recent_conversations_within_its_bytes(
    memory_store: ContextStore,
) -> None:
    first, second = (memory_store.create_conversation().id for _ in range(2))
    for conv_id in (first, second):
        memory_store.append(conv_id, session(20))
    memory_store.prepare_request(first)
    one = _memo(memory_store, first).size
    assert memory_store.prepare_cache.bytes == one > 20 * 2048
    memory_store.prepare_cache.max_bytes = one * 3 // 2
    memory_store.prepare_request(second)
    assert memory_store.prepare_cache.get(first) is None
    assert memory_store.prepare_cache.get(second) is not None
    assert memory_store.prepare_cache.bytes <= memory_store.prepare_cache.max_bytes


def test_only_payloads_whose_renderings_are_kept_are_built_in_pieces_and_copied(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller gets copies of what the cache keeps; a conversation past the budget is
    kept by nobody, so its payload is built whole, with neither pieces nor copies."""
    copies: list[int] = []
    pieces: list[int] = []
    original_copy, original_render = RenderedMessage.copy, anthropic.render_message

    def counted_copy(self: RenderedMessage) -> dict[str, Any]:
        copies.append(1)
        return original_copy(self)

    def counted_render(message: Any, rules: int) -> RenderedMessage | None:
        pieces.append(1)
        return original_render(message, rules)

    monkeypatch.setattr(RenderedMessage, "copy", counted_copy)
    monkeypatch.setattr(anthropic, "render_message", counted_render)
    conv = store.create_conversation()
    store.append(conv.id, session(3))
    kept = store.prepare_request(conv.id)
    assert len(copies) == len(pieces) == len(kept.payload["messages"]) > 0
    copies.clear()
    pieces.clear()
    store.prepare_cache.clear()
    store.prepare_cache.max_bytes = 100
    shared = store.prepare_request(conv.id)
    assert copies == pieces == [] and shared.payload == kept.payload
    assert store.prepare_cache.get(conv.id) is None
    shared.payload["messages"][1]["content"][0]["text"] = "changed by the caller"
    assert store.prepare_request(conv.id).payload == kept.payload
