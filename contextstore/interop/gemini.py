"""Gemini CLI saved chats as plain values: reading and validating them (the conversion rules
below are implemented in :mod:`contextstore.interop.gemini_convert`).

Two kinds of file are read (no real file was available offline; the shapes below follow
our reference notes and a reading of Gemini CLI's ``logger.ts``, ``chatRecordingService.ts``
and ``sessionUtils.ts``):

* ``/chat save <tag>`` checkpoints, ``checkpoint-<tag>.json``: ``{"history": Content[]}``
  (other keys such as ``authType`` are kept as metadata), or a legacy bare ``Content[]``.
* Session recordings, ``~/.gemini/tmp/<project>/chats/session-*.jsonl``: one JSON object
  per line, applied in order:

  - a metadata record ``{"sessionId", "projectHash", "startTime", ...}`` (no ``id``);
  - a message record ``{"id", "type", "content", "toolCalls"?, ...}``: ``type`` is
    ``user``, ``gemini``, ``info``, ``error`` or ``warning``; ``content`` a string, a
    ``Part`` or a ``Part[]``; ``toolCalls`` ``[{"id", "name", "args", "result"?}]`` where
    ``result`` is a string or ``Part[]`` of ``functionResponse`` parts. A record whose
    ``id`` was seen before replaces it in place (last write wins). A record with
    ``role``/``parts`` is read as a ready ``Content``;
  - ``{"$set": {...}}`` updates metadata; a ``messages`` array in it replaces the whole
    list (a full checkpoint), and later message records apply on top of it (Gemini CLI's
    loader instead lets the last non-empty ``$set.messages`` win over every record);
  - ``{"$rewindTo": id}`` removes that message and everything after it (Gemini CLI's
    ``rewindTo`` semantics); an unknown id empties the list, as Gemini CLI's loader does.

  Any other record is skipped with a note. Message records become ``Content`` as Gemini
  CLI's resume does: ``info``/``error``/``warning`` and slash commands (user text starting
  with ``/`` or ``?``) are left out; a ``gemini`` record gives a model turn (its content
  plus a ``functionCall`` per tool call not already in it), then a user turn with the
  calls' results. A legacy whole-file session (``{"sessionId", "messages": [...]}``) is
  read the same way.

Conversion of ``Content[]`` to Anthropic messages:

* role ``user`` -> ``user``, ``model`` -> ``assistant``;
* ``text`` -> a text block; ``thought: true`` parts are dropped (Gemini strips them too);
  blank text parts are dropped;
* ``inlineData{mimeType, data}`` -> an ``image`` (``image/*``) or ``document``
  (``application/pdf``) block with a base64 source; other MIME types -> a text note;
* ``fileData{mimeType, fileUri}`` -> an image or document block with a URL source;
  other MIME types -> a text note;
* ``functionCall{id?, name, args}`` -> ``tool_use``; without an id, the id is
  ``gemini_call_<turn>_<part>`` (stable: the turn's and part's positions);
* ``functionResponse{id?, name, response}`` -> ``tool_result``; its ``tool_use_id`` is
  the response's id, else the first unanswered call of the same name in the previous
  model turn, else ``gemini_response_<turn>_<part>``. The content is ``response.output``
  when it is a string, else the response as JSON; a response with ``error`` is
  ``is_error``. Images in ``functionResponse.parts`` join the result's content;
* ``executableCode`` -> a fenced code text block; ``codeExecutionResult`` -> an
  ``Output:`` text block;
* a part's ``thoughtSignature`` is kept on its block as ``thoughtSignature`` (the store
  keeps unknown block fields, so an export can restore it).

Consecutive same-role turns are merged, empty turns dropped, and in a user message the
``tool_result`` blocks come first. When the chat starts with a model turn, a user message
(Gemini CLI's own continuation text) is put before it, because the Anthropic and OpenAI
formats require a user message first. Every message is checked with
:func:`~contextstore.core.content.normalize_message_dict`; nothing here touches a database.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from contextstore.interop.gemini_convert import (
    MESSAGE_TYPES,
    ROLES,
    SYNTHETIC_FIELD,
    GeminiChatError,
    Turn,
    turns_to_messages,
)

_TITLE_CHARS: Final = 120


@dataclass(frozen=True)
class GeminiChat:
    """A Gemini CLI chat read from one file, converted and validated.

    Attributes:
        path: the file read.
        kind: ``"checkpoint"``, ``"legacy-checkpoint"`` or ``"session"``.
        messages: the Anthropic messages, each valid for the store.
        skipped: one line per thing left out or approximated.
        title: the first line of the first user text, if any.
        model_id: the last model a session recorded, if any.
        metadata: conversation metadata (the source, the file, Gemini's own metadata).
    """

    path: Path
    kind: str
    messages: list[dict[str, Any]]
    skipped: list[str] = field(default_factory=list)
    title: str | None = None
    model_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


# -- reading ------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GeminiChatError(path, None, f"cannot be read ({exc.strerror}).") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GeminiChatError(path, f"byte {exc.start}", "is not UTF-8 text.") from exc


def _loads(text: str, path: Path, line: int | None = None) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno if line is None else line} column {exc.colno}"
        raise GeminiChatError(
            path, where, f"invalid JSON ({exc.msg}); repair the file and import again."
        ) from exc


def read_chat(path: str | os.PathLike[str]) -> GeminiChat:
    """Read, validate and convert a Gemini CLI checkpoint or session file.

    A ``.jsonl`` file is a session recording; any other file is parsed as one JSON value
    (a checkpoint, a legacy bare array, or a legacy whole-file session).

    Args:
        path: the file.

    Returns:
        The chat, with Anthropic messages ready to append.

    Raises:
        GeminiChatError: the file is unreadable, not JSON, has the wrong shape, or holds
            no message to import.
    """
    file = Path(path)
    text = _read_text(file)
    if file.suffix == ".jsonl":
        turns, metadata, notes = read_session_lines(text.splitlines(), file)
        kind = "session"
    else:
        turns, metadata, notes, kind = _read_json_chat(_loads(text, file), file)
    messages, converted_notes = turns_to_messages(turns, file)
    if not messages:
        raise GeminiChatError(file, None, "holds no messages; there is nothing to import.")
    return GeminiChat(
        path=file,
        kind=kind,
        messages=messages,
        skipped=[*notes, *converted_notes],
        title=_title(messages),
        model_id=_model_id(metadata),
        metadata={"source": f"gemini-cli:{kind}", "gemini_file": str(file.resolve()), **metadata},
    )


def _read_json_chat(value: Any, path: Path) -> tuple[list[Turn], dict[str, Any], list[str], str]:
    if isinstance(value, list):
        return checkpoint_turns(value, path, "[{}]"), {}, [], "legacy-checkpoint"
    if isinstance(value, dict) and isinstance(value.get("history"), list):
        extra = {k: v for k, v in value.items() if k != "history"}
        turns = checkpoint_turns(value["history"], path, "history[{}]")
        return turns, {"gemini_checkpoint": extra} if extra else {}, [], "checkpoint"
    if isinstance(value, dict) and "messages" in value:
        replay = SessionReplay(path)
        replay.apply({k: v for k, v in value.items() if k != "messages"}, "metadata")
        replay.set_messages(value["messages"], "messages")
        return replay.turns(), replay.session_metadata(), replay.notes, "session"
    raise GeminiChatError(
        path,
        None,
        'expected {"history": [...]} (a /chat save checkpoint), a bare array of Content, '
        f"or a session object with messages; got {type(value).__name__}.",
    )


def checkpoint_turns(history: Sequence[Any], path: Path, where: str) -> list[Turn]:
    """Validate a checkpoint's ``Content[]`` and return its turns.

    Args:
        history: the ``history`` array (or the legacy bare array).
        path: the file, for errors.
        where: the position format, e.g. ``"history[{}]"``.

    Raises:
        GeminiChatError: an item is not ``{"role": "user"|"model", "parts": [...]}``.
    """
    return [content_turn(item, path, where.format(i)) for i, item in enumerate(history)]


def content_turn(item: Any, path: Path, position: str, record_id: str | None = None) -> Turn:
    """Validate one Gemini ``Content`` and return it as a :class:`Turn`.

    Raises:
        GeminiChatError: it is not ``{"role": "user"|"model", "parts": [...]}``.
    """
    if not isinstance(item, dict):
        raise GeminiChatError(path, position, f"expected a Content object, got {item!r:.60}.")
    if item.get("role") not in ROLES:
        raise GeminiChatError(
            path, position, f"role must be 'user' or 'model', got {item.get('role')!r:.40}."
        )
    parts = item.get("parts", [])
    if not isinstance(parts, list):
        raise GeminiChatError(path, position, "parts must be an array of Part objects.")
    return Turn(item["role"], parts, position, record_id)


# -- session recordings -------------------------------------------------------------------


def read_session_lines(
    lines: Sequence[str], path: Path
) -> tuple[list[Turn], dict[str, Any], list[str]]:
    """Apply a session recording's records in order.

    Args:
        lines: the file's lines.
        path: the file, for errors.

    Returns:
        The turns, the session's metadata and the notes on skipped records.

    Raises:
        GeminiChatError: a line is not JSON or a record has the wrong shape (the error
            names the line).
    """
    replay = SessionReplay(path)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record = _loads(line, path, number)
        replay.apply(record, f"line {number}")
    return replay.turns(), replay.session_metadata(), replay.notes


class SessionReplay:
    """The state of a session recording while its records are applied."""

    def __init__(self, path: Path) -> None:
        """Start with no messages and no metadata.

        Args:
            path: the file, for errors.
        """
        self.path = path
        self.records: dict[str, tuple[dict[str, Any], str]] = {}
        self.metadata: dict[str, Any] = {}
        self.notes: list[str] = []

    def apply(self, record: Any, position: str) -> None:
        """Apply one record (see the module docstring for the shapes).

        Raises:
            GeminiChatError: the record has the wrong shape.
        """
        if not isinstance(record, dict):
            raise GeminiChatError(self.path, position, "expected a JSON object per line.")
        if "$rewindTo" in record:
            self._rewind(record["$rewindTo"], position)
        elif "id" in record:
            self._upsert(record, position)
        elif "$set" in record:
            self._set(record["$set"], position)
        elif "sessionId" in record:
            self.metadata.update(record)
        else:
            keys = ", ".join(sorted(record)[:5])
            self.notes.append(f"{position}: record of unknown kind ({keys}) skipped.")

    def set_messages(self, messages: Any, position: str) -> None:
        """Replace every message, as a ``$set`` with ``messages`` does.

        Raises:
            GeminiChatError: ``messages`` is not an array of message records.
        """
        if not isinstance(messages, list):
            raise GeminiChatError(self.path, position, "messages must be an array.")
        self.records = {}
        for index, record in enumerate(messages):
            self._upsert(record, f"{position} messages[{index}]")

    def _upsert(self, record: Any, position: str) -> None:
        check_message_record(record, self.path, position)
        self.records[record["id"]] = (record, position)

    def _set(self, update: Any, position: str) -> None:
        if not isinstance(update, dict):
            raise GeminiChatError(self.path, position, "$set must hold a JSON object.")
        if "messages" in update:
            self.set_messages(update["messages"], f"{position} $set")
        self.metadata.update({k: v for k, v in update.items() if k != "messages"})

    def _rewind(self, target: Any, position: str) -> None:
        if not isinstance(target, str):
            raise GeminiChatError(self.path, position, "$rewindTo must be a message id.")
        ids = list(self.records)
        if target not in ids:
            self.notes.append(
                f"{position}: $rewindTo names unknown message {target!r:.60}; every earlier "
                "message was removed, as Gemini CLI does."
            )
        cut = ids.index(target) if target in ids else 0
        self.records = {i: self.records[i] for i in ids[:cut]}

    def session_metadata(self) -> dict[str, Any]:
        """The metadata records merged (``gemini_session``) and the last model used."""
        found: dict[str, Any] = {}
        if self.metadata:
            found["gemini_session"] = copy.deepcopy(self.metadata)
        models = [r.get("model") for r, _ in self.records.values() if r.get("type") == "gemini"]
        model = next((m for m in reversed(models) if isinstance(m, str) and m), None)
        if model is not None:
            found["gemini_model"] = model
        return found

    def turns(self) -> list[Turn]:
        """The surviving message records as turns, in file order."""
        turns: list[Turn] = []
        for record, position in self.records.values():
            turns.extend(self._record_turns(record, position))
        return turns

    def _record_turns(self, record: dict[str, Any], position: str) -> list[Turn]:
        record_id = str(record["id"])
        if "role" in record or "parts" in record:
            return [content_turn(record, self.path, position, record_id)]
        kind = record.get("type")
        parts = part_list(record.get("content"), self.path, f"{position} content")
        if kind == "user" and _is_command(parts):
            self.notes.append(f"{position}: slash command {record_id!r} left out.")
            return []
        if kind == "user":
            return [Turn("user", parts, position, record_id)]
        if kind != "gemini":
            self.notes.append(f"{position}: {kind} message {record_id!r} left out.")
            return []
        return _gemini_turns(record, parts, self.path, position)


def check_message_record(record: Any, path: Path, position: str) -> None:
    """Check the shape of a session message record.

    Raises:
        GeminiChatError: no string ``id``, or neither a known ``type`` nor ``role``/``parts``.
    """
    if not isinstance(record, dict) or not isinstance(record.get("id"), str) or not record["id"]:
        raise GeminiChatError(path, position, "a message record needs a non-empty string id.")
    if "role" in record or "parts" in record:
        return
    if record.get("type") not in MESSAGE_TYPES:
        raise GeminiChatError(
            path,
            position,
            f"message type must be one of {', '.join(sorted(MESSAGE_TYPES))}, "
            f"got {record.get('type')!r:.40}.",
        )
    calls = record.get("toolCalls")
    if calls is not None and not (
        isinstance(calls, list)
        and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls)
    ):
        raise GeminiChatError(path, position, "toolCalls must be an array of {name, args...}.")


def part_list(content: Any, path: Path, position: str) -> list[Any]:
    """A ``PartListUnion`` (a string, a Part, or an array of both) as a list of parts.

    Raises:
        GeminiChatError: ``content`` is none of these.
    """
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, dict):
        return [content]
    if isinstance(content, list):
        return [{"text": p} if isinstance(p, str) else p for p in content]
    raise GeminiChatError(path, position, "expected a string, a Part or an array of parts.")


def _is_command(parts: Sequence[Any]) -> bool:
    texts = [p.get("text") for p in parts if isinstance(p, dict)]
    text = "".join(t for t in texts if isinstance(t, str)).strip()
    return text.startswith(("/", "?"))


def _gemini_turns(
    record: Mapping[str, Any], parts: list[Any], path: Path, position: str
) -> list[Turn]:
    record_id = str(record["id"])
    calls = record.get("toolCalls") or []
    present = {
        p["functionCall"].get("id")
        for p in parts
        if isinstance(p, dict) and isinstance(p.get("functionCall"), dict)
    }
    model_parts = list(parts)
    for call in calls:
        if call.get("id") is None or call.get("id") not in present:
            payload = {"name": call["name"], "args": call.get("args") or {}}
            if call.get("id"):
                payload["id"] = call["id"]
            model_parts.append({"functionCall": payload})
    responses: list[Any] = []
    for index, call in enumerate(calls):
        responses.extend(_call_result(call, path, f"{position} toolCalls[{index}].result"))
    turns = [Turn("model", model_parts, position, record_id)]
    if responses:
        turns.append(Turn("user", responses, position, record_id))
    return turns


def _call_result(call: Mapping[str, Any], path: Path, position: str) -> list[Any]:
    result = call.get("result")
    if not result:
        return []
    if isinstance(result, str):
        response: dict[str, Any] = {"name": call["name"], "response": {"output": result}}
        if call.get("id"):
            response["id"] = call["id"]
        return [{"functionResponse": response}]
    return part_list(result, path, position)


def _title(messages: Sequence[Mapping[str, Any]]) -> str | None:
    for message in messages:
        if message["role"] != "user" or message.get(SYNTHETIC_FIELD):
            continue
        content = message["content"]
        texts = (
            [content]
            if isinstance(content, str)
            else [b["text"] for b in content if b["type"] == "text"]
        )
        for text in texts:
            if text.lstrip().startswith("<session_context>"):
                continue
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if lines:
                return lines[0][:_TITLE_CHARS]
    return None


def _model_id(metadata: Mapping[str, Any]) -> str | None:
    model = metadata.get("gemini_model")
    return model if isinstance(model, str) and 0 < len(model) <= 200 else None
