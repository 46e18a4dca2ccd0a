"""Messages rendered one by one (what a repeated prepare reuses) and the payload hash built
from their canonical JSON: the same as rendering, checking and hashing the whole payload."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.validate import payload_sha256, payload_sha256_of
from contextstore.renderers.anthropic import (
    RenderedMessage,
    as_final,
    build_request,
    conforming,
    render_message,
    render_messages,
    violations,
)

Draw = st.DrawFn

_TEXTS = st.sampled_from(["ok", "", "  ", "naïve ✓", 'quote " and \\ back', "ends with space \n "])
_IDS = st.sampled_from(["a", "b", "c"])


@st.composite
def _block(draw: Draw) -> dict[str, Any]:
    kind = draw(st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image"]))
    if kind == "text":
        return {"type": "text", "text": draw(_TEXTS), "call_id": "x"}
    if kind == "tool_use":
        return {"type": "tool_use", "id": draw(_IDS), "name": "read", "input": {"p": [1, "é"]}}
    if kind == "tool_result":
        content = draw(st.one_of(_TEXTS, st.just([{"type": "text", "text": "line"}])))
        return {"type": "tool_result", "tool_use_id": draw(_IDS), "content": content}
    if kind == "thinking":
        block = {"type": "thinking", "thinking": "hm"}
        if draw(st.booleans()):
            block["signature"] = "sig"
        return block
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}


@st.composite
def _message(draw: Draw) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "assistant", "user", "assistant", "system"]))
    content: Any = draw(_TEXTS) if draw(st.booleans()) else draw(st.lists(_block(), max_size=4))
    return {"role": role, "content": content, "ts": 3}


def _alternating(draw: Draw) -> list[dict[str, Any]]:
    """Mostly well-formed conversations: calls answered by the next message's results."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for turn in range(draw(st.integers(0, 5))):
        calls = [f"t{turn}.{i}" for i in range(draw(st.integers(0, 2)))]
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": draw(_TEXTS)},
                    *({"type": "tool_use", "id": c, "name": "r", "input": {}} for c in calls),
                ],
            }
        )
        results = [{"type": "tool_result", "tool_use_id": c, "content": "x"} for c in calls]
        if draw(st.booleans()):
            results.reverse()
        messages.append({"role": "user", "content": results or draw(_TEXTS)})
    if draw(st.booleans()):
        # a prefill: the request ends with the start of the model's answer
        texts = st.lists(st.builds(lambda t: {"type": "text", "text": t}, _TEXTS), min_size=1)
        messages.append({"role": "assistant", "content": draw(st.one_of(_TEXTS, texts))})
    return messages


@st.composite
def _conversations(draw: Draw) -> list[dict[str, Any]]:
    if draw(st.booleans()):
        return _alternating(draw)
    return draw(st.lists(_message(), max_size=6))


@settings(max_examples=400, deadline=None)
@given(_conversations())
def test_conforming_pieces_are_the_rendered_payload_and_break_no_rule(
    messages: list[dict[str, Any]],
) -> None:
    pieces = [render_message(message) for message in messages]
    if any(piece is None for piece in pieces):
        assert any(m["role"] not in ("user", "assistant") for m in messages)
        return
    rendered = _composed([piece for piece in pieces if piece is not None])
    whole = render_messages(messages)
    for piece in rendered:
        copied = piece.copy()
        assert copied == piece.message
        assert not _shared_containers(copied, piece.message)
    if conforming(rendered):
        assert [piece.message for piece in rendered] == whole
        assert violations(whole) == []
    elif [piece.message for piece in rendered] == whole:
        # Not conforming although nothing merged: the whole check must find a problem,
        # or the pieces repeat a call id (a case left to the whole check).
        assert violations(whole) or any(
            len(set(piece.calls)) != len(piece.calls) for piece in rendered
        )


def _composed(pieces: list[RenderedMessage]) -> list[RenderedMessage]:
    """The pieces as a prepare sends them: the last one as the last message is rendered."""
    return [*pieces[:-1], as_final(pieces[-1])] if pieces else []


def _shared_containers(one: Any, other: Any) -> bool:
    """Whether ``one`` and ``other`` hold the same list or dict object anywhere."""

    def containers(value: Any) -> list[int]:
        if isinstance(value, dict):
            return [id(value), *(i for v in value.values() for i in containers(v))]
        if isinstance(value, list):
            return [id(value), *(i for v in value for i in containers(v))]
        return []

    return bool(set(containers(one)) & set(containers(other)))


def test_well_formed_conversations_conform() -> None:
    messages = [
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "two calls"},
                {"type": "tool_use", "id": "a", "name": "r", "input": {}},
                {"type": "tool_use", "id": "b", "name": "r", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "b", "content": "2"},
                {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                {"type": "text", "text": "go on"},
            ],
        },
    ]
    rendered = [render_message(message) for message in messages]
    assert all(piece is not None for piece in rendered)
    assert conforming([piece for piece in rendered if piece is not None])
    assert not conforming([piece for piece in rendered[:2] if piece is not None])


def test_the_last_piece_is_sent_as_a_final_message_and_the_kept_one_is_unchanged() -> None:
    messages = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": [{"type": "text", "text": "Sure, "}]},
    ]
    pieces = [render_message(message) for message in messages]
    assert all(piece is not None for piece in pieces)
    first, last = (piece for piece in pieces if piece is not None)
    # as rendered anywhere but last, it would break the final-message rule: not conforming
    assert not conforming([first, last])
    final = as_final(last)
    assert conforming([first, final])
    assert [first.message, final.message] == render_messages(messages)
    assert final.canonical == b'{"content":[{"text":"Sure,","type":"text"}],"role":"assistant"}'
    # the piece a next prepare may reuse (the message no longer last) keeps its text
    assert last.message["content"] == [{"type": "text", "text": "Sure, "}]
    assert as_final(first) is first and as_final(final) is final
    assert as_final(last, rules=4) is last


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    system=st.one_of(st.none(), st.text(max_size=8)),
    tools=st.one_of(st.none(), st.lists(st.builds(dict, name=st.text(max_size=4)), max_size=2)),
    model=st.one_of(st.none(), st.text(max_size=6)),
    max_tokens=st.one_of(st.none(), st.integers(1, 10_000)),
    conversation=_conversations(),
)
def test_the_hash_from_pieces_is_the_hash_of_the_payload(
    system: str | None,
    tools: list[dict[str, Any]] | None,
    model: str | None,
    max_tokens: int | None,
    conversation: list[dict[str, Any]],
) -> None:
    messages = [m for m in conversation if m["role"] in ("user", "assistant")]
    body = build_request(messages, system=system, tools=tools, model=model, max_tokens=max_tokens)
    fields = {key: value for key, value in body.items() if key != "messages"}
    pieces = [render_message(message) for message in body["messages"]]
    encoded = [piece.canonical for piece in pieces if piece is not None]
    assert len(encoded) == len(body["messages"])
    assert payload_sha256_of(fields, "messages", encoded) == payload_sha256(body)


@given(fields=st.dictionaries(st.text(max_size=4), _JSON, max_size=4), items=st.lists(_JSON))
def test_the_hash_from_pieces_for_any_fields_and_items(
    fields: dict[str, Any], items: list[Any]
) -> None:
    from contextstore.core.validate import canonical_json

    fields.pop("list", None)
    encoded = [canonical_json(item).encode("utf-8") for item in items]
    assert payload_sha256_of(fields, "list", encoded) == payload_sha256({**fields, "list": items})
