"""Validating what callers append: a message's role and content blocks, normalised.

Each block is checked by its model (:mod:`.block_models`), whose refusals are put in plain
words (:mod:`.block_errors`); common blocks whose every declared field already has the
type the model asks for skip the model, which could not refuse them. Fields a model does
not declare are kept: Cline adds ``call_id``, ``signature`` and ``reasoning_details`` to
blocks and ``id``, ``modelInfo``, ``metrics`` to messages, and an append followed by a
render must give them back unchanged. Validation never rewrites the caller's data: the
store keeps the caller's dicts (deep-copied), not the models' dumps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from contextstore.core.errors import InvalidMessageError
from contextstore.core.server_tools import (
    ASSISTANT_ONLY,
    PAIRED_TYPES,
    SERVER_BLOCK_TYPES,
    SERVER_TOOL_USE,
    check_server_pairs,
)
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

if TYPE_CHECKING:
    from pydantic import TypeAdapter

Role = Literal["user", "assistant"]
ROLES: frozenset[str] = frozenset({"user", "assistant"})
BLOCK_TYPES: frozenset[str] = frozenset(
    {"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"}
    | SERVER_BLOCK_TYPES
)
"""The block types a message holds (a search result only inside a tool result); each has
its model in :data:`~contextstore.core.block_kinds.BLOCK_MODELS`."""


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


def _block_adapter() -> TypeAdapter[Any]:
    """The models' validator of any block, ``BLOCK_ADAPTER``: imported from
    :mod:`.block_kinds` with the first block that needs it, so that the models (pydantic,
    about a tenth of a second) stay unloaded where nothing is appended (a command that only
    reads a store), then kept in this module."""
    kept: TypeAdapter[Any] | None = globals().get("BLOCK_ADAPTER")
    if kept is not None:
        return kept
    from contextstore.core.block_kinds import BLOCK_ADAPTER

    globals()["BLOCK_ADAPTER"] = BLOCK_ADAPTER
    return BLOCK_ADAPTER


def __getattr__(name: str) -> Any:
    if name == "BLOCK_ADAPTER":
        return _block_adapter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        from pydantic import ValidationError

        from contextstore.core.block_errors import describe

        try:
            _block_adapter().validate_python(block)
        except ValidationError as exc:
            raise InvalidMessageError(describe(exc.errors(), block, position, kind)) from exc
    if kind in _CALL_TYPES or kind in PAIRED_TYPES:
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
    content = _as_list(content)
    if not isinstance(content, list) or not content:
        raise InvalidMessageError(
            "content must be a string or a non-empty list of content blocks, got "
            f"{type(content).__name__ if not isinstance(content, list) else 'an empty list'}."
        )
    blocks = [validate_block(_as_dict(block), f"content[{i}]") for i, block in enumerate(content)]
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
    if role == "user":
        for position, block in enumerate(blocks):
            if block["type"] in ASSISTANT_ONLY:
                raise InvalidMessageError(
                    f"content[{position}] ({block['type']}) is a server tool block, which "
                    "the API returns in the assistant message; store it in that assistant "
                    "message."
                )
    _refuse_repeated_ids(blocks)
    if role == "assistant":
        check_server_pairs(blocks)
    return NormalizedMessage(role, blocks, False, json_copy(meta))


_CALLS = frozenset({"tool_use", SERVER_TOOL_USE})
"""Block types that make a call, each with an ``id`` its result names."""


def _refuse_repeated_ids(blocks: Sequence[dict[str, Any]]) -> None:
    """Refuse two calls with one id in a message, a tool's (``tool_use``) or a server
    tool's (``server_tool_use``) alike: no provider can pair their results (Anthropic
    refuses the request, OpenAI's ids collide).

    Raises:
        InvalidMessageError: naming the repeated id and the two blocks.
    """
    seen: dict[str, int] = {}
    for position, block in enumerate(blocks):
        key = block.get("id") if block["type"] in _CALLS else None
        if not isinstance(key, str):
            continue
        if key in seen:
            raise InvalidMessageError(
                f"content[{seen[key]}] and content[{position}] are two calls with the id "
                f"{key!r}; give each call its own id."
            )
        seen[key] = position


def _as_list(content: Any) -> Any:
    """A list of the blocks of ``content`` when it is a sequence or iterable of them other
    than a list (a tuple; the Anthropic SDK's ``MessageParam`` types content as an
    ``Iterable``, which ``append``'s signature takes), else ``content`` itself. Text, bytes
    and a mapping (a single block dict given as the content) are left to be refused."""
    if isinstance(content, list | str | bytes | bytearray | Mapping) or not isinstance(
        content, Iterable
    ):
        return content
    return list(content)


def _as_dict(value: Any) -> Any:
    """A dict copy of a mapping that is not a dict (a read-only ``MappingProxyType``), else
    ``value``: ``append`` takes messages and blocks as mappings, and the checks read dicts."""
    if isinstance(value, Mapping) and not isinstance(value, dict):
        return dict(value)
    return value


def normalize_message_dict(message: Any) -> NormalizedMessage:
    """Validate a whole ``{"role", "content", ...extra fields}`` mapping."""
    message = _as_dict(message)
    if not isinstance(message, dict):
        raise InvalidMessageError(
            f"a message must be a dict with 'role' and 'content', got {type(message).__name__}."
        )
    if "role" not in message or "content" not in message:
        raise InvalidMessageError("a message needs both 'role' and 'content'.")
    meta = {k: v for k, v in message.items() if k not in ("role", "content")}
    return normalize_message(message["role"], message["content"], meta)
