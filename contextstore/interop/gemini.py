"""Gemini CLI chats as plain values: finding them, reading them, and their records as turns.

Gemini CLI keeps, under ``~/.gemini/tmp/<project>/``:

* session recordings, ``chats/session-<time>-<id>.jsonl`` since 0.39 (``.json`` before):
  the JSONL form is a log applied line by line (shapes from Gemini CLI's
  ``chatRecordingService.ts``): a metadata record ``{"sessionId", "projectHash",
  "startTime", ...}`` (a whole legacy record on one line brings its ``messages`` too);
  message records ``{"id", "timestamp", "type", "content", ...}``
  (``type`` ``user``, ``gemini``, ``info``, ``error`` or ``warning``; a ``gemini`` record
  has ``toolCalls``, ``thoughts``, ``tokens``, ``model``); a record whose ``id`` was seen
  before replaces it where it stood (the last copy wins, as Gemini CLI re-appends a record
  when its tokens or tool results arrive); ``{"$set": {...}}`` updates the metadata, and a
  ``messages`` array in it replaces every message; ``{"$rewindTo": id}`` removes that
  message and everything after it (an unknown id removes everything, as Gemini CLI's
  loader does). The legacy ``.json`` form is one ``ConversationRecord`` object.
* ``/chat save <tag>`` checkpoints, ``checkpoint-<tag>.json``: ``{"history": Content[],
  "authType": ...}`` (a bare ``Content[]`` before 0.16). ``/chat share <file>.json`` writes
  a bare ``Content[]`` too.

A damaged file keeps what it can: a JSONL line that is not JSON or not a record is left out
with a note naming the line; a JSON file keeps its complete entries. Records become
``Content`` turns as Gemini CLI's resume does: ``info``/``error``/``warning`` records, empty
user records, slash commands (user text starting with ``/`` or ``?``) and the context Gemini
CLI injects itself (``<session_context>``, ``<hook_context>``) are no model history; a
``gemini`` record gives a model turn (its content plus a ``functionCall`` per tool call not
already in it) and a user turn with the calls' results, unless the ``user`` record after it
carries them (as Gemini CLI records them since about 0.44). Nothing here touches a database.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from contextstore.interop.errors import GeminiChatError
from contextstore.interop.files import (
    BYTE_ORDER_MARK,
    Folder,
    Note,
    check_depth,
    json_kind,
    nonfinite_note,
    surrogate_note,
    without_lone_surrogates,
    without_nonfinite_numbers,
)
from contextstore.interop.gemini_convert import MESSAGE_TYPES, ROLES, Turn
from contextstore.interop.recovery import loads

SESSION: Final = "session"
"""A JSONL session recording."""
SESSION_JSON: Final = "session-json"
"""A legacy whole-file session recording (one ``ConversationRecord``)."""
CHECKPOINT: Final = "checkpoint"
"""A ``/chat save`` checkpoint, ``{"history": [...], ...}``."""
CONTENTS: Final = "contents"
"""A bare ``Content[]``: a legacy ``/chat save`` checkpoint or a ``/chat share`` export."""


@dataclass
class GeminiChat:
    """A Gemini CLI chat file, read.

    Attributes:
        path: the file.
        kind: :data:`SESSION`, :data:`SESSION_JSON`, :data:`CHECKPOINT` or :data:`CONTENTS`.
        records: a session's message records after replay, or a checkpoint's Contents.
        metadata: a session's metadata (every key but ``messages``), or a checkpoint's keys
            beside ``history`` (``authType``).
        notes: what was left out.
    """

    path: Path
    kind: str
    records: list[dict[str, Any]]
    metadata: dict[str, Any] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)

    @property
    def is_session(self) -> bool:
        """True for session recordings (records with ids and timestamps)."""
        return self.kind in (SESSION, SESSION_JSON)


# -- finding chats ------------------------------------------------------------------------


SESSION_FILE_NAME: Final = re.compile(
    r"session-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-[0-9a-f]{8}\.jsonl?", re.IGNORECASE
)
"""The name Gemini CLI gives a session recording (``session-2025-12-24T06-40-c330aea9.json``:
when it started, to the minute, and the start of its session id), by which one is known
wherever it was moved or archived."""


def is_chat_file(path: Path) -> bool:
    """True for the files a Gemini CLI folder holds chats in, and for session recordings
    under their own names anywhere (a folder of archived sessions)."""
    name = path.name
    if "checkpoints" in path.parts[:-1]:
        return False
    if name.startswith("checkpoint-") and name.endswith(".json"):
        return True
    if SESSION_FILE_NAME.fullmatch(name):
        return True
    in_chats = "chats" in path.parts[:-1]
    return in_chats and (
        name.endswith(".jsonl") or (name.startswith("session-") and name.endswith(".json"))
    )


def find_chats(path: Path, folder: Folder) -> list[Path]:
    """The chat files at ``path``: the file itself, or every chat under a folder
    (``chats/``, a project's folder, ``~/.gemini/tmp`` or ``~/.gemini``), sorted by path so
    that a session's legacy ``.json`` comes before the ``.jsonl`` that continues it.

    Raises:
        GeminiChatError: ``path`` does not exist, or is neither a file nor a folder.
        OutsideFolderError: a link under it leads out of it.
    """
    if path.is_file():
        folder.check(path)
        return [path]
    if not path.is_dir():
        reason = (
            "is not a regular file (a device, a pipe or a socket)"
            if path.exists()
            else "does not exist"
        )
        raise GeminiChatError(path, None, f"{reason}; pass a chat file or a folder.")
    in_chats = path.name == "chats"
    found = []
    for candidate in folder.walk(path):
        if is_chat_file(candidate) or (
            in_chats and candidate.parent == path and candidate.suffix in (".json", ".jsonl")
        ):
            found.append(folder.check(candidate))
    return found


def continued_in(path: Path) -> Path | None:
    """The ``.jsonl`` that continues a legacy ``.json`` session, if it sits beside it.

    When Gemini CLI (0.39 and later) resumes a ``session-….json``, it copies the whole
    session into ``session-….jsonl`` and records there from then on, leaving the ``.json``
    as an older copy of the same session.
    """
    if path.suffix != ".json":
        return None
    twin = path.with_suffix(".jsonl")
    return twin if twin.is_file() else None


# -- reading ------------------------------------------------------------------------------


def read_chat(path: Path, folder: Folder) -> GeminiChat:
    """Read a session recording or checkpoint, keeping what a damaged file still holds.

    Raises:
        GeminiChatError: nothing in the file is a chat.
        UnsafeInputError: the file is a link out of the folder, too large or nested too deep.
    """
    notes: list[Note] = []
    if path.suffix.lower() == ".jsonl":
        replay = SessionReplay(path, notes)
        text = folder.read_text(path, notes).removeprefix(BYTE_ORDER_MARK)
        # Lines end at "\n" alone: JSON.stringify leaves U+2028, U+2029 and U+0085 in a
        # string as they are, and str.splitlines() would cut the record there.
        for number, line in enumerate(text.split("\n"), start=1):
            if line.strip():
                replay.line(line, number)
        return GeminiChat(path, SESSION, replay.messages(), replay.metadata, notes)
    value = folder.read_json(path, notes, keep_depth=1)
    if isinstance(value, list):
        return GeminiChat(path, CONTENTS, _contents(value, path, "[{}]", notes), {}, notes)
    if isinstance(value, dict) and isinstance(value.get("history"), list):
        extra = {k: v for k, v in value.items() if k != "history"}
        contents = _contents(value["history"], path, "history[{}]", notes)
        return GeminiChat(path, CHECKPOINT, contents, extra, notes)
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        replay = SessionReplay(path, notes)
        replay.apply({k: v for k, v in value.items() if k != "messages"}, "metadata")
        replay.set_messages(value["messages"], "messages")
        return GeminiChat(path, SESSION_JSON, replay.messages(), replay.metadata, notes)
    raise GeminiChatError(
        path,
        None,
        'is not a Gemini CLI chat: expected {"history": [...]} (a /chat save checkpoint), '
        "an array of Content (/chat share), or a session with messages"
        + (f" ({'; '.join(str(n) for n in notes)})" if notes else f", got {_described(value)}")
        + ".",
    )


def _described(value: Any) -> str:
    """``value`` as the chat-shaped JSON it is not."""
    if isinstance(value, dict):
        wrong = [
            f"{key} is {json_kind(value[key])}" for key in ("history", "messages") if key in value
        ]
        if wrong:
            return f"an object whose {' and '.join(wrong)}, not an array"
        return "an object with neither history nor messages"
    return json_kind(value)


def _contents(values: Sequence[Any], path: Path, where: str, notes: list[Note]) -> list[Any]:
    kept = []
    for index, item in enumerate(values):
        problem = content_problem(item)
        if problem:
            notes.append(Note(str(path), where.format(index), f"{problem}; left out."))
        else:
            kept.append(item)
    return kept


def content_problem(item: Any) -> str | None:
    """Why ``item`` is not a ``{"role": "user"|"model", "parts": [...]}`` Content, or None."""
    if not isinstance(item, dict):
        return f"expected a Content object, got {item!r:.60}"
    if not isinstance(item.get("role"), str) or item["role"] not in ROLES:
        return f"role must be 'user' or 'model', got {item.get('role')!r:.40}"
    if not isinstance(item.get("parts", []), list):
        return "parts must be an array of Part objects"
    return None


class SessionReplay:
    """A session recording's state while its records are applied (see the module docstring)."""

    def __init__(self, path: Path, notes: list[Note]) -> None:
        """Start with no messages and no metadata."""
        self.path = path
        self.notes = notes
        self.records: dict[str, dict[str, Any]] = {}
        self.metadata: dict[str, Any] = {}

    def line(self, text: str, number: int) -> None:
        """Apply one JSONL line; a line that is not JSON is left out with a note."""
        try:
            check_depth(text, self.path, f"line {number}")
            record = loads(text)
        except json.JSONDecodeError as exc:
            self._note(
                f"line {number}",
                f"is not JSON ({exc.msg}, column {exc.colno}); the "
                "line was left out (a write cut short?), the rest was read.",
            )
            return
        record, surrogates = without_lone_surrogates(text, record)
        if surrogates:
            self.notes.append(surrogate_note(self.path, f"line {number}", surrogates))
        record, nonfinite = without_nonfinite_numbers(text, record)
        if nonfinite:
            self.notes.append(nonfinite_note(self.path, f"line {number}", nonfinite))
        self.apply(record, f"line {number}")

    def apply(self, record: Any, position: str) -> None:
        """Apply one record; a record of no known shape is left out with a note."""
        if not isinstance(record, dict):
            self._note(position, "is not a JSON object; left out.")
        elif "$rewindTo" in record:
            self._rewind(record["$rewindTo"], position)
        elif isinstance(record.get("id"), str):
            self._upsert(record, position)
        elif "$set" in record:
            self._set(record["$set"], position)
        elif "sessionId" in record:
            # the metadata line; a whole legacy record on one line brings its messages,
            # which Gemini CLI's loader adds to those read so far
            self.metadata.update({k: v for k, v in record.items() if k != "messages"})
            messages = record.get("messages")
            for index, message in enumerate(messages if isinstance(messages, list) else []):
                self.apply(message, f"{position} messages[{index}]")
        else:
            keys = ", ".join(sorted(record)[:5]) or "no keys"
            self._note(position, f"is a record of no known kind ({keys}); left out.")

    def set_messages(self, messages: Any, position: str) -> None:
        """Replace every message, as a ``$set`` with ``messages`` does."""
        if not isinstance(messages, list):
            self._note(position, "messages is not an array; left out.")
            return
        self.records = {}
        for index, record in enumerate(messages):
            self.apply(record, f"{position}[{index}]")

    def messages(self) -> list[dict[str, Any]]:
        """The surviving message records, in the order they first appeared."""
        return list(self.records.values())

    def _note(self, position: str, reason: str) -> None:
        self.notes.append(Note(str(self.path), position, reason))

    def _upsert(self, record: dict[str, Any], position: str) -> None:
        problem = record_problem(record)
        if problem:
            self._note(position, f"{problem}; left out.")
            return
        self.records[record["id"]] = record

    def _set(self, update: Any, position: str) -> None:
        if not isinstance(update, dict):
            self._note(position, "$set does not hold an object; left out.")
            return
        if "messages" in update:
            self.set_messages(update["messages"], f"{position} $set.messages")
        self.metadata.update({k: v for k, v in update.items() if k != "messages"})

    def _rewind(self, target: Any, position: str) -> None:
        if not isinstance(target, str):
            self._note(position, "$rewindTo is not a message id; left out.")
            return
        ids = list(self.records)
        if target not in ids:
            self._note(
                position,
                f"$rewindTo names unknown message {target!r:.60}; every "
                "earlier message was removed, as Gemini CLI does.",
            )
        cut = ids.index(target) if target in ids else 0
        self.records = {i: self.records[i] for i in ids[:cut]}


def record_problem(record: Mapping[str, Any]) -> str | None:
    """Why a session message record cannot be read, or None."""
    if "role" in record or "parts" in record:
        return content_problem(record)
    if not isinstance(record.get("type"), str) or record["type"] not in MESSAGE_TYPES:
        return (
            f"message type must be one of {', '.join(sorted(MESSAGE_TYPES))}, got "
            f"{record.get('type')!r:.40}"
        )
    calls = record.get("toolCalls")
    if calls is not None and not (
        isinstance(calls, list)
        and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls)
    ):
        return "toolCalls is not an array of {name, args...}"
    if part_list(record.get("content")) is None:
        return "content is not a string, a Part or an array of parts"
    return None


# -- records as turns ---------------------------------------------------------------------


def part_list(content: Any) -> list[Any] | None:
    """A ``PartListUnion`` (a string, a Part, or an array of both) as a list of parts, or
    None when it is none of these."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, dict):
        return [content]
    if isinstance(content, list):
        return [{"text": p} if isinstance(p, str) else p for p in content]
    return None


IGNORED_USER_PREFIXES: Final = ("/", "?", "<session_context>", "<hook_context>")
"""How the text of a user record Gemini CLI's resume leaves out of the model history
starts (after its whitespace): a slash command, a help query, the environment context and
hook context Gemini CLI injects itself (``isIgnoredUserContent`` in its ``sessionUtils``)."""


def is_ignored_user_content(parts: Sequence[Any]) -> bool:
    """True for a user record that is no model history on resume: its text, read as Gemini
    CLI reads it (non-text parts as ``[Image: ...]``-style labels, which never match), is
    empty or starts with one of :data:`IGNORED_USER_PREFIXES`."""
    text = "".join(_part_label(part) for part in parts).strip()
    return not text or text.startswith(IGNORED_USER_PREFIXES)


_PART_LABELS: Final = (
    ("videoMetadata", "[Video Metadata]"),
    ("thought", "[Thought]"),
    ("codeExecutionResult", "[Code Execution Result]"),
    ("executableCode", "[Executable Code]"),
    ("fileData", "[File Data]"),
    ("functionCall", "[Function Call]"),
    ("functionResponse", "[Function Response]"),
    ("inlineData", "[Media]"),
)
"""The parts Gemini CLI reads as a bracketed label rather than as their text, in the order
it checks them; only whether a label comes first matters here, not its exact words."""


def _part_label(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    for key, label in _PART_LABELS:
        if key in part:
            return label
    text = part.get("text")
    return text if isinstance(text, str) else ""


def answered_next(records: Sequence[Mapping[str, Any]], index: int) -> frozenset[str]:
    """The call ids whose results the user record after session record ``index`` carries.

    Gemini CLI (since about 0.44) records the results it sends back as a ``user`` record
    of ``functionResponse`` parts, beside the same results in the ``toolCalls`` of the
    ``gemini`` record before it. The user record is what the model was sent, so those
    calls take their results from it, and the ``gemini`` record gives none for them
    (reading both gave every result twice). ``info``, ``error`` and ``warning`` records
    in between are skipped.
    """
    for record in records[index + 1 :]:
        kind = record.get("type")
        if kind in ("info", "error", "warning"):
            continue
        if kind != "user" or "role" in record or "parts" in record:
            return frozenset()
        parts = part_list(record.get("content")) or []
        if is_ignored_user_content(parts):
            return frozenset()
        return frozenset(
            p["functionResponse"]["id"]
            for p in parts
            if isinstance(p, dict)
            and isinstance(p.get("functionResponse"), dict)
            and isinstance(p["functionResponse"].get("id"), str)
        )
    return frozenset()


def record_turns(
    record: Mapping[str, Any], position: str, answered: Collection[str] = frozenset()
) -> list[Turn]:
    """The model-history turns of one session record (none for info, errors, commands).

    ``answered``: ids of this record's tool calls whose results a later record carries
    (:func:`answered_next`); they give no result here.
    """
    record_id = str(record["id"]).replace("\x00", "\ufffd")  # a message's field holds no NUL
    if "role" in record or "parts" in record:
        return [Turn(record["role"], list(record.get("parts", [])), position, record_id)]
    parts = part_list(record.get("content")) or []
    kind = record.get("type")
    if kind == "user":
        if is_ignored_user_content(parts):
            return []
        return [Turn("user", parts, position, record_id)]
    if kind != "gemini":
        return []
    calls = record.get("toolCalls") or []
    present = {
        p["functionCall"].get("id")
        for p in parts
        if isinstance(p, dict)
        and isinstance(p.get("functionCall"), dict)
        and isinstance(p["functionCall"].get("id"), str)
    }
    model_parts = list(parts)
    for call in calls:
        if not isinstance(call.get("id"), str) or call["id"] not in present:
            payload = {"name": call["name"], "args": copy.deepcopy(call.get("args") or {})}
            if call.get("id"):
                payload["id"] = call["id"]
            model_parts.append({"functionCall": payload})
    responses: list[Any] = []
    for call in calls:
        call_id = call.get("id")
        if not (isinstance(call_id, str) and call_id in answered):  # an id may be any JSON
            responses.extend(_call_result(call))
    turns = [Turn("model", model_parts, position, record_id)]
    if responses:
        turns.append(Turn("user", responses, f"{position} toolCalls", record_id))
    return turns


def _call_result(call: Mapping[str, Any]) -> list[Any]:
    result = call.get("result")
    if not result:
        return []
    if isinstance(result, str):
        response: dict[str, Any] = {"name": call["name"], "response": {"output": result}}
        if call.get("id"):
            response["id"] = call["id"]
        return [{"functionResponse": response}]
    return part_list(result) or []


def content_turn(item: Mapping[str, Any], position: str) -> Turn:
    """A checkpoint's Content as a turn."""
    return Turn(item["role"], list(item.get("parts", [])), position)
