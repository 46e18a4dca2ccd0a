"""A conversation's model and window changed mid-task (``set_conversation_model``), as a
user switching Cline from a 200,000-token model to a 128,000-token one does: the next
prepare decides against the new window, and the audit keeps judging past requests against
the window they were sent with."""

from __future__ import annotations

import pytest

from contextstore import ContextStore, context_window_info
from contextstore.core.errors import ConversationNotFoundError, InvalidInputError
from tests.conftest import assistant, user

USED = 150_100
"""A previous request's total: under 200,000's maximum (160,000), over 128,000's (98,000)."""


def _conversation(store: ContextStore, window: int | None = 200_000) -> str:
    cid = store.create_conversation(model_id="claude-sonnet-4-5", context_window=window).id
    store.append(cid, "user", "<task>t</task>")
    for n in range(10):
        store.append(cid, [assistant(f"a{n}"), user(f"u{n}")])
    ctx = store.prepare_request(cid)
    store.record_request(cid, request_id=ctx.request_id, tokens_in=USED - 100, tokens_out=100)
    return cid


def test_the_next_prepare_truncates_at_the_new_window(store: ContextStore) -> None:
    kept = _conversation(store)
    switched = _conversation(store)
    changed = store.set_conversation_model(switched, model_id="gpt-4o", context_window=128_000)
    assert (changed.model_id, changed.context_window) == ("gpt-4o", 128_000)
    assert store.get_conversation(switched) == changed

    assert store.prepare_request(kept).decision.action == "none"
    ctx = store.prepare_request(switched)
    assert ctx.decision.action == "truncate" and ctx.decision.keep == "half"
    assert "for a 128,000-token window" in ctx.decision.reason
    assert ctx.deleted_range is not None and len(ctx.messages) < 21
    assert [r.model_id for r in store.requests(switched)] == ["claude-sonnet-4-5", "gpt-4o"]


def test_an_argument_left_out_keeps_its_value(store: ContextStore) -> None:
    cid = store.create_conversation(model_id="m1", context_window=64_000).id
    assert store.set_conversation_model(cid, context_window=32_000).model_id == "m1"
    assert store.set_conversation_model(cid, model_id="m2").context_window == 32_000
    conv = store.get_conversation(cid)
    assert (conv.model_id, conv.context_window) == ("m2", 32_000)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "needs model_id, context_window or both"),
        ({"context_window": 0}, "context_window"),
        ({"context_window": True}, "context_window"),
        ({"model_id": ""}, "model_id"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    memory_store: ContextStore, kwargs: dict[str, object], match: str
) -> None:
    cid = memory_store.create_conversation(model_id="m", context_window=200_000).id
    with pytest.raises(InvalidInputError, match=match):
        memory_store.set_conversation_model(cid, **kwargs)  # type: ignore[arg-type]
    conv = memory_store.get_conversation(cid)
    assert (conv.model_id, conv.context_window) == ("m", 200_000)


def test_an_unknown_conversation_is_not_found(memory_store: ContextStore) -> None:
    with pytest.raises(ConversationNotFoundError):
        memory_store.set_conversation_model("nobody", context_window=128_000)


def test_a_rollback_does_not_undo_the_switch(memory_store: ContextStore) -> None:
    cid = _conversation(memory_store)
    memory_store.checkpoint(cid, "before")
    memory_store.set_conversation_model(cid, context_window=128_000)
    memory_store.append(cid, "assistant", "later")
    memory_store.rollback(cid, to="before")
    assert memory_store.get_conversation(cid).context_window == 128_000


def test_the_audit_judges_each_request_against_the_window_it_was_sent_with(
    store: ContextStore,
) -> None:
    cid = _conversation(store)
    sent = store.requests(cid)[0].id
    store.set_conversation_model(cid, model_id="gpt-4o", context_window=128_000)
    ctx = store.prepare_request(cid)
    store.record_request(cid, request_id=ctx.request_id, tokens_in=90_000)
    store.record_request(cid, tokens_in=100_000)  # recorded without a prepare

    before, after, unprepared = store.audit(cid).requests
    assert (before.request_id, after.request_id) == (sent, ctx.request_id)
    assert (before.context_window, before.max_allowed_size) == (200_000, 160_000)
    assert before.percent_of_window == pytest.approx(100 * USED / 200_000)
    assert not before.over_max_allowed
    assert (after.context_window, after.max_allowed_size) == (128_000, 98_000)
    assert not after.over_max_allowed
    assert unprepared.context_window == 128_000 and unprepared.over_max_allowed
    (row,) = store.query(
        "SELECT context_window FROM audit_requests WHERE request_id = "
        f"{sent}"  # an integer id the store gave
    ).rows
    assert row == (200_000,)
    assert store.audit(cid).context_window == 128_000  # the headline: the window now
    # The request sent before the switch still rebuilds exactly (hash-verified).
    assert store.request_payload(cid, sent)["messages"]


def test_an_unknown_window_is_recorded_as_the_window_assumed(store: ContextStore) -> None:
    cid = _conversation(store, window=None)
    store.set_conversation_model(cid, context_window=1_000_000)
    first = store.audit(cid).requests[0]
    assert first.context_window == context_window_info(None).context_window == 128_000
    assert first.over_max_allowed
