"""The Messages API's role and tool-pairing rules, checked on a payload (what the store
asks of every formatted render before it is sent)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextstore.core.overlays import Block
from contextstore.core.server_tools import broken_server_pairs
from contextstore.core.view import VIEW_RULES
from contextstore.renderers.anthropic_blocks import (
    blank,
    content_blocks,
    empty_error,
    final_stripped,
)
from contextstore.renderers.anthropic_cache import breakpoint_problems
from contextstore.renderers.anthropic_ids import CALL_ID, ID_FIELDS
from contextstore.renderers.anthropic_media import media_problems


def violations(
    messages: Sequence[Any], *, rules: int = VIEW_RULES, prompt_breakpoints: int = 0
) -> list[str]:
    """Return the ways ``messages`` break the Messages API's role and tool-pairing rules.

    Checked: roles alternate, starting with ``user``; no message is empty and no text
    block is blank; every tool call id matches :data:`CALL_ID`; the ``tool_result``
    blocks at the start of the user message after an assistant message answer each of
    its ``tool_use`` ids exactly once; no
    ``tool_result`` follows another kind of block or names an id the previous assistant
    message did not use; for a payload built by version 5 of the view rules or later
    (``rules``; older ones sent it as it was), a final assistant message does not end with
    whitespace; from version 7, every base64 image (in a message or a tool result) and
    document has a type the API takes, which an image's data does not contradict
    (:func:`~contextstore.renderers.anthropic_media.media_problems`); from version 9,
    no ``tool_use`` id is used by two messages; and in every assistant message, each
    server tool result answers a ``server_tool_use`` before it, and every such call is
    answered unless it ends the final message (a paused turn); and from version 12, no
    tool result flagged ``is_error`` is empty
    (:func:`~contextstore.renderers.anthropic_blocks.empty_error`) and the
    request holds at most four blocks with a ``cache_control``: ``prompt_breakpoints`` in
    its system prompt and tools
    (:func:`~contextstore.renderers.anthropic_cache.prompt_breakpoints`) and those of the
    messages.
    """
    problems: list[str] = []
    calls: list[str] = []
    first_use: dict[str, int] = {}
    for position, message in enumerate(messages):
        if not isinstance(message, Mapping):
            problems.append(f"messages[{position}] is not a dict")
            calls = []
            continue
        blocks = content_blocks(message)
        problems.extend(_shape_problems(position, message, blocks))
        if rules >= 7:
            problems.extend(media_problems(position, blocks, rules))
        if message.get("role") == "assistant":
            final = len(blocks) if position == len(messages) - 1 else 0
            broken = broken_server_pairs(blocks, paused_tail=final)
            if broken:
                problems.append(
                    f"messages[{position}]: server tool blocks {broken} are not paired (a "
                    "result answers a server_tool_use before it; a call without one ends "
                    "the final message)"
                )
        if message.get("role") == "user":
            problems.extend(_result_problems(position, blocks, calls))
            if rules >= 12:
                problems.extend(_empty_error_problems(position, blocks))
        elif calls:
            problems.append(f"messages[{position}]: tool_use ids {calls} are not answered")
        calls = []
        if message.get("role") == "assistant":
            calls = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
            repeated = [c for c in dict.fromkeys(calls) if c in first_use]
            if rules >= 9 and repeated:
                problems.append(
                    f"messages[{position}]: tool_use ids {repeated} were already used "
                    f"(first in messages[{first_use[repeated[0]]}]); the API wants every id once"
                )
            for call in calls:
                first_use.setdefault(call, position)
    if calls:
        problems.append(f"end of messages: tool_use ids {calls} are not answered")
    if rules >= 12:
        problems.extend(breakpoint_problems(messages, prompt_breakpoints))
    last = messages[-1] if messages else None
    if rules >= 5 and isinstance(last, Mapping) and final_stripped(last) is not None:
        problems.append(
            f"messages[{len(messages) - 1}] is the final assistant message and its content "
            "ends with whitespace"
        )
    return problems


def _shape_problems(
    position: int, message: Mapping[str, Any], blocks: Sequence[Block]
) -> list[str]:
    problems: list[str] = []
    role = message.get("role")
    expected = "user" if position % 2 == 0 else "assistant"
    if role != expected:
        problems.append(f"messages[{position}] has role {role!r}, expected {expected!r}")
    if not message.get("content"):
        problems.append(f"messages[{position}] has empty content")
    blanks = [b for b in blocks if b.get("type") == "text" and blank(b.get("text"))]
    if blanks:
        problems.append(f"messages[{position}] has {len(blanks)} blank text block(s)")
    refused = [
        str(b.get(ID_FIELDS[str(b.get("type"))]))
        for b in blocks
        if b.get("type") in ID_FIELDS
        and not CALL_ID.fullmatch(str(b.get(ID_FIELDS[str(b.get("type"))])))
    ]
    if refused:
        problems.append(f"messages[{position}] has tool call ids the API refuses: {refused}")
    return problems


def _result_problems(position: int, blocks: Sequence[Block], pending: Sequence[str]) -> list[str]:
    problems: list[str] = []
    answered: list[str] = []
    leading = True
    for block in blocks:
        if block.get("type") != "tool_result":
            leading = False
            continue
        result_id = str(block.get("tool_use_id"))
        if not leading:
            problems.append(f"messages[{position}]: tool_result {result_id} follows other content")
        if result_id not in pending:
            problems.append(f"messages[{position}]: tool_result {result_id} answers no tool_use")
        elif result_id in answered:
            problems.append(f"messages[{position}]: tool_result {result_id} is repeated")
        answered.append(result_id)
    missing = [call_id for call_id in pending if call_id not in answered]
    if missing:
        problems.append(f"messages[{position}]: tool_use ids {missing} have no tool_result")
    return problems


def _empty_error_problems(position: int, blocks: Sequence[Block]) -> list[str]:
    """The tool results of one user message flagged ``is_error`` with no content."""
    empty = [
        str(block.get("tool_use_id"))
        for block in blocks
        if block.get("type") == "tool_result" and empty_error(block)
    ]
    if not empty:
        return []
    return [
        f"messages[{position}] has tool results {empty} flagged is_error with no content, "
        "which the API refuses"
    ]
