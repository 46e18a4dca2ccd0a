"""Images whose data the provider cannot read (view rules 8).

An image that is not base64, that is empty, or (for Anthropic and OpenAI, which read PNG,
JPEG, GIF and WebP only, each of which begins with its signature) that begins as none of
those four, is refused by the API, and with it every later request that holds it. A render
sends a text block in its place; the stored rows keep the image. Python's own decoder
(``base64.b64decode(..., validate=True)``) is the oracle of what is base64 here.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import pytest
from oracles import sdk_problems

from contextstore import ContextStore
from contextstore.core.media import unreadable, unreadable_image
from contextstore.renderers.registry import FORMATS, build_request, validate_provider_payload
from tests.conftest import assistant, tool_result, tool_use, user
from tests.renderers.media_payloads import (
    HEADERS,
    NOT_SIGNED,
    UNKNOWN_DATA,
    image_history,
    images,
    texts,
)

PNG = base64.b64encode(HEADERS["image/png"] + bytes(60)).decode()
WRAPPED_PNG = "\r\n".join(PNG[i : i + 16] for i in range(0, len(PNG), 16))
"""The same PNG as base64 from mail or a PEM file: lines of 16 characters."""
ZEROS = base64.b64encode(bytes(48)).decode()
"""Base64 of bytes no image begins with."""

NOT_BASE64 = "its data is not base64"
EMPTY = "it holds no data"

# data, why Anthropic and OpenAI cannot read it, why Gemini cannot (None: it can)
CASES: list[tuple[str, Any, str | None, str | None]] = [
    ("png", PNG, None, None),
    ("wrapped png", WRAPPED_PNG, None, None),
    ("not base64", "!!! not an image !!!", NOT_BASE64, NOT_BASE64),
    ("a data URL", f"data:image/png;base64,{PNG}", NOT_BASE64, NOT_BASE64),
    ("url-safe alphabet", "-_" + PNG[2:], NOT_BASE64, NOT_BASE64),
    ("bad padding", "iVBORw0", NOT_BASE64, NOT_BASE64),
    ("empty", "", EMPTY, EMPTY),
    ("not a string", None, NOT_BASE64, NOT_BASE64),
    ("zeros", ZEROS, NOT_SIGNED, None),
    ("heic-like", UNKNOWN_DATA, NOT_SIGNED, None),
]


@pytest.mark.parametrize(
    ("data", "signed", "any_base64"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_why_an_image_cannot_be_read(data: Any, signed: str | None, any_base64: str) -> None:
    source = {"type": "base64", "media_type": "image/png", "data": data}
    assert unreadable_image(source, signed_only=True) == signed
    assert unreadable_image(source, signed_only=False) == any_base64
    if isinstance(data, str) and any_base64 != NOT_BASE64:
        base64.b64decode("".join(data.split()), validate=True)  # the oracle agrees
    elif isinstance(data, str):
        with pytest.raises((binascii.Error, ValueError)):
            base64.b64decode(data, validate=True)


def _image(data: Any, media_type: str = "image/png", **extra: Any) -> dict[str, Any]:
    source = {"type": "base64", "media_type": media_type, "data": data}
    return {"type": "image", "source": source, **extra}


TEXT_CASES = [c for c in CASES if isinstance(c[1], str)]
"""The cases a store holds: it refuses an image whose data is not a string at append."""


@pytest.mark.parametrize(
    ("data", "signed", "any_base64"), [c[1:] for c in TEXT_CASES], ids=[c[0] for c in TEXT_CASES]
)
def test_prepare_request_sends_an_image_only_when_the_provider_can_read_it(
    store: ContextStore, data: Any, signed: str | None, any_base64: str | None
) -> None:
    conv = store.create_conversation()
    history = image_history(_image(data))
    store.append(conv.id, history)
    for format in FORMATS:
        reason = any_base64 if format == "gemini" else signed
        ctx = store.prepare_request(conv.id, format=format, model="m", max_tokens=64)
        payload = ctx.payload
        assert validate_provider_payload(format, payload) == []
        if format != "gemini":
            assert sdk_problems(format, payload) == []
        said = texts(payload)
        assert all(t in said for t in ("Before the picture.", "After the picture.", "Captured."))
        if reason is None:
            assert images(format, payload) == ["image/png", "image/png"]
        else:
            assert images(format, payload) == []
            assert said.count(unreadable("image", reason)) == 2
        assert store.request_payload(conv.id, ctx.request_id) == payload
    assert store.messages(conv.id) == history


def test_an_unreadable_image_keeps_its_cache_breakpoint_for_anthropic() -> None:
    image = _image("", cache_control={"type": "ephemeral"})
    payload = build_request("anthropic", [user("See.", image)], model="m", max_tokens=64)
    assert payload["messages"][0]["content"][1] == {
        "type": "text",
        "text": unreadable("image", EMPTY),
        "cache_control": {"type": "ephemeral"},
    }
    assert sdk_problems("anthropic", payload) == []


def test_a_refused_type_is_said_before_unreadable_data() -> None:
    """An image of a type the provider refuses is left out for its type, whatever its
    data: the reader learns the first thing to fix."""
    image = _image("!!!", media_type="image/svg+xml")
    for format in FORMATS:
        said = texts(build_request(format, [user("See.", image)], model="m", max_tokens=64))
        assert "image/svg+xml, a type the" in said and NOT_BASE64 not in said


@pytest.mark.parametrize(
    ("format", "payload"),
    [
        ("anthropic", {"messages": [user("Look.", _image(ZEROS))]}),
        (
            "anthropic",
            {
                "messages": [
                    user("Shoot."),
                    assistant(tool_use("t1", "shot")),
                    user(tool_result("t1", [_image("!!!", media_type="image/jpeg")])),
                ]
            },
        ),
        (
            "openai",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image_url",
                                "image_url": {"url": f"data:image/png;base64,{ZEROS}"},
                            }
                        ],
                    }
                ]
            },
        ),
        (
            "gemini",
            {
                "contents": [
                    {
                        "role": "user",
                        "parts": [{"inlineData": {"mimeType": "image/png", "data": "!!!"}}],
                    }
                ]
            },
        ),
    ],
    ids=["anthropic-zeros", "anthropic-result-not-base64", "openai-zeros", "gemini-not-base64"],
)
def test_the_provider_check_reports_unreadable_images_in_payloads_built_elsewhere(
    format: str, payload: dict[str, Any]
) -> None:
    problems = validate_provider_payload(format, payload)
    assert len(problems) == 1 and "read" in problems[0]
    assert validate_provider_payload(format, payload, rules=7) == []


def test_the_provider_check_reports_an_image_once() -> None:
    """An OpenAI data URL of a refused type is reported for its type only, not again for
    its data."""
    url = "data:image/heic;base64,!!!"
    payload = {
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
        ]
    }
    (problem,) = validate_provider_payload("openai", payload)
    assert "types the API refuses" in problem
