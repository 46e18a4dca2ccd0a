"""Messages rendered for the Messages API one by one, so that a conversation prepared
again reuses the renderings of the messages it already sent (the facade keeps them), and
the check that the pieces make the request :func:`~contextstore.renderers.anthropic.render_messages`
would build from the whole list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextstore.core.overlays import Block, Message
from contextstore.core.server_tools import broken_server_pairs
from contextstore.core.validate import canonical_json, json_copy
from contextstore.core.view import VIEW_RULES
from contextstore.renderers.anthropic_blocks import (
    ROLES,
    SCALARS,
    clean_message,
    content_blocks,
    final_stripped,
)
from contextstore.renderers.anthropic_cache import MAX_CACHE_BREAKPOINTS, message_breakpoints


@dataclass(frozen=True)
class RenderedMessage:
    """One message rendered for the Messages API on its own, with what the provider-rule
    check asks of it, so that a conversation prepared again reuses it.

    Attributes:
        message: The message as :func:`render_messages` renders it (keep it unchanged:
            hand out copies).
        canonical: Its canonical JSON (:func:`~contextstore.core.validate.canonical_json`),
            UTF-8, which the payload's hash is computed over.
        role: Its role.
        filled: Its content is not empty and holds no blank text block.
        calls: The ids of its ``tool_use`` blocks, in order.
        results: The ``tool_use_id`` of each of its ``tool_result`` blocks, in order; None
            when one follows another kind of block.
        nested: For each block, the keys holding a list or dict, each with whether that
            holds only scalars (then a shallow copy of it is a copy); None when the content
            is a string.
        servers_whole: Every server tool call in it is answered in it, and every server
            tool result answers a call before it
            (:func:`~contextstore.core.server_tools.broken_server_pairs` finds nothing).
        breakpoints: How many of its blocks carry a ``cache_control``
            (:func:`~contextstore.renderers.anthropic_cache.message_breakpoints`).
    """

    message: Message
    canonical: bytes
    role: str
    filled: bool
    calls: tuple[str, ...]
    results: tuple[str, ...] | None
    nested: tuple[tuple[tuple[str, bool], ...], ...] | None
    servers_whole: bool = True
    breakpoints: int = 0

    def copy(self) -> Message:
        """A copy of :attr:`message` sharing no list or dict with it."""
        content = self.message["content"]
        if self.nested is None:
            return {"role": self.message["role"], "content": content}
        # The blocks are plain dicts (render_message builds them); most hold no container.
        copied = list(map(dict.copy, content))
        for position, nested in enumerate(self.nested):
            if nested:
                block = copied[position]
                for key, flat in nested:
                    value = block[key]
                    block[key] = value.copy() if flat else json_copy(value)
        return {"role": self.message["role"], "content": copied}


def render_message(message: Any, rules: int = VIEW_RULES) -> RenderedMessage | None:
    """Render one message as :func:`render_messages` renders it (by the view rules of
    version ``rules``) in a list that needs no merging, anywhere but last (the last one
    goes through :func:`as_final`); None when it is not an Anthropic-style message (then
    :func:`render_messages` says what is wrong)."""
    if (
        not isinstance(message, Mapping)
        or message.get("role") not in ROLES
        or not isinstance(message.get("content"), (str, list))
    ):
        return None
    cleaned = clean_message(message, rules)
    content = cleaned["content"]
    # Cleaning leaves a blank string content empty, and a list without blank text blocks or
    # anything but dicts: the content is filled when it is not empty.
    blocks = content if isinstance(content, list) else content_blocks(cleaned)
    calls: list[str] = []
    results: list[str] | None = []
    leading = True
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_result":
            if not leading:
                results = None
            elif results is not None:
                results.append(str(block.get("tool_use_id")))
            continue
        leading = False
        if kind == "tool_use":
            calls.append(str(block.get("id")))
    return RenderedMessage(
        cleaned,
        canonical_json(cleaned).encode("utf-8"),
        str(cleaned["role"]),
        bool(content),
        tuple(calls),
        None if results is None else tuple(results),
        None if isinstance(content, str) else tuple(_nested(block) for block in content),
        not broken_server_pairs(blocks),
        message_breakpoints(cleaned),
    )


def as_final(piece: RenderedMessage, rules: int = VIEW_RULES) -> RenderedMessage:
    """``piece`` as :func:`render_messages` renders it when it is the last message of the
    list (by the view rules of version ``rules``): from version 5, a final assistant
    message loses the trailing whitespace of its content (:func:`final_stripped`).
    ``piece`` itself when nothing changes, so a rendering kept for the next prepare, where
    the message is no longer last, stays as it was."""
    stripped = final_stripped(piece.message) if rules >= 5 else None
    if stripped is None:
        return piece
    return dataclasses.replace(
        piece, message=stripped, canonical=canonical_json(stripped).encode("utf-8")
    )


def _nested(block: Block) -> tuple[tuple[str, bool], ...]:
    """The keys of ``block`` holding a container, each with whether it holds only scalars."""
    nested = []
    for key, value in block.items():
        if value.__class__ in SCALARS:
            continue
        items = value.values() if isinstance(value, dict) else value
        flat = isinstance(value, dict | list) and all(v.__class__ in SCALARS for v in items)
        nested.append((key, flat))
    return tuple(nested)


def conforming(
    rendered: Sequence[RenderedMessage], breakpoints: int = MAX_CACHE_BREAKPOINTS
) -> bool:
    """True when the messages ``rendered`` one by one (the last one through
    :func:`as_final`) are what :func:`render_messages` makes of them together (nothing
    left empty, so nothing merged, and no more than ``breakpoints`` blocks with a
    ``cache_control``, so none is left out) and :func:`violations` finds nothing in them. False
    means: render them together and check them in full (a False may still have no
    violation, for example a tool call id used twice, or a final assistant message ending
    with whitespace under view rules older than 5; a tool call id an earlier message used
    is given another form when they are rendered together)."""
    if rendered and final_stripped(rendered[-1].message) is not None:
        return False
    if sum(message.breakpoints for message in rendered) > breakpoints:
        return False  # the older breakpoints are left out: rendered whole
    calls: tuple[str, ...] = ()
    used: set[str] = set()
    for position, message in enumerate(rendered):
        if not message.servers_whole:
            return False  # a broken pair, or a paused turn's call: rendered whole
        if not message.filled or message.role != ("user" if position % 2 == 0 else "assistant"):
            return False
        if message.role == "assistant":
            calls = message.calls
            if len(set(calls)) != len(calls) or not used.isdisjoint(calls):
                return False
            used.update(calls)
            continue
        results = message.results
        if results is None or len(results) != len(calls) or set(results) != set(calls):
            return False
        calls = ()
    return not calls
