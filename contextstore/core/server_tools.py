"""The rules of Anthropic's server tool blocks in a conversation: where they may stand, how
a ``server_tool_use`` pairs with its result, and what is sent when a pair is broken.

The API runs a server tool itself and returns the call and its result together, in the
assistant message: ``server_tool_use`` (id ``srvtoolu_...``), then the result
(``web_search_tool_result``...) naming it by ``tool_use_id``. A turn the API paused
(``stop_reason: "pause_turn"``) ends with a call whose result the continuation brings: the
paused message is sent back as the final assistant message, and the continuation's
response, stored as the next assistant message, starts with the result. So a result
answers a call made before it in the same assistant turn: its message, or, for the results
a message starts with, the assistant messages right before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextstore.core.errors import InvalidMessageError
from contextstore.core.overlays import Message
from contextstore.core.validate import shown

SERVER_TOOL_USE = "server_tool_use"
CONTAINER_UPLOAD = "container_upload"

RESULT_TOOLS: dict[str, frozenset[str]] = {
    "web_search_tool_result": frozenset({"web_search"}),
    "web_fetch_tool_result": frozenset({"web_fetch"}),
    "code_execution_tool_result": frozenset({"code_execution"}),
    "bash_code_execution_tool_result": frozenset({"bash_code_execution", "code_execution"}),
    "text_editor_code_execution_tool_result": frozenset(
        {"text_editor_code_execution", "code_execution"}
    ),
    "tool_search_tool_result": frozenset({"tool_search_tool_regex", "tool_search_tool_bm25"}),
}
"""Per server tool result type, the server tools (``server_tool_use.name``) it answers."""

SERVER_RESULT_TYPES: frozenset[str] = frozenset(RESULT_TOOLS)
"""The result block types of server tools."""

ASSISTANT_ONLY: frozenset[str] = frozenset({SERVER_TOOL_USE, *SERVER_RESULT_TYPES})
"""Server tool blocks only the model writes (``container_upload`` may stand in either
role: a caller puts it in a user message, and the API returns it in an assistant one)."""

PAIRED_TYPES: frozenset[str] = frozenset({SERVER_TOOL_USE, *SERVER_RESULT_TYPES})
"""The server tool blocks that pair by id."""

SERVER_BLOCK_TYPES: frozenset[str] = frozenset({*PAIRED_TYPES, CONTAINER_UPLOAD})
"""Anthropic's server tool blocks: ``server_tool_use``, its results, ``container_upload``."""

OPAQUE_FIELDS: frozenset[str] = frozenset(
    {"encrypted_content", "encrypted_index", "encrypted_stdout"}
)
"""Fields holding encrypted data the API decrypts when it is sent back (a search result's
page, a citation's index, a code execution's output): opaque, never to be changed."""


def check_server_pairs(blocks: Sequence[Mapping[str, Any]]) -> None:
    """Refuse server tool results that pair with no call of their own kind in an assistant
    message's validated ``blocks``.

    A result answers a ``server_tool_use`` before it in the message, of a tool its type
    answers (a ``web_search_tool_result`` a ``web_search`` call), once. Results the message
    starts with (before any other block) may answer calls of the messages before it: they
    continue a turn the API paused (their pairing is checked when the view is sent, see
    :func:`paired_server_blocks`). A call may stay unanswered: the paused turn's last block.

    Raises:
        InvalidMessageError: naming the result and what is wrong with it.
    """
    uses: dict[str, tuple[int, str]] = {}
    answered: dict[str, int] = {}
    leading = True
    for position, block in enumerate(blocks):
        kind = block["type"]
        if kind == SERVER_TOOL_USE:
            uses[block["id"]] = (position, str(block.get("name")))
        if kind not in SERVER_RESULT_TYPES:
            leading = False
            continue
        use_id = block["tool_use_id"]
        where = f"content[{position}] ({kind})"
        if use_id in answered:
            raise InvalidMessageError(
                f"{where} answers the server_tool_use {use_id!r} that content[{answered[use_id]}] "
                "already answers; a call has one result."
            )
        if use_id not in uses:
            if leading:
                continue  # the continuation of a paused turn
            raise InvalidMessageError(
                f"{where}: tool_use_id {use_id!r} names no server_tool_use before it in the "
                "message; a server tool's result follows its call in the assistant message "
                "(only the results a message starts with may answer a paused turn's call)."
            )
        name = uses[use_id][1]
        if name not in RESULT_TOOLS[kind]:
            raise InvalidMessageError(
                f"{where} answers the server_tool_use {use_id!r} of {shown(name)}; a {kind} "
                f"answers {' or '.join(sorted(RESULT_TOOLS[kind]))}."
            )
        answered[use_id] = position


def paired_server_blocks(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with every broken server tool pair taken out, as the API wants it.

    A run of consecutive assistant messages is one turn (a provider merges them). In it, a
    result is kept when it is the first to answer a ``server_tool_use`` of that id before
    it in the turn, and that call with it; a call nothing answers is kept only when it ends
    the conversation: in its last message, an assistant one, with nothing after it but
    other calls (the turn the API paused, ``pause_turn``, sent back for it to continue). A
    message this leaves with no block is removed. Messages that need no change are returned
    as the same objects; nothing given is modified.
    """
    out: list[Message] = list(messages)
    emptied: set[int] = set()
    start: int | None = None
    for position, message in enumerate(messages):
        if message.get("role") != "assistant":
            start = None
            continue
        start = position if start is None else start
        following = messages[position + 1] if position + 1 < len(messages) else None
        if following is None or following.get("role") != "assistant":
            emptied |= _pair_turn(out, range(start, position + 1), final=following is None)
            start = None
    if not emptied:
        return out
    return [message for position, message in enumerate(out) if position not in emptied]


def _pair_turn(out: list[Message], turn: range, *, final: bool) -> set[int]:
    """Take the broken pairs out of the assistant messages at positions ``turn`` of
    ``out``, replacing each message that changes by a new one; return the positions of the
    messages left with no block."""
    if not any(
        isinstance(block, dict) and block.get("type") in PAIRED_TYPES
        for position in turn
        if isinstance(content := out[position].get("content"), list)
        for block in content
    ):
        return set()  # no server tool in the turn: the common case, on every render
    places = [
        (position, index)
        for position in turn
        if isinstance(content := out[position].get("content"), list)
        for index in range(len(content))
    ]
    blocks = [out[position]["content"][index] for position, index in places]
    last = sum(1 for position, _ in places if position == turn[-1])
    broken = {places[n] for n in broken_server_pairs(blocks, paused_tail=last if final else 0)}
    emptied: set[int] = set()
    for position in turn:
        content = out[position].get("content")
        if not isinstance(content, list) or not any(p == position for p, _ in broken):
            continue
        remaining = [b for index, b in enumerate(content) if (position, index) not in broken]
        out[position] = {**out[position], "content": remaining}
        if not remaining:
            emptied.add(position)
    return emptied


def broken_server_pairs(blocks: Sequence[Any], *, paused_tail: int = 0) -> list[int]:
    """The positions, in one assistant turn's ``blocks``, of the server tool blocks a
    request cannot hold: a result that is not the first to answer a ``server_tool_use`` of
    its id before it, and a call no result answers, unless it stands among the last
    ``paused_tail`` blocks with nothing after it but other calls (the turn the API paused,
    sent back as the conversation's last message). Empty when every pair is whole."""
    open_uses: dict[Any, int] = {}
    seen: set[Any] = set()
    kept: set[int] = set()
    paired: list[int] = []
    for position, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in PAIRED_TYPES:
            continue
        paired.append(position)
        if kind == SERVER_TOOL_USE and block.get("id") not in seen:
            seen.add(block.get("id"))
            open_uses[block.get("id")] = position
        elif kind in SERVER_RESULT_TYPES and block.get("tool_use_id") in open_uses:
            kept.add(open_uses.pop(block.get("tool_use_id")))
            kept.add(position)
    for position in range(len(blocks) - 1, len(blocks) - 1 - paused_tail, -1):
        block = blocks[position]
        if not (isinstance(block, dict) and block.get("type") == SERVER_TOOL_USE):
            break
        kept.add(position)
    return [position for position in paired if position not in kept]
