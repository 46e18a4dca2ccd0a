"""Pick a renderer by name: one entry point for every provider format.

The store renders through this module, so a format name reaches a renderer in one place
and an unknown name fails the same way everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextstore.core.validate import check_choice
from contextstore.core.view import VIEW_RULES
from contextstore.renderers import anthropic, gemini, openai
from contextstore.renderers.anthropic import SystemPrompt, Tool
from contextstore.renderers.anthropic_cache import prompt_breakpoints

FORMATS = ("anthropic", "openai", "gemini")
"""The provider formats contextstore renders, in the order documented."""

_RENDER: dict[str, Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]]] = {
    "anthropic": anthropic.render_messages,
    "openai": openai.render_messages,
    "gemini": gemini.render_contents,
}

_BUILD = {
    "anthropic": anthropic.build_request,
    "openai": openai.build_request,
    "gemini": gemini.build_request,
}

_HISTORY_KEY = {"anthropic": "messages", "openai": "messages", "gemini": "contents"}


def check_format(format: str) -> str:
    """Return ``format`` if it is one of :data:`FORMATS`, else raise ``InvalidInputError``."""
    return check_choice("format", format, FORMATS)


def render(format: str, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return the conversation in a provider's format, without system prompt or tools.

    Args:
        format: One of :data:`FORMATS`.
        messages: Anthropic-style messages, already cut and tool-paired. Not modified.

    Returns:
        Anthropic or OpenAI ``messages``, or Gemini ``contents``.

    Raises:
        InvalidInputError: ``format`` is unknown, or a message is malformed.
    """
    return _RENDER[check_format(format)](messages)


def build_request(
    format: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    system: SystemPrompt | None = None,
    tools: Sequence[Tool] | None = None,
    model: str | None = None,
    max_tokens: int | None = None,
    rules: int = VIEW_RULES,
) -> dict[str, Any]:
    """Return a whole request body for a provider; arguments left as None are omitted.

    Args:
        format: One of :data:`FORMATS`.
        messages: Anthropic-style messages, already cut and tool-paired. Not modified.
        system: The system prompt (a string, or Anthropic text blocks).
        tools: Tool definitions in Anthropic's schema (``name``, ``description``,
            ``input_schema``), converted for the provider.
        model: The model id.
        max_tokens: The output token limit.
        rules: The version of the view rules to render by
            (:data:`~contextstore.core.view.VIEW_RULES`); a stored request is rebuilt by
            the version it was prepared with.

    Raises:
        InvalidInputError: ``format`` is unknown, or a message or tool is malformed.
    """
    builder = _BUILD[check_format(format)]
    return builder(
        messages, system=system, tools=tools, model=model, max_tokens=max_tokens, rules=rules
    )


def validate_provider_payload(format: str, payload: Any, *, rules: int = VIEW_RULES) -> list[str]:
    """Return every way ``payload`` breaks the provider's role and tool-pairing rules.

    An empty list means the provider will accept the conversation's shape. Used by
    tests, and by the store as an invariant check before a payload is sent. A history
    with no message breaks no shape rule (a new conversation renders as one), though a
    provider refuses a request that holds none.

    Args:
        format: One of :data:`FORMATS`.
        payload: A request body (a mapping with ``messages`` or ``contents``) or the
            bare list those keys hold.
        rules: The version of the view rules the payload was built by
            (:data:`~contextstore.core.view.VIEW_RULES`): a rule a renderer has followed
            only since a later version is not checked (from 5, Anthropic's final
            assistant message without trailing whitespace; from 6, OpenAI's tool call ids
            of at most 40 characters; from 7, images, and Anthropic's base64 documents,
            only of media types the provider takes, and Anthropic images whose data is
            of the type they say; from 12, at most four Anthropic blocks with a
            ``cache_control``, counting a body's system prompt and tools).

    Returns:
        One human-readable sentence per violation, in conversation order.

    Raises:
        InvalidInputError: ``format`` is unknown.
    """
    key = _HISTORY_KEY[check_format(format)]
    history = payload.get(key) if isinstance(payload, Mapping) else payload
    if isinstance(history, (str, bytes)) or not isinstance(history, Sequence):
        return [f"payload has no {key} list"]
    if format == "anthropic":
        prompt = (
            prompt_breakpoints(_listed(payload.get("system")), _listed(payload.get("tools")))
            if isinstance(payload, Mapping)
            else 0
        )
        return anthropic.violations(history, rules=rules, prompt_breakpoints=prompt)
    if format == "openai":
        return openai.violations(history, rules=rules)
    return gemini.violations(history, rules=rules)


def _listed(value: Any) -> list[Any] | None:
    """``value`` when it is a list (a payload's system blocks or tools), else None."""
    return value if isinstance(value, list) else None
