"""Appending messages: validation, losslessness, token counts, and refusals that write nothing."""

from __future__ import annotations

from typing import Any

import pytest

from contextstore import (
    ContentTooLargeError,
    ContextStore,
    ContextStoreError,
    ConversationNotFoundError,
    InvalidInputError,
    InvalidMessageError,
    TimelineError,
)
from contextstore.core import content
from contextstore.core.tokens import TiktokenCounter
from tests.conftest import (
    BACKENDS,
    assistant,
    file_read,
    open_backend,
    tool_result,
    tool_use,
    user,
)

CLINE_ASSISTANT: dict[str, Any] = {
    "role": "assistant",
    "content": [
        {"type": "thinking", "thinking": "let me look", "signature": "sig=="},
        {"type": "text", "text": "Reading.", "call_id": "c1", "reasoning_details": [{"k": 1}]},
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "read_file",
            "input": {"path": "a.py"},
            "call_id": "c2",
            "signature": "s",
        },
    ],
    "id": "resp_123",
    "ts": 1700000000000,
    "modelInfo": {"modelId": "claude-sonnet-4-5", "providerId": "anthropic", "mode": "act"},
    "metrics": {"tokens": {"prompt": 10, "completion": 5, "cached": 0}, "cost": 0.01},
}


def test_append_returns_index_ts_and_token_count(store: ContextStore) -> None:
    conv = store.create_conversation(model_id="claude-sonnet-4-5", context_window=200_000)
    first = store.append(conv.id, "user", [{"type": "text", "text": "<task>hello</task>"}])
    second = store.append(conv.id, "assistant", "Hi there")
    assert (first.index, second.index) == (0, 1)
    assert first.ts < second.ts
    assert first.token_count > 4 and second.token_count > 4


def test_append_many_is_one_transaction(store: ContextStore) -> None:
    conv = store.create_conversation()
    good = user("task")
    with pytest.raises(InvalidMessageError, match="message 1"):
        store.append(conv.id, [good, {"role": "robot", "content": "x"}])
    assert store.messages(conv.id) == []
    written = store.append(conv.id, [good, assistant("ok")])
    assert [w.index for w in written] == [0, 1]


def test_append_then_render_is_lossless(store: ContextStore) -> None:
    conv = store.create_conversation()
    originals = [
        user(
            "<task>x</task>",
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            },
        ),
        CLINE_ASSISTANT,
        user(
            tool_result("toolu_1", [{"type": "text", "text": "body"}], is_error=False, call_id="c2")
        ),
        {"role": "assistant", "content": "plain string content"},
        {"role": "user", "content": "string user content"},
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "abc"},
                {"type": "text", "text": "done"},
            ],
        },
    ]
    store.append(conv.id, originals)
    assert store.messages(conv.id) == originals
    assert store.render(conv.id) == originals


def test_callers_objects_are_not_mutated(store: ContextStore) -> None:
    conv = store.create_conversation()
    message = user("hello")
    snapshot = repr(message)
    store.append(conv.id, [message])
    rendered = store.render(conv.id)
    rendered[0]["content"][0]["text"] = "changed"
    assert repr(message) == snapshot
    assert store.render(conv.id)[0]["content"][0]["text"] == "hello"


def test_token_counts_are_computed_once_at_append(store: ContextStore) -> None:
    counter = TiktokenCounter()
    counted = ContextStore(store.database, location=store.location, token_counter=counter)
    conv = counted.create_conversation()
    counted.append(
        conv.id,
        [
            user("one two three"),
            assistant("four", tool_use("t1", path="a.py")),
            user(tool_result("t1")),
        ],
    )
    calls = counter.calls
    # Each text once (a call: its name and its input): nothing is counted per block and
    # again per message.
    assert calls == 5
    counted.render(conv.id)
    counted.messages(conv.id)
    counted.prepare_request(conv.id)
    assert counter.calls == calls


class _Answering:
    """A token counter answering ``answer`` (raising it, if it is an exception)."""

    name = "answering"

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def count(self, text: str) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "refused", "said"),
    [
        (None, InvalidInputError, "count(text) returned None for a text of 5 characters"),
        ("3", InvalidInputError, "count(text) returned '3'"),
        (1.5, InvalidInputError, "count(text) returned 1.5"),
        (True, InvalidInputError, "count(text) returned True"),
        (-1, InvalidInputError, "count(text) returned -1"),
        (2**63, InvalidInputError, f"count(text) returned {2**63}"),
        (ValueError("no model"), ContextStoreError, "the token counter failed (ValueError: no"),
    ],
)
def test_a_token_counters_wrong_answer_is_refused_and_nothing_is_written(
    store: ContextStore, answer: object, refused: type[Exception], said: str
) -> None:
    """None or a string raised TypeError, a count past SQLite's integers OverflowError, the
    counter's own exception went through as it was, and a negative or fractional count was
    called "a bug in contextstore"."""
    counted = ContextStore(
        store.database, location=store.location, token_counter=_Answering(answer)
    )
    conv = counted.create_conversation()
    before = counted.row_counts(conv.id)
    with pytest.raises(refused) as raised:
        counted.append(conv.id, "user", "hello")
    assert said in str(raised.value)
    assert "Nothing was written" in str(raised.value) or "nothing was written" in str(raised.value)
    assert counted.row_counts(conv.id) == before
    assert counted.messages(conv.id) == []


def test_images_and_documents_get_documented_estimates(store: ContextStore) -> None:
    from contextstore.devtools.demo_data import tiny_png

    conv = store.create_conversation()
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": tiny_png(300, 250)},
    }
    url_image = {"type": "image", "source": {"type": "url", "url": "https://example.invalid/a.png"}}
    written = store.append(conv.id, [user(image), user(url_image)])
    assert written[0].token_count == 4 + 100  # ceil(300 * 250 / 750)
    assert written[1].token_count == 4 + 1_600


@pytest.mark.parametrize(
    ("role", "content", "expected"),
    [
        ("system", "x", "role 'system' is not valid"),
        ("user", [], "non-empty list"),
        ("user", 42, "content must be a string"),
        ("user", [{"type": "video"}], "unknown type 'video'"),
        ("user", [{"type": "tool_result", "content": "x"}], "without a tool_use_id"),
        ("user", [{"type": "text"}], r"^content\[0\] \(text\) has no text; set it to a string\.$"),
        ("user", ["just a string"], "must be a dict"),
        (
            "assistant",
            [{"type": "tool_use", "id": "", "name": "x", "input": {}}],
            r"content\[0\] \(tool_use\): id must not be empty",
        ),
        (
            "user",
            [{"type": "tool_result", "tool_use_id": "x", "content": "ok", "is_error": "yes"}],
            r"content\[0\] \(tool_result\): is_error must be True or False, got 'yes'",
        ),
        (
            "user",
            [{"type": "text", "text": "ok"}, {"type": "text", "text": "x", "cache_control": 5}],
            r"content\[1\] \(text\): cache_control must be \{'type': 'ephemeral'\}",
        ),
        ("user", [tool_use("a")], "cannot contain tool_use"),
        ("assistant", [tool_result("a")], "cannot contain tool_result"),
        (
            "assistant",
            [tool_use("d"), tool_use("d")],
            r"content\[0\] and content\[1\] are two calls with the id 'd'",
        ),
    ],
)
def test_bad_messages_are_refused_and_nothing_is_written(
    store: ContextStore, role: str, content: Any, expected: str
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "first")
    before = store.row_counts()
    with pytest.raises(InvalidMessageError, match=expected):
        store.append(conv.id, role, content)
    assert store.row_counts() == before


def test_a_single_message_dict_is_refused_with_the_two_call_forms(store: ContextStore) -> None:
    conv = store.create_conversation()
    before = store.row_counts()
    with pytest.raises(InvalidMessageError, match=r"single message dict .* put it in a list"):
        store.append(conv.id, {"role": "user", "content": "hi"})  # type: ignore[call-overload]
    assert store.row_counts() == before
    store.append(conv.id, [{"role": "user", "content": "hi"}])
    assert [m["content"] for m in store.messages(conv.id)] == ["hi"]


def test_unknown_conversation(store: ContextStore) -> None:
    with pytest.raises(ConversationNotFoundError, match="no conversation has id 'nope'"):
        store.append("nope", "user", "x")
    with pytest.raises(ConversationNotFoundError):
        store.render("nope")


def test_a_ts_earlier_than_the_last_is_refused(store: ContextStore) -> None:
    conv = store.create_conversation()
    written = store.append(conv.id, "user", "x")
    before = store.row_counts()
    with pytest.raises(TimelineError, match="not later than"):
        store.append(conv.id, "assistant", "y", ts=written.ts)
    assert store.row_counts() == before
    forced = store.append(conv.id, "assistant", "y", ts=written.ts + 1_000)
    assert forced.ts == written.ts + 1_000


@pytest.mark.parametrize("backend", BACKENDS)
def test_oversized_messages_get_a_clear_error(backend: str, tmp_path: Any) -> None:
    small, cleanup = open_backend(backend, tmp_path, max_message_bytes=1_000)
    try:
        conv = small.create_conversation()
        with pytest.raises(ContentTooLargeError, match="over the limit of 1,000"):
            small.append(conv.id, "user", "x" * 2_000)
        assert small.messages(conv.id) == []
    finally:
        cleanup()


def test_a_message_far_under_the_limit_is_appended_without_encoding_it(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size check's upper bound settles it; the canonical JSON is for messages near or
    over the limit (whose refusal the test above shows)."""
    encoded: list[Any] = []
    exact = content.canonical_json

    def counted(value: Any) -> str:
        encoded.append(value)
        return exact(value)

    monkeypatch.setattr(content, "canonical_json", counted)
    conv = store.create_conversation()
    store.append(conv.id, [user("hello"), assistant(tool_use("t1")), user(tool_result("t1"))])
    store.append(conv.id, "assistant", "done", meta={"id": "m-4"})
    assert encoded == []
    assert len(store.messages(conv.id)) == 4


def test_create_conversation_validates(store: ContextStore) -> None:
    with pytest.raises(InvalidInputError, match="context_window"):
        store.create_conversation(context_window=0)
    conv = store.create_conversation(id="fixed-id", title="t", metadata={"cwd": "/w"})
    assert store.get_conversation("fixed-id") == conv
    with pytest.raises(InvalidInputError, match="already exists"):
        store.create_conversation(id="fixed-id")


def test_file_read_factory_round_trips(store: ContextStore) -> None:
    conv = store.create_conversation()
    messages = [user("t"), assistant(tool_use("a", path="x")), user(file_read("a", "x", "body"))]
    store.append(conv.id, messages)
    assert store.render(conv.id) == messages


def test_delete_conversation_removes_every_row_it_owns(store: ContextStore) -> None:
    conv = store.create_conversation()
    other = store.create_conversation()
    store.append(conv.id, [user("a"), assistant("b"), user("c"), assistant("d")])
    store.append(other.id, "user", "stays")
    store.record_request(conv.id, tokens_in=5)
    cp = store.checkpoint(conv.id, "cp")
    store.append(conv.id, "user", "later")
    store.rollback(conv.id, cp.ts)
    store.add_context_update(conv.id, 0, 0, "x")
    child = store.fork(conv.id)
    removed = store.delete_conversation(conv.id)
    assert (
        removed["messages"] == 4
        and sum(n for t, n in removed.items() if t.startswith("archived_")) >= 2
        and removed["rollbacks"] == 1
    )
    assert store.row_counts(conv.id) == dict.fromkeys(removed, 0)
    assert store.get_conversation(child.id).parent_id is None
    assert store.render(other.id)[0]["content"] == "stays"
    with pytest.raises(ConversationNotFoundError):
        store.delete_conversation(conv.id)


def test_a_failed_request_is_recorded_with_its_reason(store: ContextStore) -> None:
    from sqlalchemy import text as sql

    conv = store.create_conversation(context_window=64_000)
    store.append(conv.id, [user("a"), assistant("b")])
    ctx = store.prepare_request(conv.id)
    assert ctx.request_id is not None
    failed = store.record_request(
        conv.id, request_id=ctx.request_id, failure="context_window_exceeded"
    )
    assert failed.failure == "context_window_exceeded" and failed.total_tokens == 0
    assert store.requests(conv.id)[-1] == failed
    with store.database.engine.connect() as connection:
        rows = connection.execute(
            sql("SELECT failure FROM request_usage WHERE request_id = :r"), {"r": ctx.request_id}
        ).all()
    assert rows == [("context_window_exceeded",)]
    with pytest.raises(InvalidInputError, match="failure"):
        store.record_request(conv.id, failure="")


def test_a_constraint_broken_inside_a_write_is_a_contextstore_error(store: ContextStore) -> None:
    from sqlalchemy import insert

    from contextstore import IntegrityViolationError
    from contextstore.storage.tables import conversations

    conv = store.create_conversation(id="taken")
    before = store.row_counts()

    def duplicate(connection: Any) -> None:
        connection.execute(
            insert(conversations).values(id=conv.id, created_ts=1, last_ts=1, metadata={})
        )

    with pytest.raises(IntegrityViolationError, match="rolled back"):
        store.database.write(duplicate)
    assert store.row_counts() == before
