"""Render stored messages as an Anthropic Messages API request.

Stored messages are already Anthropic ``MessageParam`` dicts, but a source agent keeps
more beside them than the API takes: Cline adds ``ts``, ``id``, ``modelInfo`` and
``metrics`` to messages and ``call_id``, ``reasoning_details`` (and, for Gemini turns,
``signature``) to blocks, and keeps thinking blocks that never got a signature. The API
rejects all of these, so this renderer keeps, per block type, only the fields the API
documents.

The helpers :func:`check_messages`, :func:`content_blocks`, :func:`system_text`,
:func:`search_result_text` and :func:`check_tools` read the shared input format and are
used by the other renderers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextstore.core.hardening import DEFAULT_CONTINUATION
from contextstore.core.overlays import Block, Message
from contextstore.core.overlays import search_result_text as search_result_text
from contextstore.core.server_tools import paired_server_blocks
from contextstore.core.system_prompt import SystemPrompt as SystemPrompt
from contextstore.core.system_prompt import system_text as system_text
from contextstore.core.validate import json_copy
from contextstore.core.view import VIEW_RULES
from contextstore.renderers.anthropic_blocks import ROLES as ROLES
from contextstore.renderers.anthropic_blocks import Tool as Tool
from contextstore.renderers.anthropic_blocks import check_messages as check_messages
from contextstore.renderers.anthropic_blocks import check_tools as check_tools
from contextstore.renderers.anthropic_blocks import clean_message
from contextstore.renderers.anthropic_blocks import content_blocks as content_blocks
from contextstore.renderers.anthropic_blocks import final_stripped as final_stripped
from contextstore.renderers.anthropic_cache import MAX_CACHE_BREAKPOINTS as MAX_CACHE_BREAKPOINTS
from contextstore.renderers.anthropic_cache import newest_breakpoints, prompt_breakpoints
from contextstore.renderers.anthropic_checks import violations as violations
from contextstore.renderers.anthropic_ids import CALL_ID as CALL_ID
from contextstore.renderers.anthropic_ids import call_id as call_id
from contextstore.renderers.anthropic_ids import distinct_call_ids
from contextstore.renderers.anthropic_ids import repeated_call_id as repeated_call_id
from contextstore.renderers.anthropic_pieces import RenderedMessage as RenderedMessage
from contextstore.renderers.anthropic_pieces import as_final as as_final
from contextstore.renderers.anthropic_pieces import conforming as conforming
from contextstore.renderers.anthropic_pieces import render_message as render_message


def _as_blocks(content: str | list[Block]) -> list[Block]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _merge_same_role(messages: Sequence[Message]) -> list[Message]:
    """Drop messages left empty and merge the same-role neighbours that this creates."""
    merged: list[Message] = []
    for message in messages:
        if not message["content"]:
            continue
        if merged and merged[-1]["role"] == message["role"]:
            previous = merged[-1]
            previous["content"] = [
                *_as_blocks(previous["content"]),
                *_as_blocks(message["content"]),
            ]
        else:
            merged.append(message)
    return merged


def render_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    rules: int = VIEW_RULES,
    breakpoints: int = MAX_CACHE_BREAKPOINTS,
) -> list[Message]:
    """Return the messages as the Anthropic API accepts them.

    Each message keeps only ``role`` and ``content`` (string content stays a string).
    Blocks keep only the fields the API documents for their type; thinking blocks without
    a signature and blank text blocks (which the API refuses) are dropped; tool call ids
    the API refuses are given :func:`call_id`'s form, and one that an earlier message
    already used :func:`repeated_call_id`'s; a base64 image is sent with the type
    its data is, and an image or document of a type the API refuses is replaced by a text
    block saying so (:func:`sendable_media`). Server tool blocks are sent as stored, less
    the broken pairs (:func:`~contextstore.core.server_tools.paired_server_blocks`: a call
    without its result only at the end of a final assistant message, a paused turn). A
    message left without content is dropped and its neighbours, now of the same role, are merged so
    that roles still alternate; when that leaves the model first, a user turn saying
    :data:`~contextstore.core.hardening.DEFAULT_CONTINUATION` opens the list. When the
    list ends with an assistant message (a prefill), the trailing whitespace of its
    content is removed (:func:`final_stripped`). Only the newest ``breakpoints`` blocks
    with a ``cache_control`` keep it
    (:func:`~contextstore.renderers.anthropic_cache.newest_breakpoints`): the API takes
    four in a request, and an agent that marks its newest message every turn stores more.

    Args:
        messages: Anthropic-style messages, already cut and tool-paired. Not modified.
        breakpoints: How many breakpoints the messages may hold (four, less those of the
            system prompt and tools sent with them).
        rules: The version of the view rules to render by
            (:data:`~contextstore.core.view.VIEW_RULES`): a stored request is rebuilt by
            the version it was prepared with; before 4, ids are sent as stored, before
            5 a final assistant message keeps its trailing whitespace, before 7
            images and documents are sent with the media type they were stored with,
            whatever it is (:func:`sendable_media`), before 9 a tool call id used
            in an earlier message is sent again as it is (:func:`repeated_call_id`), and
            before 12 every ``cache_control`` is sent.

    Returns:
        New message dicts sharing no objects with the input.

    Raises:
        InvalidMessageError: The input is not a list of Anthropic-style messages.
    """
    check_messages(messages)
    rendered = _merge_same_role([clean_message(m, rules) for m in messages])
    paired = paired_server_blocks(rendered)
    if len(paired) != len(rendered) or any(
        a is not b for a, b in zip(paired, rendered, strict=True)
    ):
        rendered = _merge_same_role(paired)
    if rendered and rendered[0]["role"] != "user":
        # The first user message was left empty (a blank text): the API wants a user first.
        rendered.insert(0, {"role": "user", "content": DEFAULT_CONTINUATION})
    if rules >= 9:
        rendered = distinct_call_ids(rendered)
    if rules >= 5 and rendered:
        rendered[-1] = final_stripped(rendered[-1]) or rendered[-1]
    if rules >= 12:
        rendered = newest_breakpoints(rendered, breakpoints)
    return rendered


def build_request(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: SystemPrompt | None = None,
    tools: Sequence[Tool] | None = None,
    model: str | None = None,
    max_tokens: int | None = None,
    rules: int = VIEW_RULES,
) -> dict[str, Any]:
    """Return a Messages API request body; arguments left as None are omitted.

    Args:
        messages: Anthropic-style messages, already cut and tool-paired. Not modified.
        system: The system prompt, a string or a list of text blocks.
        tools: Tools in Anthropic's schema, copied as given.
        model: The model id.
        max_tokens: The output token limit.
        rules: The version of the view rules to render by (see :func:`render_messages`).

    Returns:
        ``{"model", "max_tokens", "system", "tools", "messages"}`` (present keys only);
        the messages keep the newest breakpoints the system prompt's and tools' leave
        room for.

    Raises:
        InvalidInputError: A message or a tool is malformed.
    """
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if system is not None:
        body["system"] = system if isinstance(system, str) else json_copy(list(system))
    if tools is not None:
        check_tools(tools)
        body["tools"] = [json_copy(dict(tool)) for tool in tools]
    budget = MAX_CACHE_BREAKPOINTS - prompt_breakpoints(system, tools)
    body["messages"] = render_messages(messages, rules=rules, breakpoints=budget)
    return body
