"""Converting Gemini ``Content`` turns to Anthropic messages; pure, no I/O.

* role ``user`` -> ``user``, ``model`` -> ``assistant``;
* ``text`` -> a text block; ``thought: true`` parts and blank text are dropped;
* ``inlineData``/``fileData`` -> an ``image`` (``image/*``) or ``document``
  (``application/pdf``) block with a base64 or URL source; other MIME types -> a text note;
* ``functionCall`` -> ``tool_use`` (without an id: ``gemini_call_<turn>_<part>``);
* ``functionResponse`` -> ``tool_result`` for its id when a call of the previous model turn
  has it, else the first unanswered call of the same name in that turn, else its own id
  (``gemini_response_<turn>_<part>`` when it has none); the content
  is ``response.output`` when it is a string, else the response as JSON; an ``error``
  response is ``is_error``; images in ``functionResponse.parts`` join the content;
* ``executableCode`` -> fenced code, ``codeExecutionResult`` -> ``Output:`` text;
* a part's ``thoughtSignature`` stays on its block (and is sent back to Gemini).

Consecutive same-role turns are merged unless they come from different session records
(each record keeps its own messages, so its time holds and a later record never rewrites
an earlier message); in a user message the ``tool_result`` blocks come first; a chat that
starts with the model gets Gemini CLI's continuation text as its first user message.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from contextstore.core.content import normalize_message_dict
from contextstore.core.errors import InvalidInputError
from contextstore.core.hardening import DEFAULT_CONTINUATION, PAYLOAD_KEYS
from contextstore.core.overlays import Block
from contextstore.interop.errors import GeminiChatError

Content = dict[str, Any]

ROLES: Final = {"user": "user", "model": "assistant"}
MESSAGE_TYPES: Final = frozenset({"user", "gemini", "info", "error", "warning"})
SIGNATURE_FIELD: Final = "thoughtSignature"
IDS_FIELD: Final = "gemini_ids"
"""Message field listing the session record ids a message was built from."""
SYNTHETIC_FIELD: Final = "gemini_synthetic"
"""Message field marking the user message added before a chat that starts with the model."""


@dataclass(frozen=True)
class Turn:
    """One Gemini ``Content`` and where it came from."""

    role: str
    parts: list[Any]
    position: str
    record_id: str | None = None
    refused: str | None = None
    """Why the turn makes no message the store takes (its parts are then left unread): it
    becomes a message of its own, listed in :attr:`Converted.refused`."""


@dataclass
class _Pairing:
    """The calls of the latest model turn: every id, and those no response has answered
    yet."""

    pending: list[tuple[str, str]] = field(default_factory=list)
    called: set[str] = field(default_factory=set)

    def start_turn(self) -> None:
        """A model turn begins: the calls of the one before can no longer be answered."""
        self.pending = []
        self.called = set()

    def call(self, call_id: str, name: str) -> None:
        self.pending.append((call_id, name))
        self.called.add(call_id)

    def answer(self, call_id: str) -> None:
        self.pending = [(i, n) for i, n in self.pending if i != call_id]

    def answer_by_name(self, name: str) -> str | None:
        for call_id, call_name in self.pending:
            if call_name == name:
                self.answer(call_id)
                return call_id
        return None


@dataclass(frozen=True)
class Converted:
    """Turns converted to Anthropic messages.

    Attributes:
        messages: the messages (merged, each valid for the store).
        first_turns: for each message, the index of the first turn it holds (-1 for the
            continuation message put before a chat that starts with the model).
        notes: what was left out or approximated.
        refused: the store's words for each message it refuses (by index), which the
            importer keeps as a stand-in.
    """

    messages: list[dict[str, Any]]
    first_turns: list[int]
    notes: list[str]
    refused: dict[int, str] = field(default_factory=dict)


def turns_to_messages(turns: Sequence[Turn], path: Path) -> Converted:
    """Convert Gemini turns to Anthropic messages (see the module docstring for the rules);
    a message the store refuses is listed in :attr:`Converted.refused`.

    Raises:
        GeminiChatError: a part is malformed or sits in the wrong role's turn.
    """
    notes: list[str] = []
    pairing = _Pairing()
    converted: list[tuple[int, Turn, list[Block]]] = []
    for index, turn in enumerate(turns):
        if turn.refused is not None:
            if turn.role == "model":
                pairing.start_turn()  # its calls are unknown
            converted.append((index, turn, []))
            continue
        blocks = _turn_blocks(turn, index, pairing, path, notes)
        if blocks:
            converted.append((index, turn, blocks))
    messages, first_turns, refused = _merge(converted)
    if messages and messages[0]["role"] == "assistant":
        notes.append("the chat starts with a model turn; a continuation user message was added.")
        messages.insert(0, {"role": "user", "content": DEFAULT_CONTINUATION, SYNTHETIC_FIELD: True})
        first_turns.insert(0, -1)
        refused = {index + 1: reason for index, reason in refused.items()}
    for index, message in enumerate(messages):
        if index in refused:
            continue
        try:
            normalize_message_dict(message)
        except InvalidInputError as exc:
            refused[index] = str(exc)
    return Converted(messages, first_turns, notes, refused)


def check_turn(turn: Turn, path: Path) -> None:
    """Convert one turn alone, so a malformed part is found before the whole chat is.

    Raises:
        GeminiChatError: a part of the turn is malformed or in the wrong role's turn, or
            its blocks make no message the store takes (two calls with one id, an id too
            long).
    """
    blocks = _turn_blocks(turn, 0, _Pairing(), path, [])
    if not blocks:
        return
    try:
        normalize_message_dict({"role": ROLES[turn.role], "content": blocks})
    except InvalidInputError as exc:
        raise GeminiChatError(path, turn.position, str(exc)) from exc


def _turn_blocks(
    turn: Turn, index: int, pairing: _Pairing, path: Path, notes: list[str]
) -> list[Block]:
    if turn.role == "model":
        pairing.start_turn()
    else:
        for part in turn.parts:
            response = part.get("functionResponse") if isinstance(part, dict) else None
            if isinstance(response, dict) and isinstance(response.get("id"), str):
                pairing.answer(response["id"])
    blocks: list[Block] = []
    for part_no, part in enumerate(turn.parts):
        where = f"{turn.position}.parts[{part_no}]"
        blocks.extend(_part_blocks(part, turn, (index, part_no), pairing, path, where, notes))
    if turn.role == "user":
        results = [b for b in blocks if b["type"] == "tool_result"]
        blocks = results + [b for b in blocks if b["type"] != "tool_result"]
    return blocks


def _part_blocks(
    part: Any,
    turn: Turn,
    address: tuple[int, int],
    pairing: _Pairing,
    path: Path,
    where: str,
    notes: list[str],
) -> list[Block]:
    if not isinstance(part, dict):
        raise GeminiChatError(path, where, f"expected a Part object, got {part!r:.60}.")
    if part.get("thought"):
        return []
    kind = next((key for key in PAYLOAD_KEYS if key in part), None)
    if kind is None:
        keys = ", ".join(sorted(part)[:5]) or "nothing"
        notes.append(f"{where}: part with {keys} has no counterpart; left out.")
        return []
    block: Block | None
    if kind == "functionCall":
        _expect_role(turn, "model", kind, path, where)
        block = tool_use_block(part[kind], address, path, where)
        pairing.call(block["id"], block["name"])
    elif kind == "functionResponse":
        _expect_role(turn, "user", kind, path, where)
        block = tool_result_block(part[kind], address, pairing, path, where)
    else:
        block = _content_block(kind, part[kind], path, where, notes)
    signature = part.get(SIGNATURE_FIELD)
    if block is None:
        if signature:
            notes.append(f"{where}: a thought signature on an empty text part was left out.")
        return []
    if isinstance(signature, str) and signature:
        block[SIGNATURE_FIELD] = signature
    return [block]


def _expect_role(turn: Turn, role: str, kind: str, path: Path, where: str) -> None:
    if turn.role != role:
        raise GeminiChatError(path, where, f"a {kind} part belongs in a {role} turn.")


def _content_block(kind: str, value: Any, path: Path, where: str, notes: list[str]) -> Block | None:
    if kind == "text":
        if not isinstance(value, str):
            raise GeminiChatError(path, where, "text must be a string.")
        return {"type": "text", "text": value} if value.strip() else None
    if kind in ("inlineData", "fileData"):
        return media_block(kind, value, path, where, notes)
    if kind == "executableCode":
        return {"type": "text", "text": code_text(_expect_dict(value, path, where, kind))}
    return {"type": "text", "text": output_text(_expect_dict(value, path, where, kind))}


def _expect_dict(value: Any, path: Path, where: str, kind: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise GeminiChatError(path, where, f"{kind} must be an object.")
    return value


def _string_field(value: Mapping[str, Any], key: str, path: Path, where: str) -> str:
    found = value.get(key)
    if not isinstance(found, str) or not found:
        raise GeminiChatError(path, where, f"{key} must be a non-empty string.")
    return found


def media_block(kind: str, value: Any, path: Path, where: str, notes: list[str]) -> Block:
    """An ``inlineData`` or ``fileData`` part as an image, document or text-note block.

    Raises:
        GeminiChatError: ``mimeType``, ``data`` or ``fileUri`` is missing or not a string.
    """
    value = _expect_dict(value, path, where, kind)
    mime = _string_field(value, "mimeType", path, where)
    if kind == "inlineData":
        source = {"type": "base64", "media_type": mime, "data": value.get("data")}
        if not isinstance(source["data"], str):
            raise GeminiChatError(path, where, "inlineData.data must be a base64 string.")
        described = f"{len(source['data']):,} base64 characters"
    else:
        url = _string_field(value, "fileUri", path, where)
        source = {"type": "url", "url": url}
        described = url
    if mime.startswith("image/"):
        return {"type": "image", "source": source}
    if mime == "application/pdf":
        return {"type": "document", "source": source}
    notes.append(f"{where}: {kind} of type {mime} has no block type; kept as a text note.")
    return {"type": "text", "text": f"[{kind} omitted: {mime}, {described}]"}


def code_text(value: Mapping[str, Any]) -> str:
    """An ``executableCode`` part as a fenced code block."""
    language = str(value.get("language") or "")
    language = "" if language.upper() == "LANGUAGE_UNSPECIFIED" else language.lower()
    return f"```{language}\n{value.get('code', '')}\n```"


def output_text(value: Mapping[str, Any]) -> str:
    """A ``codeExecutionResult`` part as ``Output:`` text (the outcome when not OK)."""
    outcome = str(value.get("outcome") or "OUTCOME_OK")
    label = "Output:" if outcome == "OUTCOME_OK" else f"Output ({outcome}):"
    return f"{label}\n{value.get('output', '')}"


def tool_use_block(value: Any, address: tuple[int, int], path: Path, where: str) -> Block:
    """A ``functionCall`` as a ``tool_use`` block (a synthetic id when it has none).

    Raises:
        GeminiChatError: no name, ``args`` not an object, or an id that is not a string.
    """
    call = _expect_dict(value, path, where, "functionCall")
    name = _string_field(call, "name", path, where)
    args = call.get("args", {})
    if not isinstance(args, dict):
        raise GeminiChatError(path, where, "functionCall.args must be an object.")
    call_id = call.get("id") or f"gemini_call_{address[0]}_{address[1]}"
    if not isinstance(call_id, str):
        raise GeminiChatError(path, where, "functionCall.id must be a string.")
    return {"type": "tool_use", "id": call_id, "name": name, "input": copy.deepcopy(args)}


def tool_result_block(
    value: Any, address: tuple[int, int], pairing: _Pairing, path: Path, where: str
) -> Block:
    """A ``functionResponse`` as a ``tool_result`` block, paired as the docstring says.

    Raises:
        GeminiChatError: no name, ``response`` not an object, or a bad id.
    """
    response = _expect_dict(value, path, where, "functionResponse")
    name = _string_field(response, "name", path, where)
    body = response.get("response", {})
    if not isinstance(body, dict):
        raise GeminiChatError(path, where, "functionResponse.response must be an object.")
    call_id = response.get("id")
    if call_id is not None and (not isinstance(call_id, str) or not call_id):
        raise GeminiChatError(path, where, "functionResponse.id must be a non-empty string.")
    if call_id is None:
        call_id = pairing.answer_by_name(name) or f"gemini_response_{address[0]}_{address[1]}"
    elif call_id not in pairing.called:
        # A shared chat (/chat share) keeps the calls without ids and the responses with
        # ids of their own, which no call has: such a response answers by name too.
        call_id = pairing.answer_by_name(name) or call_id
    block: Block = {"type": "tool_result", "tool_use_id": call_id}
    block["content"] = _result_content(body, response.get("parts"), path, where)
    if "error" in body:
        block["is_error"] = True
    return block


def _result_content(
    body: Mapping[str, Any], parts: Any, path: Path, where: str
) -> str | list[Block]:
    output = body.get("output")
    if isinstance(output, str):
        text = output
    elif "error" in body and isinstance(body["error"], str) and len(body) == 1:
        text = body["error"]
    else:
        text = json.dumps(body, ensure_ascii=False)
    images = [
        media_block("inlineData", p["inlineData"], path, f"{where}.parts[{i}]", [])
        for i, p in enumerate(parts if isinstance(parts, list) else [])
        if isinstance(p, dict) and isinstance(p.get("inlineData"), dict)
    ]
    images = [b for b in images if b["type"] in ("image", "document")]
    if not images:
        return text
    return [{"type": "text", "text": text or "(no output)"}, *images]


def _merge(
    converted: Sequence[tuple[int, Turn, list[Block]]],
) -> tuple[list[dict[str, Any]], list[int], dict[int, str]]:
    messages: list[dict[str, Any]] = []
    first_turns: list[int] = []
    refused: dict[int, str] = {}
    for index, turn, blocks in converted:
        role = ROLES[turn.role]
        ids = [turn.record_id] if turn.record_id else []
        # Turns of different session records stay apart, so each message keeps its record's
        # time and a record appended later never rewrites an earlier message. A refused
        # turn is a message of its own (no turn joins it).
        previous_ids = messages[-1].get(IDS_FIELD, []) if messages else []
        apart = bool(ids) and bool(previous_ids) and ids[0] not in previous_ids
        apart = apart or turn.refused is not None or len(messages) - 1 in refused
        if turn.refused is not None:
            refused[len(messages)] = turn.refused
        if messages and messages[-1]["role"] == role and not apart:
            apart = _share_a_call_id(messages[-1]["content"], blocks)
            # The environment context Gemini CLI opens a chat with stays a message of its
            # own: merged into the first prompt, a session export wrote one record that
            # Gemini CLI's resume drops whole as context, the prompt with it.
            apart = apart or (len(messages) == 1 and _is_context(messages[0]["content"]))
        if messages and messages[-1]["role"] == role and not apart:
            previous = messages[-1]
            previous["content"] = _ordered(role, [*previous["content"], *blocks])
            merged = [*previous.get(IDS_FIELD, []), *ids]
            if merged:
                previous[IDS_FIELD] = list(dict.fromkeys(merged))
            continue
        message: dict[str, Any] = {"role": role, "content": list(blocks)}
        if ids:
            message[IDS_FIELD] = ids
        messages.append(message)
        first_turns.append(index)
    return messages, first_turns, refused


CONTEXT_OPENINGS: Final = ("<session_context>", "This is the Gemini CLI")
"""How the environment context Gemini CLI writes as a chat's first Content begins (the tag,
or the untagged words of versions before it)."""


def _is_context(blocks: Sequence[Block]) -> bool:
    """True for the blocks of Gemini CLI's environment context: text alone, opening with
    its tag (or the untagged words of versions before the tag)."""
    return bool(blocks) and all(
        b["type"] == "text" and b["text"].lstrip().startswith(CONTEXT_OPENINGS) for b in blocks
    )


def _share_a_call_id(earlier: Sequence[Block], later: Sequence[Block]) -> bool:
    """True when ``later`` repeats a call id of ``earlier``: one message cannot hold two
    calls with one id, so the turns stay two messages."""
    ids = {b.get("id") for b in earlier if b["type"] == "tool_use"}
    return any(b["type"] == "tool_use" and b.get("id") in ids for b in later)


def _ordered(role: str, blocks: list[Block]) -> list[Block]:
    if role != "user":
        return blocks
    results = [b for b in blocks if b["type"] == "tool_result"]
    return results + [b for b in blocks if b["type"] != "tool_result"]
