"""Prompt-caching breakpoints in an Anthropic request: at most four (view rules 12 and later).

The Messages API refuses a request holding more than :data:`MAX_CACHE_BREAKPOINTS` blocks
with a ``cache_control`` ("A maximum of 4 blocks with cache_control may be provided"),
counting the system prompt's blocks, the tools and the messages alike. An agent that marks
its newest message with a breakpoint every turn, as Anthropic's guide to multi-turn caching
does, stores one more breakpoint per turn: the fifth turn's request was refused, and every
later one. A render keeps the newest breakpoints of the messages that the system prompt's
and tools' leave room for (:func:`newest_breakpoints`): the cache read looks back from
them, so they are the ones that save the most.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from contextstore.core.overlays import Block, Message

MAX_CACHE_BREAKPOINTS = 4
"""The most blocks with a ``cache_control`` the Messages API takes in one request."""


def _marked(value: Any) -> bool:
    """True for a block (or a tool, a system block) that sets a breakpoint."""
    return isinstance(value, Mapping) and value.get("cache_control") is not None


def _inner_blocks(block: Block) -> Iterator[Block]:
    """The blocks inside ``block`` that may carry a breakpoint of their own: a tool
    result's content, and a document's ``content`` source."""
    if block.get("type") == "tool_result":
        inner = block.get("content")
    elif block.get("type") == "document" and isinstance(block.get("source"), Mapping):
        inner = block["source"].get("content") if block["source"].get("type") == "content" else None
    else:
        inner = None
    if isinstance(inner, list):
        yield from (item for item in inner if isinstance(item, dict))


def _blocks_in_order(content: Any) -> Iterator[Block]:
    """Every block of a message's content that may carry a breakpoint, in document order."""
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict):
            yield block
            yield from _inner_blocks(block)


def message_breakpoints(message: Mapping[str, Any]) -> int:
    """How many blocks of ``message`` (its tool results' and documents' included) set a
    breakpoint."""
    return sum(map(_marked, _blocks_in_order(message.get("content"))))


def prompt_breakpoints(system: Any, tools: Sequence[Any] | None) -> int:
    """How many blocks of the system prompt (a string has none) and tools set a breakpoint."""
    blocks = [] if system is None or isinstance(system, str) else list(system)
    return sum(map(_marked, [*blocks, *(tools or [])]))


_HOLDING_BLOCKS = frozenset({"tool_result", "document"})
"""The block types that may hold blocks of their own (see :func:`_inner_blocks`)."""


def _marked_blocks(messages: Sequence[Message]) -> list[Block]:
    """The blocks of ``messages`` that set a breakpoint, in document order: what
    :func:`_blocks_in_order` and :func:`_marked` find, in one plain loop (it runs on every
    render, over every block)."""
    marked: list[Block] = []
    for message in messages:
        content = message["content"]
        if content.__class__ is not list:
            continue
        for block in content:
            if block.__class__ is not dict:
                continue
            if "cache_control" in block and block["cache_control"] is not None:
                marked.append(block)
            if block.get("type") in _HOLDING_BLOCKS:
                marked.extend(filter(_marked, _inner_blocks(block)))
    return marked


def newest_breakpoints(messages: list[Message], budget: int) -> list[Message]:
    """``messages`` (fresh renderings, changed in place) keeping the ``cache_control`` of
    their newest ``budget`` marked blocks only; older blocks are sent without it."""
    marked = _marked_blocks(messages)
    for block in marked[: max(len(marked) - max(budget, 0), 0)]:
        del block["cache_control"]
    return messages


def breakpoint_problems(messages: Sequence[Any], prompt: int) -> list[str]:
    """The sentence saying a request holds too many breakpoints: ``prompt`` in its system
    prompt and tools, and those of ``messages``; empty when it holds at most four."""
    found = prompt + sum(message_breakpoints(m) for m in messages if isinstance(m, Mapping))
    if found <= MAX_CACHE_BREAKPOINTS:
        return []
    return [
        f"the request holds {found} blocks with cache_control, and the API takes at most "
        f"{MAX_CACHE_BREAKPOINTS}"
    ]
