"""Property: any paired conversation renders to a payload its provider accepts."""

from __future__ import annotations

import copy
from typing import Any

from conversations import png_image, text, tool_result, tool_use
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.renderers.registry import FORMATS, build_request, validate_provider_payload

Message = dict[str, Any]
Draw = st.DrawFn

_WORDS = st.sampled_from(["ok", "done", "look here", "naïve", ""])


def _user_content(draw: Draw) -> str | list[dict[str, Any]]:
    if draw(st.booleans()):
        return draw(_WORDS.filter(bool))
    blocks = [text(draw(_WORDS.filter(bool)))]
    if draw(st.booleans()):
        blocks.append(png_image())
    return blocks


def _result_content(draw: Draw) -> Any:
    return draw(
        st.sampled_from(
            [
                "output",
                "",
                [],
                [text("line")],
                [text("shot"), png_image()],
                [png_image()],
                "result missing",
            ]
        )
    )


def _assistant(draw: Draw, call_ids: list[str]) -> Message:
    blocks: list[dict[str, Any]] = []
    if draw(st.booleans()):
        thinking: dict[str, Any] = {"type": "thinking", "thinking": "hm"}
        if draw(st.booleans()):
            thinking["signature"] = "sig"
        blocks.append(thinking)
    if draw(st.booleans()) or not (blocks or call_ids):
        blocks.append(text(draw(_WORDS)))
    blocks.extend(
        tool_use(call_id, draw(st.sampled_from(["read", "grep"])), {"n": 1}) for call_id in call_ids
    )
    return {"role": "assistant", "content": blocks, "ts": draw(st.integers(0, 10))}


def _results(draw: Draw, call_ids: list[str]) -> Message:
    blocks = [
        tool_result(call_id, _result_content(draw), is_error=draw(st.booleans()))
        for call_id in call_ids
    ]
    if draw(st.booleans()):
        blocks.append(text("and then?"))
    return {"role": "user", "content": blocks}


@st.composite
def paired_conversations(draw: Draw) -> list[Message]:
    """User text, then exchanges of assistant text/tool_use and the matching user turn."""
    messages: list[Message] = [{"role": "user", "content": _user_content(draw)}]
    next_id = 0
    for _ in range(draw(st.integers(0, 6))):
        count = draw(st.integers(0, 3))
        call_ids = [f"toolu_{next_id + i}" for i in range(count)]
        next_id += count
        messages.append(_assistant(draw, call_ids))
        if call_ids:
            messages.append(_results(draw, call_ids))
        else:
            messages.append({"role": "user", "content": _user_content(draw)})
    if draw(st.booleans()):
        messages.append(_assistant(draw, []))
    return messages


@settings(max_examples=300, deadline=None)
@given(paired_conversations())
def test_every_format_yields_a_valid_payload(messages: list[Message]) -> None:
    before = copy.deepcopy(messages)
    for fmt in FORMATS:
        body = build_request(fmt, messages, system="S", model="m", max_tokens=64)
        assert validate_provider_payload(fmt, body) == [], (fmt, body)
    assert messages == before
