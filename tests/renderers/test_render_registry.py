"""The format registry: dispatch, errors, and payload validation entry point."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conversations import parallel_tools, text, tool_use

from contextstore.core.errors import InvalidInputError
from contextstore.renderers import anthropic, gemini, openai
from contextstore.renderers.registry import (
    FORMATS,
    build_request,
    render,
    validate_provider_payload,
)


def test_formats() -> None:
    assert FORMATS == ("anthropic", "openai", "gemini")


def test_render_dispatches_to_each_renderer() -> None:
    messages = parallel_tools()
    assert render("anthropic", messages) == anthropic.render_messages(messages)
    assert render("openai", messages) == openai.render_messages(messages)
    assert render("gemini", messages) == gemini.render_contents(messages)


def test_build_request_dispatches_with_options() -> None:
    body = build_request("openai", parallel_tools(), system="S", model="m", max_tokens=3)
    assert body == openai.build_request(parallel_tools(), system="S", model="m", max_tokens=3)


@pytest.mark.parametrize(
    "call",
    [
        lambda: render("cohere", []),
        lambda: build_request("Anthropic", []),
        lambda: validate_provider_payload("", []),
    ],
)
def test_unknown_format_lists_the_valid_ones(call: Callable[[], object]) -> None:
    with pytest.raises(InvalidInputError, match="anthropic, openai, gemini"):
        call()


def test_validation_accepts_a_body_or_a_bare_list() -> None:
    body = build_request("gemini", parallel_tools())
    assert validate_provider_payload("gemini", body) == []
    assert validate_provider_payload("gemini", body["contents"]) == []
    assert validate_provider_payload("anthropic", {"model": "m"}) == [
        "payload has no messages list"
    ]


def test_validation_finds_broken_payloads_for_every_format() -> None:
    broken = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [text("x"), tool_use("t", "f", {})]},
    ]
    assert validate_provider_payload("anthropic", broken)
    assert validate_provider_payload("openai", openai.render_messages(broken))
    unhardened = [
        {"role": "user", "parts": [{"text": "q"}]},
        {"role": "model", "parts": [{"functionCall": {"id": "t", "name": "f"}}]},
    ]
    assert validate_provider_payload("gemini", unhardened)
