"""The blocks of an Anthropic request: the input checks, and each block and message
cleaned down to the fields the Messages API documents for its type.

A source agent keeps more beside its messages than the API takes (Cline's ``call_id``,
``reasoning_details``, thinking blocks without a signature); :func:`clean_message` removes
it. The input checks (:func:`check_messages`, :func:`content_blocks`, :func:`check_tools`)
read the shared input format and are used by the other renderers too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextstore.core.errors import InvalidInputError, InvalidMessageError
from contextstore.core.overlays import Block, Message
from contextstore.core.validate import json_copy
from contextstore.renderers.anthropic_ids import ID_FIELDS, call_id
from contextstore.renderers.anthropic_media import plain_text_typed, sendable_media

Tool = Mapping[str, Any]
"""A tool in Anthropic's schema: ``{"name", "description", "input_schema"}``."""

ROLES = frozenset({"user", "assistant"})

_BLOCK_FIELDS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "image": frozenset({"type", "source", "cache_control"}),
    "document": frozenset({"type", "source", "title", "context", "citations", "cache_control"}),
    "search_result": frozenset(
        {"type", "source", "title", "content", "citations", "cache_control"}
    ),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
    "server_tool_use": frozenset({"type", "id", "name", "input", "cache_control", "caller"}),
    **dict.fromkeys(
        (
            "web_search_tool_result",
            "web_fetch_tool_result",
            "code_execution_tool_result",
            "bash_code_execution_tool_result",
            "text_editor_code_execution_tool_result",
            "tool_search_tool_result",
        ),
        frozenset({"type", "tool_use_id", "content", "cache_control", "caller"}),
    ),
    "container_upload": frozenset({"type", "file_id", "cache_control"}),
}
"""The fields the API accepts, per block type."""

_FOREIGN_FIELDS = frozenset({"call_id", "reasoning_details"})
"""Fields agents add to blocks of any type; removed from block types not listed above."""

EMPTY_ERROR_RESULT = "The tool failed without output."
"""The content a ``tool_result`` flagged ``is_error`` is sent with when it has none (view
rules 12 and later): the API refuses "content cannot be empty if `is_error` is true"."""

SCALARS = frozenset({str, int, float, bool, type(None)})
"""Immutable JSON values, shared between a block and its copy."""


def check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    """Refuse input that is not a sequence of Anthropic-style messages.

    Args:
        messages: The messages a renderer was given.

    Raises:
        InvalidMessageError: A message is not a mapping, has a role other than
            ``user``/``assistant``, or content that is neither a string nor a list.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidMessageError("messages must be a list of message dicts.")
    for position, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidMessageError(
                f"messages[{position}] is a {type(message).__name__}; pass a dict with "
                "'role' and 'content'."
            )
        if message.get("role") not in ROLES:
            raise InvalidMessageError(
                f"messages[{position}] has role {message.get('role')!r}; use 'user' or 'assistant'."
            )
        if not isinstance(message.get("content"), (str, list)):
            raise InvalidMessageError(
                f"messages[{position}] content must be a string or a list of blocks."
            )


def content_blocks(message: Mapping[str, Any]) -> list[Block]:
    """Return the message's content as a list of blocks (a string is one text block).

    Items of a content list that are not dicts are skipped. The blocks are the caller's
    own objects: read them, do not change them.
    """
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, dict)]
    return []


def check_tools(tools: Sequence[Tool]) -> None:
    """Refuse tools without a string ``name``.

    Raises:
        InvalidInputError: A tool is not a mapping or has no string ``name``.
    """
    for position, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise InvalidInputError(
                f"tools[{position}] must be a dict with a string 'name' (Anthropic tool schema)."
            )


def clean_block(block: Block, rules: int) -> Block | None:
    """Return a copy of ``block`` with only accepted fields, or None to drop it; from
    version 4 of the view rules its tool call id is given :func:`call_id`'s form, and from
    version 12 a plain-text document's source the ``media_type`` the API requires
    (:func:`~contextstore.renderers.anthropic_media.plain_text_typed`), and a tool result
    flagged ``is_error`` with no content (:func:`empty_error`) the content
    :data:`EMPTY_ERROR_RESULT`."""
    kind = block.get("type")
    if kind == "thinking" and not block.get("signature"):
        return None
    if kind == "text" and blank(block.get("text")):
        return None
    allowed = _BLOCK_FIELDS.get(str(kind))
    # Strings and numbers are immutable: only containers need copying.
    if allowed is None:
        cleaned = {
            k: v if v.__class__ in SCALARS else json_copy(v)
            for k, v in block.items()
            if k not in _FOREIGN_FIELDS
        }
    else:
        cleaned = {
            k: v if v.__class__ in SCALARS else json_copy(v)
            for k, v in block.items()
            if k in allowed
        }
    if kind == "tool_result" and isinstance(cleaned.get("content"), list):
        cleaned["content"] = clean_blocks(cleaned["content"], rules)
    if rules >= 12 and kind == "tool_result" and empty_error(cleaned):
        cleaned["content"] = EMPTY_ERROR_RESULT
    id_field = ID_FIELDS.get(str(kind))
    if rules >= 4 and id_field is not None and isinstance(cleaned.get(id_field), str):
        cleaned[id_field] = call_id(cleaned[id_field])
    if rules >= 12 and kind == "document":
        cleaned = plain_text_typed(cleaned)
    if rules >= 7 and kind in ("image", "document"):
        return sendable_media(cleaned, rules)
    return cleaned


def empty_error(block: Mapping[str, Any]) -> bool:
    """True for a ``tool_result`` flagged ``is_error`` whose content (as sent: blank text
    blocks dropped) is missing, blank or an empty list, which the API refuses: "content
    cannot be empty if `is_error` is true". A command that fails without printing anything,
    or a denied call, leaves one; sent as it is, it fails every later request."""
    if block.get("is_error") is not True:
        return False
    content = block.get("content")
    if isinstance(content, list):
        return not any(
            isinstance(item, dict) and not (item.get("type") == "text" and blank(item.get("text")))
            for item in content
        )
    return content is None or blank(content)


def blank(text: Any) -> bool:
    """True for text the API refuses in a text block (empty or whitespace only)."""
    return not isinstance(text, str) or not text.strip()


def clean_blocks(blocks: Sequence[Any], rules: int) -> list[Block]:
    cleaned = (clean_block(b, rules) for b in blocks if isinstance(b, dict))
    return [block for block in cleaned if block is not None]


def clean_message(message: Mapping[str, Any], rules: int) -> Message:
    content = message["content"]
    if isinstance(content, str):
        return {"role": message["role"], "content": "" if blank(content) else content}
    return {"role": message["role"], "content": clean_blocks(content, rules)}


def final_stripped(message: Mapping[str, Any]) -> Message | None:
    """``message`` with the trailing whitespace of its content removed when it is an
    assistant message ending with text that ends with whitespace, else None.

    The Messages API refuses a request whose last message is such an assistant message (a
    prefill): "final assistant content cannot end with trailing whitespace". Only the end
    of the content is stripped: the string content, or the last block when it is a text
    block. The text is not blank (blank text is dropped before), so it stays non-empty.
    """
    if message.get("role") != "assistant":
        return None
    content = message.get("content")
    if isinstance(content, str):
        stripped = content.rstrip()
        return None if stripped == content else {**message, "content": stripped}
    if not isinstance(content, list) or not content:
        return None
    last = content[-1]
    if not isinstance(last, dict) or last.get("type") != "text":
        return None
    text = last.get("text")
    if not isinstance(text, str) or text.rstrip() == text:
        return None
    return {**message, "content": [*content[:-1], {**last, "text": text.rstrip()}]}
