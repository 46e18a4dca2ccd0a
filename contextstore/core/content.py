"""Content models for Anthropic-style messages, used to validate what callers append.

The models check the shape of each block (types, required fields) and keep every field
they do not know (``extra="allow"``): Cline adds ``call_id``, ``signature`` and
``reasoning_details`` to blocks and ``id``, ``modelInfo``, ``metrics`` to messages, and an
append followed by a render must give them back unchanged. Validation never rewrites the
caller's data: the store keeps the caller's dicts (deep-copied), not the models' dumps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from contextstore.core.errors import InvalidMessageError
from contextstore.core.validate import (
    MAX_NAME_LENGTH,
    NUL,
    canonical_json,
    check_json_value,
    json_copy,
    json_size_bound,
    shown,
    text_bytes,
)

Role = Literal["user", "assistant"]
ROLES: frozenset[str] = frozenset({"user", "assistant"})


class _Block(BaseModel):
    # Strict: a value of another type is refused, never converted ("yes" is not True, 1 is
    # not "1"): the store keeps the caller's value, and a provider would refuse it.
    model_config = ConfigDict(extra="allow", strict=True)


class _Setting(BaseModel):
    # A provider's setting, sent as it is: a field it does not define would be refused.
    model_config = ConfigDict(extra="forbid", strict=True)


class CacheControl(_Setting):
    """A prompt-caching breakpoint: ``{"type": "ephemeral"}``, ``ttl`` ``"5m"`` or ``"1h"``."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] = "5m"


class CitationsConfig(_Setting):
    """Whether the model may cite a document or search result: ``{"enabled": true}``."""

    enabled: bool = False


class CharLocation(_Block):
    """A citation of a plain-text document, by character offsets."""

    type: Literal["char_location"]
    cited_text: str
    document_index: int
    document_title: str | None
    start_char_index: int
    end_char_index: int


class PageLocation(_Block):
    """A citation of a PDF, by pages."""

    type: Literal["page_location"]
    cited_text: str
    document_index: int
    document_title: str | None
    start_page_number: int
    end_page_number: int


class ContentBlockLocation(_Block):
    """A citation of a content document, by blocks."""

    type: Literal["content_block_location"]
    cited_text: str
    document_index: int
    document_title: str | None
    start_block_index: int
    end_block_index: int


class SearchResultLocation(_Block):
    """A citation of a search result block."""

    type: Literal["search_result_location"]
    cited_text: str
    search_result_index: int
    source: str
    title: str | None
    start_block_index: int
    end_block_index: int


class WebSearchResultLocation(_Block):
    """A citation of a web search result."""

    type: Literal["web_search_result_location"]
    cited_text: str
    encrypted_index: str
    title: str | None
    url: str


Citation = Annotated[
    CharLocation
    | PageLocation
    | ContentBlockLocation
    | SearchResultLocation
    | WebSearchResultLocation,
    Field(discriminator="type"),
]


class Base64Source(_Block):
    """Inline media: ``{"type": "base64", "media_type": ..., "data": ...}``."""

    type: Literal["base64"]
    media_type: str
    data: str


class UrlSource(_Block):
    """Media referenced by URL."""

    type: Literal["url"]
    url: str


class TextSource(_Block):
    """A plain-text document source."""

    type: Literal["text"]
    media_type: str = "text/plain"
    data: str


class FileSource(_Block):
    """A document or image uploaded through a provider's files API."""

    type: Literal["file"]
    file_id: str


class TextBlock(_Block):
    """``{"type": "text", "text": ...}``."""

    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[Citation] | None = None


ImageSource = Annotated[Base64Source | UrlSource | FileSource, Field(discriminator="type")]


class ImageBlock(_Block):
    """An image, inline (base64), by URL or by file id."""

    type: Literal["image"]
    source: ImageSource
    cache_control: CacheControl | None = None


class ContentSource(_Block):
    """A document made of text and image blocks (or of one string)."""

    type: Literal["content"]
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]]


DocumentSource = Annotated[
    Base64Source | UrlSource | TextSource | FileSource | ContentSource,
    Field(discriminator="type"),
]


class DocumentBlock(_Block):
    """A document (PDF, plain text or content blocks), inline, by URL or by file id."""

    type: Literal["document"]
    source: DocumentSource
    title: str | None = None
    context: str | None = None
    citations: CitationsConfig | None = None
    cache_control: CacheControl | None = None


class SearchResultBlock(_Block):
    """A search result given to the model in a tool result, with its text blocks."""

    type: Literal["search_result"]
    source: str
    title: str
    content: list[TextBlock]
    citations: CitationsConfig = CitationsConfig()
    cache_control: CacheControl | None = None


class ToolUseBlock(_Block):
    """An assistant's tool call; ``id`` pairs it with its result."""

    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: CacheControl | None = None


class ToolResultBlock(_Block):
    """The result of a tool call; its content is a string or a list of text, image,
    document and search result blocks (each checked as a block of its own)."""

    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[dict[str, Any]] = ""
    is_error: bool = False
    cache_control: CacheControl | None = None


class ThinkingBlock(_Block):
    """Extended thinking; the API requires its ``signature`` when sent back (a block
    without one is not sent)."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Block):
    """Encrypted thinking, passed back verbatim."""

    type: Literal["redacted_thinking"]
    data: str


ContentBlock = Annotated[
    TextBlock
    | ImageBlock
    | DocumentBlock
    | SearchResultBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock,
    Field(discriminator="type"),
]

BLOCK_TYPES: frozenset[str] = frozenset(
    {"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"}
)
"""The block types a message holds (a search result only inside a tool result)."""

_MODELS: dict[str, type[_Block]] = {
    "text": TextBlock,
    "image": ImageBlock,
    "document": DocumentBlock,
    "search_result": SearchResultBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "thinking": ThinkingBlock,
    "redacted_thinking": RedactedThinkingBlock,
}
_BLOCK_ADAPTER: TypeAdapter[Any] = TypeAdapter(ContentBlock)
_INNER_RESULT_TYPES = frozenset({"text", "image", "document", "search_result"})
_EXACT_TEXT_FIELD = {"text": "text", "thinking": "thinking", "tool_result": "content"}
"""Per block type, the field whose text storage keeps exactly, NUL included."""
BLOCK_LEVEL = 2
"""Arrays and objects around a block: the message's dict and its content list."""


def check_block_values(block: dict[str, Any], position: str, level: int = BLOCK_LEVEL) -> None:
    """Refuse a block value JSON cannot hold (see :func:`check_json_value`), counting the
    ``level`` containers around the block in the depth: NUL is refused except in the text
    of a text, thinking or tool result block (and of a result's text items).

    Raises:
        InvalidMessageError: naming the field and the problem.
    """
    kind = block.get("type")
    exact = _EXACT_TEXT_FIELD.get(kind) if isinstance(kind, str) else None
    for key, value in block.items():
        if NUL in key or not key.isascii():
            check_json_value(f"{position} key", key, error=InvalidMessageError)
        if value.__class__ is str and value.isascii() and (key == exact or NUL not in value):
            continue  # what check_json_value would accept, without the call
        where = f"{position}.{key}"
        if key == exact and isinstance(value, str):
            check_json_value(where, value, allow_nul=True, error=InvalidMessageError)
        elif kind == "tool_result" and key == "content" and isinstance(value, list):
            for n, item in enumerate(value):
                if isinstance(item, dict) and item.get("type") == "text":
                    check_block_values(item, f"{where}[{n}]", level + 2)
                else:
                    check_json_value(
                        f"{where}[{n}]", item, level=level + 2, error=InvalidMessageError
                    )
        else:
            check_json_value(where, value, level=level + 1, error=InvalidMessageError)


_CALL_TYPES = frozenset({"tool_use", "tool_result"})
"""Block types whose ids and names the model requires to be non-empty."""


_STRINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "text": (("text",), ()),
    "thinking": (("thinking",), ("signature",)),
    "redacted_thinking": (("data",), ()),
    "tool_use": (("id", "name"), ()),
    "tool_result": (("tool_use_id",), ()),
}
"""Per block type the model checks without the media sources: its required string fields
and its optional (string or None) ones."""


def model_needed(block: dict[str, Any], kind: str) -> bool:
    """False when ``block`` (a dict with string keys, of the known type ``kind``) is
    certainly valid for its content model: its keys are ASCII, and every field the model
    declares is there with exactly the type the model asks for, ASCII when a string (the
    model refuses a string it cannot encode), or absent when optional. The model then
    cannot refuse it and is not consulted; any other block (media, citations, a field of
    another type or None, a ``str`` subclass, non-ASCII text) goes through the model,
    whose error names what is wrong.
    """
    fields = _STRINGS.get(kind)
    if fields is None or kind.__class__ is not str or not "".join(block).isascii():
        return True
    required, optional = fields
    for name in required:
        value = block.get(name)
        if value.__class__ is not str or not value.isascii():
            return True
        if not value and kind in _CALL_TYPES:
            return True
    for name in optional:
        value = block.get(name)
        if value is not None and (value.__class__ is not str or not value.isascii()):
            return True
    if kind in _CACHED and not _plain_cache_control(block.get("cache_control")):
        return True
    if kind == "text":
        return block.get("citations") is not None
    if kind == "tool_use":
        return not _plain_keys(block.get("input"))
    if kind == "tool_result":
        if "is_error" in block and block["is_error"].__class__ is not bool:
            return True
        if "content" not in block:
            return False
        content = block["content"]
        if content.__class__ is str:
            return not content.isascii()
        return content.__class__ is not list or not all(_plain_keys(item) for item in content)
    return False


_CACHED = frozenset({"text", "tool_use", "tool_result"})
"""The block types of :data:`_STRINGS` whose model declares ``cache_control``."""


def _plain_cache_control(value: Any) -> bool:
    """``value`` is None or a plain dict ``{"type": "ephemeral"}``, with at most a ``ttl``
    of ``"5m"`` or ``"1h"`` beside it (plain strings): what the model certainly accepts."""
    if value is None:
        return True
    if value.__class__ is not dict or not value.keys() <= {"type", "ttl"}:
        return False
    kind, ttl = value.get("type"), value.get("ttl", "5m")
    return kind.__class__ is str and kind == "ephemeral" and ttl.__class__ is str and ttl in _TTLS


_TTLS = frozenset({"5m", "1h"})


def _plain_keys(value: Any) -> bool:
    """``value`` is a plain dict whose keys are plain ASCII strings."""
    return (
        value.__class__ is dict
        and all(key.__class__ is str for key in value)
        and "".join(value).isascii()
    )


@dataclass(frozen=True)
class NormalizedMessage:
    """A validated message split the way the store keeps it.

    ``blocks`` are deep copies of the caller's blocks; ``was_string`` remembers that the
    content was a plain string (stored as one text block); ``meta`` holds every
    message-level field other than ``role`` and ``content``.
    """

    role: str
    blocks: list[dict[str, Any]]
    was_string: bool
    meta: dict[str, Any]

    def json_size(self) -> int:
        """The message's size as the store measures it against ``max_message_bytes``: the
        UTF-8 bytes of the canonical JSON of its blocks plus that of its message-level
        fields."""
        return text_bytes("the message", canonical_json(self.blocks)) + text_bytes(
            "the message", canonical_json(self.meta)
        )

    def size_over(self, limit: int) -> int | None:
        """:meth:`json_size` when it is over ``limit``, else None.

        The message is encoded only when a cheap upper bound of its size
        (:func:`~contextstore.core.validate.json_size_bound`) is over the limit, so the
        decision is the exact one, and a message well under the limit (nearly every one)
        costs no encoding."""
        if json_size_bound(self.blocks) + json_size_bound(self.meta) <= limit:
            return None
        size = self.json_size()
        return size if size > limit else None

    def to_message(self) -> dict[str, Any]:
        """Rebuild the message dict exactly as the caller gave it."""
        content: Any = self.blocks[0]["text"] if self.was_string else json_copy(self.blocks)
        message: dict[str, Any] = {"role": self.role, "content": content}
        message.update(json_copy(self.meta))
        return message


def _describe(errors: list[ErrorDetails], block: dict[str, Any], position: str, kind: str) -> str:
    """Plain words for what the content model found wrong with a block: which field (its
    path in the block), what it must be, and what it holds; in the library's terms, never
    pydantic's (its messages, error types and union labels are not shown)."""
    # loc[0] is the block's type; the first error that reaches its field is the one to tell.
    found = [_field_at(_MODELS[kind], error["loc"][1:], block) for error in errors]
    chosen = next((n for n, (_, _, whole) in enumerate(found) if whole), 0)
    error = errors[chosen]
    annotation, path, _ = found[chosen]
    where = f"{position} ({kind})"
    field = f"{where}: {path}" if path else where
    problem = error["type"]
    if problem == "extra_forbidden":
        allowed = _choices(list(_bare(annotation).model_fields), "and")
        return (
            f"{where}: {path} has the field {shown(error['loc'][-1])}, which the provider "
            f"refuses there; {path} holds only {allowed}."
        )
    if problem == "string_unicode":  # a lone surrogate ("\ud800"), in a value or a key
        what = f"{field}" if path else f"{where} has a field name that"
        return f"{what} is not valid Unicode text (a lone surrogate); pass well-formed text."
    if problem == "missing":
        return f"{where} has no {path}; set it to {_expected(annotation)}."
    if problem == "string_too_short":
        return f"{field} must not be empty; set it to the {path} the provider gave."
    if problem in ("union_tag_invalid", "union_tag_not_found"):
        tags = _tags(annotation)
        got = error.get("ctx", {}).get("tag")
        got_text = f", got {shown(got)}" if problem == "union_tag_invalid" else ", and it has none"
        return f"{field} must have a 'type' of {_choices(tags)}{got_text}."
    return f"{field} must be {_expected(annotation)}, got {shown(error['input'])}."


def _field_at(
    model: type[BaseModel], loc: Sequence[int | str], value: Any
) -> tuple[Any, str, bool]:
    """The annotation of the value that an error's location (inside ``value``, a block of
    ``model``) names, and its path in the block: ``source.media_type``, ``citations[0].type``.

    pydantic's location also names the member of a union it tried (a type value, or a label
    such as ``str``): a type value picks its member, and a label is followed when the value
    is of that member's kind alone (a list for ``str | list[...]``); otherwise the location
    stops at the union, as the value is none of its members.
    """
    annotation: Any = model
    path = ""
    for part in loc:
        annotation = _bare(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:  # a field the model does not define
                return annotation, path, True
            path = f"{path}.{part}" if path else str(part)
            annotation = field.annotation
            value = value.get(part) if isinstance(value, dict) else None
        elif get_origin(annotation) is list and isinstance(part, int):
            path = f"{path}[{part}]"
            annotation = get_args(annotation)[0]
            value = value[part] if isinstance(value, list) and part < len(value) else None
        elif _is_union(annotation) and part in _tags(annotation):
            annotation = next(m for m in _members(annotation) if part in _tags(m))
        elif _is_union(annotation):
            kinds = [m for m in _members(annotation) if _of_kind(value, m, str(part))]
            if len(kinds) != 1:
                return annotation, path, False
            annotation = kinds[0]
        else:
            return annotation, path, False
    return annotation, path, True


def _of_kind(value: Any, annotation: Any, label: str) -> bool:
    """``value`` is of the kind ``annotation`` (a member of a union) takes, and ``label``
    (from an error's location) names that member: a list for ``list[...]``, a dict for a
    model, a string for ``str``."""
    origin = get_origin(annotation) or annotation
    if not isinstance(origin, type):
        return False
    named = label == origin.__name__ or label.startswith(f"{origin.__name__}[")
    if issubclass(origin, BaseModel):
        origin = dict
    return named and isinstance(value, origin)


def _bare(annotation: Any) -> Any:
    """``annotation`` without ``Annotated`` and without ``| None`` when it has one other
    member (pydantic adds no step to the location for them)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    members = _members(annotation) if _is_union(annotation) else []
    if len(members) == 1 and type(None) in get_args(annotation):
        return _bare(members[0])
    return annotation


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, UnionType)


def _members(annotation: Any) -> list[Any]:
    """The members of a union other than None, each without ``Annotated``."""
    annotation = annotation if _is_union(annotation) else _bare(annotation)
    return [_bare(m) for m in get_args(annotation) if m is not type(None)]


def _tags(annotation: Any) -> list[str]:
    """The ``type`` values a model, or a union of models, accepts (empty for other types)."""
    annotation = _bare(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get("type")
        return list(get_args(field.annotation)) if field is not None else []
    if _is_union(annotation):
        return [tag for member in _members(annotation) for tag in _tags(member)]
    return []


_WORDS: dict[Any, str] = {
    str: "a string",
    bool: "True or False",
    int: "an integer",
    type(None): "None",
    CacheControl: "{'type': 'ephemeral'} (with an optional 'ttl' of '5m' or '1h')",
    CitationsConfig: "{'enabled': True} or {'enabled': False}",
}


def _expected(annotation: Any) -> str:
    """What a value of ``annotation`` is, in words."""
    nullable = _is_union(annotation) and type(None) in get_args(annotation)
    annotation = _bare(annotation)
    words = _WORDS.get(annotation) if isinstance(annotation, type) else None
    if words is None:
        tags = _tags(annotation)
        if tags:
            words = f"an object with a 'type' of {_choices(tags)}"
        elif get_origin(annotation) is Literal:
            words = _choices(list(get_args(annotation)))
        elif get_origin(annotation) is list:
            item = _bare(get_args(annotation)[0])
            tags = _tags(item)
            items = f"objects with a 'type' of {_choices(tags)}" if tags else "content blocks"
            words = f"a list of {items}"
        elif get_origin(annotation) is dict:
            words = "an object (a dict with string keys)"
        elif _is_union(annotation):
            words = " or ".join(_expected(member) for member in _members(annotation))
        else:
            words = "a value of another type"
    return f"{words}, or None" if nullable else words


def _choices(values: Sequence[Any], word: str = "or") -> str:
    """``'a', 'b' or 'c'`` (``word``: ``"and"`` for ``'a', 'b' and 'c'``)."""
    shown_values = [repr(value) for value in values]
    if len(shown_values) < 2:
        return "".join(shown_values)
    return f"{', '.join(shown_values[:-1])} {word} {shown_values[-1]}"


def validate_block(
    block: Any, position: str, *, checked: bool = False, kinds: frozenset[str] = BLOCK_TYPES
) -> dict[str, Any]:
    """Check one content block and return a deep copy of it (``checked``: its values were
    checked already, as an item of the tool result being validated; ``kinds``: the block
    types accepted at its place).

    Raises:
        InvalidMessageError: naming the block's position and what is wrong with it.
    """
    if not isinstance(block, dict) or not all(isinstance(key, str) for key in block):
        raise InvalidMessageError(
            f"{position} must be a dict content block, got {type(block).__name__}; "
            "pass blocks like {'type': 'text', 'text': '...'}."
        )
    kind = block.get("type")
    if not isinstance(kind, str) or kind not in kinds:
        raise InvalidMessageError(
            f"{position} has unknown type {shown(kind)}; use one of {', '.join(sorted(kinds))}."
        )
    if kind == "tool_result" and not block.get("tool_use_id"):
        raise InvalidMessageError(
            f"{position} is a tool_result without a tool_use_id; set tool_use_id to the id of "
            "the tool_use block it answers."
        )
    if model_needed(block, kind):
        try:
            _BLOCK_ADAPTER.validate_python(block)
        except ValidationError as exc:
            raise InvalidMessageError(_describe(exc.errors(), block, position, kind)) from exc
    if kind in _CALL_TYPES:
        for key in ("id", "name", "tool_use_id"):
            value = block.get(key)
            if isinstance(value, str) and (len(value) > MAX_NAME_LENGTH or "\x00" in value):
                raise InvalidMessageError(
                    f"{position}.{key} must be at most {MAX_NAME_LENGTH} characters without "
                    "NUL characters."
                )
    if not checked:
        check_block_values(block, position)
    if kind == "tool_result" and isinstance(block.get("content"), list):
        for inner_idx, inner in enumerate(block["content"]):
            inner_kind = inner.get("type") if isinstance(inner, dict) else None
            if not isinstance(inner_kind, str) or inner_kind not in _INNER_RESULT_TYPES:
                raise InvalidMessageError(
                    f"{position}.content[{inner_idx}] has type {shown(inner_kind)}; tool results "
                    "hold text, image, document or search_result blocks."
                )
            where = f"{position}.content[{inner_idx}]"
            validate_block(inner, where, checked=True, kinds=_INNER_RESULT_TYPES)
    copied: dict[str, Any] = json_copy(block)
    return copied


def normalize_message(role: Any, content: Any, meta: Any = None) -> NormalizedMessage:
    """Validate a message and split it into role, blocks and message-level fields.

    Args:
        role: ``"user"`` or ``"assistant"``.
        content: a string, or a non-empty list of content blocks.
        meta: extra message-level fields to keep (Cline's ``id``, ``modelInfo``...).

    Raises:
        InvalidMessageError: on any problem; the caller's objects are never modified.
    """
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidMessageError(
            f"role {shown(role)} is not valid; messages have role 'user' or 'assistant' "
            "(pass a system prompt to prepare_request(system=...))."
        )
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(key, str) for key in meta):
        raise InvalidMessageError("message metadata must be a dict with string keys.")
    if {"role", "content"} & meta.keys():
        raise InvalidMessageError("message metadata cannot contain 'role' or 'content'.")
    if meta:
        check_json_value("meta", meta, error=InvalidMessageError)
    if isinstance(content, str):
        check_json_value("content", content, allow_nul=True, error=InvalidMessageError)
        blocks = [{"type": "text", "text": content}]
        return NormalizedMessage(role, blocks, True, json_copy(meta))
    if not isinstance(content, list) or not content:
        raise InvalidMessageError(
            "content must be a string or a non-empty list of content blocks, got "
            f"{type(content).__name__ if not isinstance(content, list) else 'an empty list'}."
        )
    blocks = [validate_block(block, f"content[{i}]") for i, block in enumerate(content)]
    if role == "user" and any(b["type"] in ("tool_use", "thinking") for b in blocks):
        raise InvalidMessageError(
            "a user message cannot contain tool_use or thinking blocks; those belong to "
            "assistant messages."
        )
    if role == "assistant" and any(b["type"] == "tool_result" for b in blocks):
        raise InvalidMessageError(
            "an assistant message cannot contain tool_result blocks; send results in the "
            "next user message."
        )
    _refuse_repeated_ids(blocks)
    return NormalizedMessage(role, blocks, False, json_copy(meta))


def _refuse_repeated_ids(blocks: Sequence[dict[str, Any]]) -> None:
    """Refuse two calls with one id in a message: no provider can pair their results
    (Anthropic refuses the request, OpenAI's ids collide).

    Raises:
        InvalidMessageError: naming the repeated id and the two blocks.
    """
    seen: dict[str, int] = {}
    for position, block in enumerate(blocks):
        key = block.get("id") if block["type"] == "tool_use" else None
        if not isinstance(key, str):
            continue
        if key in seen:
            raise InvalidMessageError(
                f"content[{seen[key]}] and content[{position}] are two calls with the id "
                f"{key!r}; give each call its own id."
            )
        seen[key] = position


def normalize_message_dict(message: Any) -> NormalizedMessage:
    """Validate a whole ``{"role", "content", ...extra fields}`` dict."""
    if not isinstance(message, dict):
        raise InvalidMessageError(
            f"a message must be a dict with 'role' and 'content', got {type(message).__name__}."
        )
    if "role" not in message or "content" not in message:
        raise InvalidMessageError("a message needs both 'role' and 'content'.")
    meta = {k: v for k, v in message.items() if k not in ("role", "content")}
    return normalize_message(message["role"], message["content"], meta)
