"""Render stored messages as an OpenAI Chat Completions request.

The mapping from Anthropic blocks:

* user text, images and documents become one ``user`` message (a plain string when it
  holds only text, else content parts);
* assistant text becomes the ``content`` string (``None`` when the turn only calls
  tools) and each ``tool_use`` one entry of ``tool_calls``, whose ``arguments`` are the
  input as compact JSON (no spaces, non-ASCII kept as is);
* each ``tool_result`` becomes a ``tool`` message, in block order, placed before the rest
  of its user message. A result flagged ``is_error`` is prefixed with ``"Error: "``.
  Tool messages carry text only, so images and files a result returned follow in a
  ``user`` message, and the tool message says how many follow;
* a ``search_result`` block (Anthropic's format for search results, in a tool result or
  a user message) becomes text (:func:`~contextstore.core.overlays.search_result_text`);
* thinking blocks are dropped (Chat Completions has no field to send them back in);
* Anthropic's server tool blocks (calls the API ran itself, their results, container
  uploads) become text in their place
  (:func:`~contextstore.renderers.server_text.server_block_text`), encrypted values left
  out, after the broken pairs are dropped as for Anthropic
  (:func:`~contextstore.core.server_tools.paired_server_blocks`);
* a tool call id longer than the API accepts (:data:`MAX_CALL_ID_LENGTH`) is sent in
  :func:`call_id`'s short form, in the call and its result alike;
* a base64 image is sent with the type its data is; one of a type the API refuses (not
  in :data:`IMAGE_TYPES`) becomes a text part saying it was left out.

Text blocks of one message are joined with a blank line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.media import image_type, left_out, unreadable, unreadable_image
from contextstore.core.overlays import Block
from contextstore.core.server_tools import SERVER_BLOCK_TYPES, paired_server_blocks
from contextstore.core.validate import TOOL_NAME
from contextstore.core.view import VIEW_RULES
from contextstore.renderers.anthropic import (
    SystemPrompt,
    Tool,
    check_messages,
    check_tools,
    content_blocks,
    search_result_text,
    system_text,
)
from contextstore.renderers.server_text import server_block_text

ChatMessage = dict[str, Any]
"""One Chat Completions message (``system``, ``user``, ``assistant`` or ``tool``)."""

ContentPart = dict[str, Any]
"""One part of a user message's content list (``text``, ``image_url``, ``file``)."""

ERROR_PREFIX = "Error: "
"""Put before the text of a tool result flagged ``is_error``."""

ATTACHMENT_NOTE = "[{count} attachment(s) from this tool result follow in the next user message.]"
"""Appended to a tool message whose images or files were moved to a user message."""

PDF_FILENAME = "document.pdf"
"""The file name given to a base64 PDF document (Anthropic documents have none)."""

TEXT_SEPARATOR = "\n\n"

MAX_CALL_ID_LENGTH = 40
"""The longest tool call id Chat Completions accepts (``tool_calls[].id`` and a tool
message's ``tool_call_id``); a longer one is refused with "string too long"."""

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types Chat Completions takes in an ``image_url`` part: PNG, JPEG, WebP and
non-animated GIF, as OpenAI's vision guide (linked from
``openai.types.chat.ChatCompletionContentPartImageParam``) lists them; the SDK's type
leaves the URL a plain string. Another type is refused with a 400."""

PROVIDER = "OpenAI"
"""The provider's name in :func:`~contextstore.core.media.left_out`'s text."""

_DIGEST_LENGTH = 16
"""Hex digits of the id's SHA-256 that end a shortened id (64 bits)."""


def call_id(value: str) -> str:
    """Return a stored tool call id in a form Chat Completions accepts.

    An id of at most :data:`MAX_CALL_ID_LENGTH` characters is returned unchanged. A longer
    one (a Responses API ``fc_...`` id, a Gemini or proxy id) becomes its first 23
    characters, ``_`` and 16 hex digits of its SHA-256: exactly 40 characters, readable by
    its start, and different for ids that differ anywhere, even past the part kept. The
    call and its result are given the same id, since both are computed from the stored one.
    """
    if len(value) <= MAX_CALL_ID_LENGTH:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_LENGTH]
    return f"{value[: MAX_CALL_ID_LENGTH - _DIGEST_LENGTH - 1]}_{digest}"


_NAME_DIGEST_LENGTH = 8


def tool_name(value: str) -> str:
    """Return a stored tool call's name in a form Chat Completions accepts.

    A name the API takes is returned unchanged. Another (an MCP server's
    ``github.search_code``, a name over 64 characters) becomes its first 55 characters
    with each character the API refuses as ``_``, then ``_`` and 8 hex digits of its
    SHA-256: readable by its start, and apart from any name the API takes as it is and
    from the other names so rewritten. The stored rows keep the original.
    """
    if TOOL_NAME.fullmatch(value):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    kept = re.sub(r"[^a-zA-Z0-9_-]", "_", value[: 64 - _NAME_DIGEST_LENGTH - 1])
    return f"{kept}_{digest[:_NAME_DIGEST_LENGTH]}"


def _sent_id(value: Any, rules: int) -> str:
    """The id sent for a stored one: from version 6 of the view rules, :func:`call_id`'s
    form; before, as stored."""
    text = str(value)
    return call_id(text) if rules >= 6 else text


def tool_arguments(tool_input: Any) -> str:
    """Return a tool input as the JSON string Chat Completions expects in ``arguments``.

    Compact separators and raw non-ASCII characters keep the string short; key order is
    the one the model produced.
    """
    return json.dumps(
        tool_input if tool_input is not None else {}, separators=(",", ":"), ensure_ascii=False
    )


def _media_url(source: Mapping[str, Any], default_type: str) -> str | None:
    """Return a URL for a base64 or URL source, or None for other source types."""
    if source.get("type") == "base64":
        media_type = source.get("media_type") or default_type
        return f"data:{media_type};base64,{source.get('data', '')}"
    if source.get("type") == "url":
        url = source.get("url")
        return str(url) if url is not None else None
    return None


def _image_part(block: Block, rules: int) -> ContentPart | None:
    """The part for an image; from version 7 of the view rules a base64 image is sent
    with the type its data is, and one of a type not in :data:`IMAGE_TYPES` becomes a
    text part saying it was left out (:func:`~contextstore.core.media.left_out`); from
    version 8 so does one of those types whose data the API cannot read (not base64,
    empty, or of none of them: :func:`~contextstore.core.media.unreadable_image`)."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        return None
    if rules >= 7 and source.get("type") == "base64":
        media_type = image_type(source, "image/png")
        if media_type not in IMAGE_TYPES:
            return {"type": "text", "text": left_out("image", media_type, PROVIDER)}
        reason = unreadable_image(source, signed_only=True) if rules >= 8 else None
        if reason is not None:
            return {"type": "text", "text": unreadable("image", reason)}
        data_url = f"data:{media_type};base64,{source.get('data', '')}"
        return {"type": "image_url", "image_url": {"url": data_url}}
    url = _media_url(source, "image/png")
    return None if url is None else {"type": "image_url", "image_url": {"url": url}}


def _document_parts(block: Block, rules: int) -> list[ContentPart]:
    """A PDF becomes a file part; a text document its text; a URL document a reference."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        return []
    kind = source.get("type")
    if kind == "base64":
        data_url = _media_url(source, "application/pdf")
        return [{"type": "file", "file": {"filename": PDF_FILENAME, "file_data": data_url}}]
    if kind == "text":
        return [{"type": "text", "text": str(source.get("data", ""))}]
    if kind == "content":
        inner = source.get("content")
        return _user_parts(
            [{"type": "text", "text": inner}]
            if isinstance(inner, str)
            else [b for b in inner or [] if isinstance(b, dict)],
            rules,
        )
    if kind == "url":
        return [{"type": "text", "text": f"[document: {source.get('url', '')}]"}]
    return []


def _user_parts(blocks: Sequence[Block], rules: int) -> list[ContentPart]:
    """Convert the user-visible blocks; tool results, thinking and unknown types are skipped
    (and, by view rules older than 5, search results)."""
    parts: list[ContentPart] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            image = _image_part(block, rules)
            if image is not None:
                parts.append(image)
        elif kind == "document":
            parts.extend(_document_parts(block, rules))
        elif kind == "search_result" and rules >= 5:
            parts.append({"type": "text", "text": search_result_text(block)})
        elif kind == "container_upload":
            parts.append({"type": "text", "text": server_block_text(block)})
    return parts


def _user_content(parts: Sequence[ContentPart]) -> str | list[ContentPart]:
    if all(part["type"] == "text" for part in parts):
        return TEXT_SEPARATOR.join(part["text"] for part in parts)
    return list(parts)


def _result_blocks(block: Block) -> list[Block]:
    content = block.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [item for item in content if isinstance(item, dict)]
    return []


def _tool_message(block: Block, rules: int) -> tuple[ChatMessage, list[ContentPart]]:
    """Return the tool message for a ``tool_result`` and the parts it cannot carry."""
    parts = _user_parts(_result_blocks(block), rules)
    texts = [part["text"] for part in parts if part["type"] == "text"]
    attachments = [part for part in parts if part["type"] != "text"]
    text = TEXT_SEPARATOR.join(texts)
    if block.get("is_error"):
        text = ERROR_PREFIX + text
    if attachments:
        note = ATTACHMENT_NOTE.format(count=len(attachments))
        text = f"{text}{TEXT_SEPARATOR}{note}" if text else note
    message = {
        "role": "tool",
        "tool_call_id": _sent_id(block.get("tool_use_id", ""), rules),
        "content": text,
    }
    return message, attachments


def _render_user(blocks: Sequence[Block], rules: int) -> list[ChatMessage]:
    rendered: list[ChatMessage] = []
    attachments: list[ContentPart] = []
    for block in blocks:
        if block.get("type") == "tool_result":
            message, moved = _tool_message(block, rules)
            rendered.append(message)
            attachments.extend(moved)
    parts = [*attachments, *_user_parts(blocks, rules)]
    if parts:
        rendered.append({"role": "user", "content": _user_content(parts)})
    return rendered


def _tool_call(block: Block, rules: int) -> dict[str, Any]:
    name = str(block.get("name", ""))
    return {
        "id": _sent_id(block.get("id", ""), rules),
        "type": "function",
        "function": {
            "name": tool_name(name) if rules >= 10 else name,
            "arguments": tool_arguments(block.get("input")),
        },
    }


def _render_assistant(blocks: Sequence[Block], rules: int) -> list[ChatMessage]:
    texts = [
        str(b.get("text", "")) if b.get("type") == "text" else server_block_text(b)
        for b in blocks
        if b.get("type") == "text" or b.get("type") in SERVER_BLOCK_TYPES
    ]
    calls = [_tool_call(b, rules) for b in blocks if b.get("type") == "tool_use"]
    content = TEXT_SEPARATOR.join(texts)
    if not content and not calls:
        return []
    message: ChatMessage = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = calls
    return [message]


def render_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: SystemPrompt | None = None,
    rules: int = VIEW_RULES,
) -> list[ChatMessage]:
    """Return the messages as Chat Completions ``messages``.

    Args:
        messages: Anthropic-style messages, already cut and tool-paired. Not modified.
        system: A system prompt, sent first as a ``system`` message when given (text
            blocks joined by a blank line).
        rules: The version of the view rules to render by
            (:data:`~contextstore.core.view.VIEW_RULES`): a stored request is rebuilt by
            the version it was prepared with; before 5, ``search_result`` blocks are
            dropped, before 6, tool call ids are sent as stored, whatever their length,
            and before 7, base64 images are sent with their stored media type, whatever
            it is.

    Returns:
        New message dicts sharing no objects with the input. An assistant message with
        neither text nor tool calls (only thinking, say) is left out.

    Raises:
        InvalidMessageError: The input is not a list of Anthropic-style messages.
    """
    check_messages(messages)
    rendered: list[ChatMessage] = []
    if system is not None:
        rendered.append({"role": "system", "content": system_text(system)})
    for message in paired_server_blocks(messages):  # type: ignore[arg-type]  # checked above
        blocks = content_blocks(message)
        if message["role"] == "assistant":
            rendered.extend(_render_assistant(blocks, rules))
        else:
            rendered.extend(_render_user(blocks, rules))
    return rendered


def render_tool(tool: Tool) -> dict[str, Any]:
    """Convert an Anthropic tool definition to a Chat Completions function tool.

    Raises:
        InvalidInputError: The tool is an Anthropic server tool (it has a ``type`` other
            than ``custom``), which has no Chat Completions equivalent.
    """
    if tool.get("type", "custom") != "custom":
        raise InvalidInputError(
            f"tool {tool.get('name')!r} has type {tool.get('type')!r}, an Anthropic server "
            "tool; OpenAI cannot run it, so leave it out of the tools for this format."
        )
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = json.loads(
        json.dumps(tool.get("input_schema") or {"type": "object", "properties": {}})
    )
    return {"type": "function", "function": function}


def build_request(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: SystemPrompt | None = None,
    tools: Sequence[Tool] | None = None,
    model: str | None = None,
    max_tokens: int | None = None,
    rules: int = VIEW_RULES,
) -> dict[str, Any]:
    """Return a Chat Completions request body; arguments left as None are omitted.

    Args:
        messages: Anthropic-style messages, already cut and tool-paired. Not modified.
        system: The system prompt, sent as the first message.
        tools: Tools in Anthropic's schema, converted to function tools.
        model: The model id.
        max_tokens: The output token limit, sent as ``max_completion_tokens`` (the field
            that replaced the deprecated ``max_tokens`` and that reasoning models accept).
        rules: The version of the view rules to render by (see :func:`render_messages`).

    Returns:
        ``{"model", "max_completion_tokens", "messages", "tools"}`` (present keys only).

    Raises:
        InvalidInputError: A message or a tool is malformed.
    """
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if max_tokens is not None:
        body["max_completion_tokens"] = max_tokens
    body["messages"] = render_messages(messages, system=system, rules=rules)
    if tools is not None:
        check_tools(tools)
        body["tools"] = [render_tool(tool) for tool in tools]
    return body


def violations(messages: Sequence[Any], *, rules: int = VIEW_RULES) -> list[str]:
    """Return the ways ``messages`` break Chat Completions' tool-call rules.

    Checked: roles are known; an assistant message has content or tool calls; the
    messages right after an assistant message with ``tool_calls`` are ``tool`` messages
    answering each call id exactly once; no ``tool`` message appears anywhere else; and,
    for a payload built by version 6 of the view rules or later (``rules``; older ones
    sent ids as stored), no tool call id is longer than :data:`MAX_CALL_ID_LENGTH`; from
    version 7, every ``image_url`` part holding a data URL names a type in
    :data:`IMAGE_TYPES`; and, from version 10, every tool call's name matches
    :data:`TOOL_NAME`.
    """
    problems: list[str] = []
    pending: list[str] = []
    for position, message in enumerate(messages):
        if not isinstance(message, Mapping):
            problems.append(f"messages[{position}] is not a dict")
            continue
        role = message.get("role")
        if rules >= 6:
            problems.extend(_id_length_problems(position, message))
        if rules >= 10:
            problems.extend(_name_problems(position, message))
        if rules >= 7:
            problems.extend(_image_type_problems(position, message, rules))
        if role == "tool":
            problems.extend(_tool_message_problems(position, message, pending))
            continue
        if pending:
            problems.append(f"messages[{position}]: tool calls {pending} are not answered")
        pending = []
        if role not in {"system", "developer", "user", "assistant"}:
            problems.append(f"messages[{position}] has unknown role {role!r}")
        if role == "assistant":
            pending = [str(call.get("id")) for call in message.get("tool_calls") or []]
            if message.get("content") is None and not pending:
                problems.append(f"messages[{position}]: assistant has no content or tool calls")
    if pending:
        problems.append(f"end of messages: tool calls {pending} are not answered")
    return problems


def _name_problems(position: int, message: Mapping[str, Any]) -> list[str]:
    """The tool call names of one message that the API refuses."""
    names = [
        call["function"].get("name")
        for call in message.get("tool_calls") or []
        if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping)
    ]
    refused = [name for name in names if not (isinstance(name, str) and TOOL_NAME.fullmatch(name))]
    if not refused:
        return []
    return [
        f"messages[{position}] has tool call names the API refuses (letters, digits, _ and - "
        f"only, at most 64): {refused}"
    ]


def _id_length_problems(position: int, message: Mapping[str, Any]) -> list[str]:
    """The tool call ids of one message that are longer than the API accepts."""
    ids = [call.get("id") for call in message.get("tool_calls") or [] if isinstance(call, Mapping)]
    if message.get("role") == "tool":
        ids.append(message.get("tool_call_id"))
    long = [value for value in ids if isinstance(value, str) and len(value) > MAX_CALL_ID_LENGTH]
    if not long:
        return []
    return [
        f"messages[{position}] has tool call ids longer than {MAX_CALL_ID_LENGTH} characters, "
        f"which the API refuses: {long}"
    ]


def _image_type_problems(position: int, message: Mapping[str, Any], rules: int) -> list[str]:
    """The data-URL images of one message whose type the API refuses, and from version 8
    of the view rules (``rules``) those whose data it cannot read."""
    content = message.get("content")
    refused: list[str] = []
    unread: list[str] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, Mapping) or part.get("type") != "image_url":
            continue
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else None
        if not isinstance(url, str) or not url.startswith("data:"):
            continue
        media_type = url[len("data:") :].split(";", 1)[0].split(",", 1)[0]
        if media_type not in IMAGE_TYPES:
            refused.append(media_type[:60])
            continue
        data = url.split(";base64,", 1)[1] if ";base64," in url else None
        reason = unreadable_image({"data": data}, signed_only=True) if rules >= 8 else None
        if reason is not None:
            unread.append(reason)
    problems = []
    if refused:
        problems.append(f"messages[{position}] has images of types the API refuses: {refused}")
    if unread:
        problems.append(f"messages[{position}] has images the API cannot read: {unread}")
    return problems


def _tool_message_problems(
    position: int, message: Mapping[str, Any], pending: list[str]
) -> list[str]:
    """Check one tool message against the calls still waiting (consumed from ``pending``)."""
    call_id = str(message.get("tool_call_id"))
    if call_id not in pending:
        return [f"messages[{position}]: tool message {call_id} answers no pending tool call"]
    pending.remove(call_id)
    if not isinstance(message.get("content"), (str, list)):
        return [f"messages[{position}]: tool message {call_id} has no content"]
    return []
