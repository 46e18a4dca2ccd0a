"""Repair a Gemini ``contents`` list so the API accepts it ("history hardening").

The Gemini API is strict about the shape of a conversation: turns alternate between
``user`` and ``model``, the request starts and ends with a user turn, and every
``functionCall`` of a model turn is answered, one for one, by a ``functionResponse`` in
the user turn right after it. A history rebuilt from storage can break any of these
rules (a truncation cut, a lost tool result, reasoning parts), so :func:`harden_history`
runs the same passes as Gemini CLI's ``hardenHistory``:

0. strip thought parts;
1. coalesce: move a call out of a user turn (a response out of a model turn) into a
   turn of its own role, drop empty turns, merge consecutive same-role turns;
2. pair calls and responses, adding a placeholder response for a lost result and a
   synthetic call for an orphan response, and give the first call of each model turn a
   thought signature when it has none;
3. order each turn's responses by call order and put them before its other parts;
4. enforce the role constraints (user first, user last);
5. scrub every part down to the fields the API documents.

Unlike Gemini CLI, the function is pure: it deep-copies its input and never changes the
caller's turns or parts. Pairing is one-to-one (a response answers at most one call),
so the call and response counts of a turn pair always match.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.validate import json_copy, plain_contents_only, shown

Content = dict[str, Any]
"""A Gemini ``Content``: ``{"role": "user" | "model", "parts": [Part, ...]}``."""

Part = dict[str, Any]
"""A Gemini ``Part``: one payload (``text``, ``inlineData``, ``functionCall``...)."""

DEFAULT_LOST_RESPONSE = "The tool execution result was lost due to context management truncation."
"""The error text of a placeholder response added for a call whose result is missing."""

DEFAULT_CONTINUATION = "[Continuing from previous AI thoughts...]"
"""The text of the user turn added when a history would otherwise start with the model."""

DEFAULT_FINAL_USER_TEXT = "Please continue."
"""The text of the user turn added when a history would otherwise end with the model."""

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The thought signature Gemini accepts in place of a real one on a function-calling turn."""

USER = "user"
MODEL = "model"
_ROLES = frozenset({USER, MODEL})

PAYLOAD_KEYS = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
)
"""Part keys that carry a payload the API accepts; a part with none of them is dropped."""

_CallKey = tuple[Any, Any]
"""``(id, name)`` of a call or response; a missing id is ``None`` and matches ``None``."""


@plain_contents_only
def harden_history(
    contents: Sequence[Mapping[str, Any]],
    *,
    lost_response: str = DEFAULT_LOST_RESPONSE,
    continuation: str = DEFAULT_CONTINUATION,
    final_user_text: str = DEFAULT_FINAL_USER_TEXT,
) -> list[Content]:
    """Return a copy of ``contents`` that satisfies Gemini's turn and pairing rules.

    Args:
        contents: Gemini ``Content`` dicts (``role`` and ``parts``). Keys other than
            ``role`` and ``parts`` are dropped. Never modified.
        lost_response: The error text answering a call that has no response.
        continuation: The text of the user turn prepended when the first turn is the
            model's.
        final_user_text: The text of the user turn appended when the last turn is the
            model's.

    Returns:
        New ``Content`` dicts: alternating roles, user first and last (unless empty),
        every call answered in the next turn, every part reduced to documented fields.

    Raises:
        InvalidInputError: A turn is not a mapping, its role is not ``user``/``model``,
            or a part's payload has the wrong type (a ``text`` that is not a string, a
            ``functionCall`` that is not an object with a string ``name``...).
    """
    turns = _copy_turns(contents)
    if not turns:
        return []
    turns = _strip_thoughts(turns)
    turns = _coalesce(_split_misplaced(turns))
    turns = _pair_tools(turns, lost_response=lost_response)
    turns = _refine_tool_responses(turns)
    turns = _enforce_role_constraints(
        turns, continuation=continuation, final_user_text=final_user_text
    )
    return _scrub(turns)


def _copy_turns(contents: Sequence[Mapping[str, Any]]) -> list[Content]:
    """Deep-copy the turns, keeping only ``role`` and ``parts`` and checking the role."""
    turns: list[Content] = []
    for position, turn in enumerate(contents):
        if not isinstance(turn, Mapping):
            raise InvalidInputError(
                f"contents[{position}] is a {type(turn).__name__}, not a Content mapping; "
                "pass dicts with 'role' and 'parts'."
            )
        role = turn.get("role")
        if role not in _ROLES:
            raise InvalidInputError(
                f"contents[{position}] has role {role!r}; use 'user' or 'model'."
            )
        raw_parts = turn.get("parts")
        parts = raw_parts if isinstance(raw_parts, list) else []
        for index, part in enumerate(parts):
            if isinstance(part, Mapping) and not part.get("thought"):
                _check_payload(part, f"contents[{position}].parts[{index}]")
        turns.append(
            {"role": role, "parts": [json_copy(p) for p in parts if isinstance(p, Mapping)]}
        )
    return turns


_OBJECT_PAYLOADS = ("inlineData", "fileData", "executableCode", "codeExecutionResult")


def _check_payload(part: Mapping[str, Any], where: str) -> None:
    """Refuse a part whose payload the API cannot read: Gemini's ``Part`` holds ``text`` as
    a string, the other payloads as objects, a ``functionCall`` or ``functionResponse``
    with a string ``name`` (and object ``args`` / ``response``), and a string
    ``thoughtSignature``. Hardening such a part produced an empty part, a call without a
    name or a lone signature, which the API refuses."""

    def refuse(problem: str) -> InvalidInputError:
        return InvalidInputError(f"{where}.{problem}; pass Gemini Part fields of their types.")

    if "text" in part and not isinstance(part["text"], str):
        raise refuse(f"text must be a string, got {shown(part['text'])}")
    for key in _OBJECT_PAYLOADS:
        if key in part and not isinstance(part[key], Mapping):
            raise refuse(f"{key} must be an object, got {shown(part[key])}")
    for key, body in (("functionCall", "args"), ("functionResponse", "response")):
        if key not in part:
            continue
        value = part[key]
        if not isinstance(value, Mapping):
            raise refuse(f"{key} must be an object with a 'name', got {shown(value)}")
        if not isinstance(value.get("name"), str):
            raise refuse(f"{key} needs a 'name' string, got {shown(value.get('name'))}")
        if value.get(body) is not None and not isinstance(value[body], Mapping):
            raise refuse(f"{key}.{body} must be an object, got {shown(value[body])}")
    if "thoughtSignature" in part and not isinstance(part["thoughtSignature"], str):
        raise refuse(f"thoughtSignature must be a string, got {shown(part['thoughtSignature'])}")


def _is_thought(part: Part) -> bool:
    return bool(part.get("thought"))


def _has_payload(part: Part) -> bool:
    return any(key in part for key in PAYLOAD_KEYS)


def _strip_thoughts(turns: Sequence[Content]) -> list[Content]:
    """Pass 0: drop thought parts, and parts that carry no payload the API accepts.

    Dropping payload-less parts here (Gemini CLI only loses them in the final scrub)
    means the later passes never see a turn that the scrub would empty.
    """
    return [
        {
            "role": turn["role"],
            "parts": [p for p in turn["parts"] if not _is_thought(p) and _has_payload(p)],
        }
        for turn in turns
    ]


def _part_role(part: Part, turn_role: str) -> str:
    if "functionCall" in part:
        return MODEL
    if "functionResponse" in part:
        return USER
    return turn_role


def _split_misplaced(turns: Sequence[Content]) -> list[Content]:
    """Move calls out of user turns and responses out of model turns.

    Only the model sends ``functionCall`` and only the user sends ``functionResponse``;
    a part in the wrong role's turn is split off, in place, into a turn of its own role
    (Gemini CLI leaves it, and the API rejects the request).
    """
    split: list[Content] = []
    for turn in turns:
        for part in turn["parts"]:
            role = _part_role(part, turn["role"])
            if split and split[-1]["role"] == role:
                split[-1]["parts"].append(part)
            else:
                split.append({"role": role, "parts": [part]})
    return split


def _coalesce(turns: Iterable[Content]) -> list[Content]:
    """Pass 1: drop turns without parts, then merge consecutive turns of the same role."""
    merged: list[Content] = []
    for turn in turns:
        if not turn["parts"]:
            continue
        if merged and merged[-1]["role"] == turn["role"]:
            merged[-1] = {"role": turn["role"], "parts": [*merged[-1]["parts"], *turn["parts"]]}
        else:
            merged.append({"role": turn["role"], "parts": list(turn["parts"])})
    return merged


def _call_key(part: Part) -> _CallKey | None:
    call = part.get("functionCall")
    if not isinstance(call, Mapping):
        return None
    return (call.get("id") or None, call.get("name"))


def _response_key(part: Part) -> _CallKey | None:
    response = part.get("functionResponse")
    if not isinstance(response, Mapping):
        return None
    return (response.get("id") or None, response.get("name"))


def _call_keys(turn: Content) -> list[_CallKey]:
    return [key for key in map(_call_key, turn["parts"]) if key is not None]


def _response_keys(turn: Content) -> list[_CallKey]:
    return [key for key in map(_response_key, turn["parts"]) if key is not None]


def _match(
    calls: Sequence[_CallKey], responses: Sequence[_CallKey]
) -> tuple[list[_CallKey], list[_CallKey]]:
    """Pair calls with responses one to one; return (unanswered calls, orphan responses)."""
    remaining = list(responses)
    unanswered: list[_CallKey] = []
    for call in calls:
        if call in remaining:
            remaining.remove(call)
        else:
            unanswered.append(call)
    return unanswered, remaining


def _placeholder_response(key: _CallKey, lost_response: str) -> Part:
    call_id, name = key
    response: dict[str, Any] = {"name": name, "response": {"error": lost_response}}
    if call_id:
        response["id"] = call_id
    return {"functionResponse": response}


def _synthetic_call(key: _CallKey) -> Part:
    call_id, name = key
    call: dict[str, Any] = {"name": name, "args": {}}
    if call_id:
        call["id"] = call_id
    return {"functionCall": call}


def _sign_first_call(turn: Content) -> None:
    """Give the turn's first call a signature if it has none (replacing, not editing, it)."""
    parts = turn["parts"]
    for position, part in enumerate(parts):
        if "functionCall" in part:
            if "thoughtSignature" not in part:
                parts[position] = {**part, "thoughtSignature": SKIP_SIGNATURE}
            return


def _answer_calls(turns: list[Content], index: int, lost_response: str) -> None:
    """Give every call of the model turn at ``index`` a response in the next turn."""
    model_turn = turns[index]
    following = turns[index + 1] if index + 1 < len(turns) else None
    responses = _response_keys(following) if following and following["role"] == USER else []
    unanswered, _ = _match(_call_keys(model_turn), responses)
    if not unanswered:
        return
    if following is None or following["role"] != USER:
        following = {"role": USER, "parts": []}
        turns.insert(index + 1, following)
    following["parts"].extend(_placeholder_response(key, lost_response) for key in unanswered)


def _adopt_orphans(turns: list[Content], index: int) -> int:
    """Give every orphan response of the user turn at ``index`` a call in the turn before.

    Returns the index of the user turn afterwards (it moves when a model turn is
    inserted before it).
    """
    user_turn = turns[index]
    previous = turns[index - 1] if index > 0 else None
    calls = _call_keys(previous) if previous and previous["role"] == MODEL else []
    _, orphans = _match(calls, _response_keys(user_turn))
    if not orphans:
        return index
    if previous is None or previous["role"] != MODEL:
        previous = {"role": MODEL, "parts": []}
        turns.insert(index, previous)
        index += 1
    previous["parts"].extend(_synthetic_call(key) for key in orphans)
    # A turn that already had calls was signed when it was visited; this signs only a
    # turn whose first call is one of the synthetic ones.
    _sign_first_call(previous)
    return index


def _pair_tools(turns: Sequence[Content], *, lost_response: str) -> list[Content]:
    """Pass 2: answer every call in the next user turn and give every response a call.

    A call without a response gets ``{"error": lost_response}``; a response without a
    call gets a call with empty ``args`` in the model turn before it (inserted if there
    is none). The first call of every model turn is given :data:`SKIP_SIGNATURE` when it
    has no ``thoughtSignature``.
    """
    working = [{"role": t["role"], "parts": list(t["parts"])} for t in turns]
    index = 0
    while index < len(working):
        turn = working[index]
        if turn["role"] == MODEL:
            _sign_first_call(turn)
            _answer_calls(working, index, lost_response)
        else:
            index = _adopt_orphans(working, index)
        index += 1
    return [turn for turn in working if turn["parts"]]


def _sorted_responses(calls: Sequence[_CallKey], parts: Sequence[Part]) -> list[Part]:
    """Return ``parts`` with responses first, in call order (unknown ids last)."""
    call_ids = [call_id for call_id, _ in calls]
    ranked: list[tuple[int, Part]] = []
    others: list[Part] = []
    for part in parts:
        key = _response_key(part)
        if key is None:
            others.append(part)
        else:
            rank = call_ids.index(key[0]) if key[0] in call_ids else len(call_ids)
            ranked.append((rank, part))
    ranked.sort(key=lambda item: item[0])
    return [*(part for _, part in ranked), *others]


def _refine_tool_responses(turns: Sequence[Content]) -> list[Content]:
    """Pass 3: in a user turn after a calling model turn, put responses first, in call order."""
    refined: list[Content] = []
    for index, turn in enumerate(turns):
        previous = turns[index - 1] if index > 0 else None
        calls = _call_keys(previous) if previous and previous["role"] == MODEL else []
        if turn["role"] == USER and calls:
            turn = {"role": USER, "parts": _sorted_responses(calls, turn["parts"])}
        refined.append(turn)
    return refined


def _enforce_role_constraints(
    turns: Sequence[Content], *, continuation: str, final_user_text: str
) -> list[Content]:
    """Pass 4: make the history start and end with a user turn, merging same-role turns."""
    result = _coalesce(turns)
    if result and result[0]["role"] == MODEL:
        result.insert(0, {"role": USER, "parts": [{"text": continuation}]})
    if result and result[-1]["role"] == MODEL:
        result.append({"role": USER, "parts": [{"text": final_user_text}]})
    return _coalesce(result)


def _scrub_call(call: Mapping[str, Any]) -> dict[str, Any]:
    scrubbed: dict[str, Any] = {"name": call.get("name"), "args": call.get("args") or {}}
    if call.get("id"):
        scrubbed["id"] = call["id"]
    return scrubbed


def _scrub_response(response: Mapping[str, Any]) -> dict[str, Any]:
    scrubbed: dict[str, Any] = {
        "name": response.get("name"),
        "response": response.get("response") or {},
    }
    if response.get("id"):
        scrubbed["id"] = response["id"]
    return scrubbed


def _scrub_part(part: Mapping[str, Any]) -> Part:
    """Rebuild ``part`` from the documented fields only.

    Kept: ``text``, ``inlineData``, ``fileData``, ``executableCode``,
    ``codeExecutionResult``, ``thoughtSignature``, ``functionCall`` (``name``, ``args``,
    ``id``) and ``functionResponse`` (``name``, ``response``, ``id``). Everything else
    (``thought``, ``videoMetadata``, ``functionResponse.parts``, custom keys) is dropped.
    """
    scrubbed: Part = {}
    for key in ("text", "inlineData", "fileData", "executableCode", "codeExecutionResult"):
        if key in part:
            scrubbed[key] = part[key]
    call = part.get("functionCall")
    if isinstance(call, Mapping):
        scrubbed["functionCall"] = _scrub_call(call)
    response = part.get("functionResponse")
    if isinstance(response, Mapping):
        scrubbed["functionResponse"] = _scrub_response(response)
    if "thoughtSignature" in part:
        scrubbed["thoughtSignature"] = part["thoughtSignature"]
    return scrubbed


def _scrub(turns: Sequence[Content]) -> list[Content]:
    """Pass 5: drop thoughts and empty turns, merge same-role turns, whitelist part fields."""
    cleaned = _coalesce(_strip_thoughts(turns))
    return [{"role": t["role"], "parts": [_scrub_part(p) for p in t["parts"]]} for t in cleaned]
