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

import dataclasses
import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextstore.core.errors import InvalidInputError, InvalidMessageError
from contextstore.core.hardening import DEFAULT_CONTINUATION
from contextstore.core.overlays import Block, Message
from contextstore.core.overlays import search_result_text as search_result_text
from contextstore.core.system_prompt import SystemPrompt as SystemPrompt
from contextstore.core.system_prompt import system_text as system_text
from contextstore.core.validate import canonical_json, json_copy
from contextstore.core.view import VIEW_RULES
from contextstore.renderers.anthropic_media import media_problems, sendable_media

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
}
"""The fields the API accepts, per block type."""

_FOREIGN_FIELDS = frozenset({"call_id", "reasoning_details"})
"""Fields agents add to blocks of any type; removed from block types not listed above."""

_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Immutable JSON values, shared between a block and its copy."""

CALL_ID = re.compile(r"[a-zA-Z0-9_-]+")
"""The tool call ids the Messages API accepts (``tool_use.id``, ``tool_result.tool_use_id``)."""

_NOT_IN_CALL_ID = re.compile(r"[^a-zA-Z0-9_-]")

_ID_FIELDS = {"tool_use": "id", "tool_result": "tool_use_id"}
"""Per block type, the field holding a tool call id."""


def call_id(value: str) -> str:
    """Return a stored tool call id in a form the Messages API accepts.

    An id matching :data:`CALL_ID` is returned unchanged. Another provider's id (Kimi's
    ``functions.read_file:0``, an MCP server's ``srv/tool.1``) has each character the API
    refuses replaced by ``_``, then ``_`` and 12 hex digits of the id's SHA-256 appended,
    so that two ids differing only in those characters stay different. The call and its
    result are given the same id, since both are computed from the stored one.
    """
    if CALL_ID.fullmatch(value):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{_NOT_IN_CALL_ID.sub('_', value)}_{digest}"


def repeated_call_id(value: str, used: Collection[str]) -> str:
    """Return a form of ``value`` (a tool call id already sent in an earlier message of the
    same request) that is not in ``used``: ``value``, ``_`` and 12 hex digits of the SHA-256
    of ``value`` and a counter. The Messages API refuses a request in which two ``tool_use``
    blocks share an id ("tool_use ids must be unique"), which agents whose ids restart every
    turn (Kimi's ``functions.read_file:0``) write."""
    counter = 1
    while True:
        seed = f"{value}\n{counter}".encode("utf-8", "surrogatepass")
        candidate = f"{value}_{hashlib.sha256(seed).hexdigest()[:12]}"
        if candidate not in used:
            return candidate
        counter += 1


def _distinct_call_ids(messages: list[Message]) -> list[Message]:
    """``messages`` (fresh renderings, changed in place) with every ``tool_use`` id that an
    earlier message already used given :func:`repeated_call_id`'s form, in the call and in
    its ``tool_result`` in the next message alike."""
    used: set[str] = set()
    renamed: dict[str, str] = {}
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            renamed = {}
            continue
        if message["role"] == "assistant":
            renamed = {}
            for block in content:
                if block.get("type") != "tool_use" or not isinstance(block.get("id"), str):
                    continue
                stored = block["id"]
                if stored in used:
                    renamed[stored] = block["id"] = repeated_call_id(stored, used)
                used.add(block["id"])
            continue
        for block in content:
            if block.get("type") == "tool_result" and block.get("tool_use_id") in renamed:
                block["tool_use_id"] = renamed[block["tool_use_id"]]
        renamed = {}
    return messages


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


def _clean_block(block: Block, rules: int) -> Block | None:
    """Return a copy of ``block`` with only accepted fields, or None to drop it; from
    version 4 of the view rules its tool call id is given :func:`call_id`'s form."""
    kind = block.get("type")
    if kind == "thinking" and not block.get("signature"):
        return None
    if kind == "text" and _blank(block.get("text")):
        return None
    allowed = _BLOCK_FIELDS.get(str(kind))
    # Strings and numbers are immutable: only containers need copying.
    if allowed is None:
        cleaned = {
            k: v if v.__class__ in _SCALARS else json_copy(v)
            for k, v in block.items()
            if k not in _FOREIGN_FIELDS
        }
    else:
        cleaned = {
            k: v if v.__class__ in _SCALARS else json_copy(v)
            for k, v in block.items()
            if k in allowed
        }
    if kind == "tool_result" and isinstance(cleaned.get("content"), list):
        cleaned["content"] = _clean_blocks(cleaned["content"], rules)
    id_field = _ID_FIELDS.get(str(kind))
    if rules >= 4 and id_field is not None and isinstance(cleaned.get(id_field), str):
        cleaned[id_field] = call_id(cleaned[id_field])
    if rules >= 7 and kind in ("image", "document"):
        return sendable_media(cleaned, rules)
    return cleaned


def _blank(text: Any) -> bool:
    """True for text the API refuses in a text block (empty or whitespace only)."""
    return not isinstance(text, str) or not text.strip()


def _clean_blocks(blocks: Sequence[Any], rules: int) -> list[Block]:
    cleaned = (_clean_block(b, rules) for b in blocks if isinstance(b, dict))
    return [block for block in cleaned if block is not None]


def _clean_message(message: Mapping[str, Any], rules: int) -> Message:
    content = message["content"]
    if isinstance(content, str):
        return {"role": message["role"], "content": "" if _blank(content) else content}
    return {"role": message["role"], "content": _clean_blocks(content, rules)}


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
    messages: Sequence[Mapping[str, Any]], *, rules: int = VIEW_RULES
) -> list[Message]:
    """Return the messages as the Anthropic API accepts them.

    Each message keeps only ``role`` and ``content`` (string content stays a string).
    Blocks keep only the fields the API documents for their type; thinking blocks without
    a signature and blank text blocks (which the API refuses) are dropped; tool call ids
    the API refuses are given :func:`call_id`'s form, and one that an earlier message
    already used :func:`repeated_call_id`'s; a base64 image is sent with the type
    its data is, and an image or document of a type the API refuses is replaced by a text
    block saying so (:func:`sendable_media`). A message left
    without content is dropped and its neighbours, now of the same role, are merged so
    that roles still alternate; when that leaves the model first, a user turn saying
    :data:`~contextstore.core.hardening.DEFAULT_CONTINUATION` opens the list. When the
    list ends with an assistant message (a prefill), the trailing whitespace of its
    content is removed (:func:`final_stripped`).

    Args:
        messages: Anthropic-style messages, already cut and tool-paired. Not modified.
        rules: The version of the view rules to render by
            (:data:`~contextstore.core.view.VIEW_RULES`): a stored request is rebuilt by
            the version it was prepared with; before 4, ids are sent as stored, before
            5 a final assistant message keeps its trailing whitespace, before 7
            images and documents are sent with the media type they were stored with,
            whatever it is (:func:`sendable_media`), and before 9 a tool call id used
            in an earlier message is sent again as it is (:func:`repeated_call_id`).

    Returns:
        New message dicts sharing no objects with the input.

    Raises:
        InvalidMessageError: The input is not a list of Anthropic-style messages.
    """
    check_messages(messages)
    rendered = _merge_same_role([_clean_message(m, rules) for m in messages])
    if rendered and rendered[0]["role"] != "user":
        # The first user message was left empty (a blank text): the API wants a user first.
        rendered.insert(0, {"role": "user", "content": DEFAULT_CONTINUATION})
    if rules >= 9:
        rendered = _distinct_call_ids(rendered)
    if rules >= 5 and rendered:
        rendered[-1] = final_stripped(rendered[-1]) or rendered[-1]
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
        ``{"model", "max_tokens", "system", "tools", "messages"}`` (present keys only).

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
    body["messages"] = render_messages(messages, rules=rules)
    return body


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
    """

    message: Message
    canonical: bytes
    role: str
    filled: bool
    calls: tuple[str, ...]
    results: tuple[str, ...] | None
    nested: tuple[tuple[tuple[str, bool], ...], ...] | None

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
    cleaned = _clean_message(message, rules)
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
        if value.__class__ in _SCALARS:
            continue
        items = value.values() if isinstance(value, dict) else value
        flat = isinstance(value, dict | list) and all(v.__class__ in _SCALARS for v in items)
        nested.append((key, flat))
    return tuple(nested)


def conforming(rendered: Sequence[RenderedMessage]) -> bool:
    """True when the messages ``rendered`` one by one (the last one through
    :func:`as_final`) are what :func:`render_messages` makes of them together (nothing
    left empty, so nothing merged) and :func:`violations` finds nothing in them. False
    means: render them together and check them in full (a False may still have no
    violation, for example a tool call id used twice, or a final assistant message ending
    with whitespace under view rules older than 5; a tool call id an earlier message used
    is given another form when they are rendered together)."""
    if rendered and final_stripped(rendered[-1].message) is not None:
        return False
    calls: tuple[str, ...] = ()
    used: set[str] = set()
    for position, message in enumerate(rendered):
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


def violations(messages: Sequence[Any], *, rules: int = VIEW_RULES) -> list[str]:
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
    (:func:`~contextstore.renderers.anthropic_media.media_problems`); and from version 9,
    no ``tool_use`` id is used by two messages.
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
        if message.get("role") == "user":
            problems.extend(_result_problems(position, blocks, calls))
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
    blank = [b for b in blocks if b.get("type") == "text" and _blank(b.get("text"))]
    if blank:
        problems.append(f"messages[{position}] has {len(blank)} blank text block(s)")
    refused = [
        str(b.get(_ID_FIELDS[str(b.get("type"))]))
        for b in blocks
        if b.get("type") in _ID_FIELDS
        and not CALL_ID.fullmatch(str(b.get(_ID_FIELDS[str(b.get("type"))])))
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
