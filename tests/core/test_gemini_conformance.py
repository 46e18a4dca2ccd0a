"""Gemini CLI's ``hardenHistory`` rules that ``tests/core/test_hardening.py`` leaves open.

The oracle is ``reference/gemini-context-management.md`` section 7; each test names the
pass it pins.
"""

from __future__ import annotations

from typing import Any

import pytest

from contextstore import InvalidInputError, harden_history
from contextstore.core.hardening import (
    DEFAULT_CONTINUATION,
    DEFAULT_FINAL_USER_TEXT,
    DEFAULT_LOST_RESPONSE,
    SKIP_SIGNATURE,
)

Turn = dict[str, Any]


def _turn(role: str, *parts: dict[str, Any]) -> Turn:
    return {"role": role, "parts": list(parts)}


def test_only_the_first_call_is_signed_even_when_a_later_one_carries_a_signature() -> None:
    """Pass 2: the *first* functionCall part of a model turn gets the skip signature when
    it has none; later calls are untouched, signed or not."""
    history = [
        _turn("user", {"text": "q"}),
        _turn(
            "model",
            {"functionCall": {"id": "a", "name": "f", "args": {}}},
            {"functionCall": {"id": "b", "name": "g", "args": {}}, "thoughtSignature": "real"},
            {"functionCall": {"id": "c", "name": "h", "args": {}}},
        ),
        _turn(
            "user",
            *(
                {"functionResponse": {"id": i, "name": n, "response": {}}}
                for i, n in (("a", "f"), ("b", "g"), ("c", "h"))
            ),
        ),
    ]
    signatures = [part.get("thoughtSignature") for part in harden_history(history)[1]["parts"]]
    assert signatures == [SKIP_SIGNATURE, "real", None]


def test_a_lost_response_to_a_call_without_an_id_has_no_id() -> None:
    """Pass 2: the placeholder response is ``{name, id (omitted if empty), response:
    {error: lostToolResponse}}``."""
    history = [
        _turn("user", {"text": "q"}),
        _turn("model", {"functionCall": {"name": "f", "args": {}}}),
        _turn("user", {"text": "next"}),
    ]
    assert harden_history(history)[2] == _turn(
        "user",
        {"functionResponse": {"name": "f", "response": {"error": DEFAULT_LOST_RESPONSE}}},
        {"text": "next"},
    )


def test_a_signature_on_a_text_part_is_kept() -> None:
    """Pass 5: ``thoughtSignature`` is kept whenever the key is present, on a text part
    too (Gemini 3 checks the signatures it issued on the turn)."""
    history = [
        _turn("user", {"text": "q"}),
        _turn("model", {"text": "a", "thoughtSignature": "s1"}),
        _turn("user", {"text": "b"}),
    ]
    assert harden_history(history)[1] == _turn("model", {"text": "a", "thoughtSignature": "s1"})


def test_a_lone_model_turn_gets_both_sentinel_turns() -> None:
    """Pass 4: a first model turn gets the continuation turn before it, a last one
    ``Please continue.`` after it; one turn that is both gets both."""
    assert harden_history([_turn("model", {"text": "m"})]) == [
        _turn("user", {"text": DEFAULT_CONTINUATION}),
        _turn("model", {"text": "m"}),
        _turn("user", {"text": DEFAULT_FINAL_USER_TEXT}),
    ]
    assert DEFAULT_FINAL_USER_TEXT == "Please continue."


def test_turns_without_parts_vanish_before_the_role_rules() -> None:
    """Pass 1 drops turns with no or empty parts; a history of nothing else is empty (no
    sentinel turn is invented for it)."""
    assert harden_history([_turn("user"), {"role": "model"}, _turn("model")]) == []


def test_a_thought_is_dropped_with_its_signature_and_the_call_signed() -> None:
    """Pass 0 drops a part whose ``thought`` is truthy, signature and all; the turn's
    first call then has none of its own and gets the skip signature (pass 2)."""
    history = [
        _turn("user", {"text": "q"}),
        _turn(
            "model",
            {"text": "plan", "thought": True, "thoughtSignature": "sig"},
            {"functionCall": {"name": "f", "args": {}}},
        ),
        _turn("user", {"functionResponse": {"name": "f", "response": {"output": "x"}}}),
    ]
    assert harden_history(history)[1] == _turn(
        "model", {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": SKIP_SIGNATURE}
    )


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ({"functionCall": "read"}, "contents[1].parts[0].functionCall must be an object"),
        ({"functionCall": {"args": {}}}, "contents[1].parts[0].functionCall needs a 'name'"),
        ({"functionResponse": None}, "contents[1].parts[0].functionResponse must be an object"),
        (
            {"functionResponse": {"name": 3, "response": {}}},
            "contents[1].parts[0].functionResponse needs a 'name'",
        ),
        (
            {"functionCall": {"name": "f", "args": "{}"}},
            "contents[1].parts[0].functionCall.args must be an object, got '{}'",
        ),
        (
            {"functionResponse": {"name": "f", "response": "ok"}},
            "contents[1].parts[0].functionResponse.response must be an object, got 'ok'",
        ),
        ({"text": None}, "contents[1].parts[0].text must be a string, got None"),
        ({"inlineData": "AA=="}, "contents[1].parts[0].inlineData must be an object"),
        ({"text": "t", "thoughtSignature": 7}, "thoughtSignature must be a string, got 7"),
    ],
)
def test_a_part_whose_payload_the_api_cannot_read_is_refused_by_position(
    part: dict[str, Any], message: str
) -> None:
    """Section 9: a Part carries one payload of a given shape (``functionCall {id?, name,
    args}``, ``text`` a string...). Such a part used to come out as an empty part ``{}``,
    a call with no name, a ``text: None`` or a lone signature, all of which the API
    refuses, while the docstring promised a history the API accepts."""
    history = [_turn("user", {"text": "q"}), _turn("model", part), _turn("user", {"text": "z"})]
    with pytest.raises(InvalidInputError) as refused:
        harden_history(history)
    assert message in str(refused.value)
