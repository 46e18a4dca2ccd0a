"""harden_history: one test per rule of each pass, purity, and properties."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextstore.core.errors import InvalidInputError
from contextstore.core.hardening import (
    DEFAULT_CONTINUATION,
    DEFAULT_LOST_RESPONSE,
    SKIP_SIGNATURE,
    harden_history,
)
from contextstore.renderers.gemini import violations

Turn = dict[str, Any]


def user(*parts: dict[str, Any]) -> Turn:
    return {"role": "user", "parts": list(parts)}


def model(*parts: dict[str, Any]) -> Turn:
    return {"role": "model", "parts": list(parts)}


def txt(value: str) -> dict[str, Any]:
    return {"text": value}


def call(call_id: str | None, name: str = "f", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "args": {}}
    if call_id is not None:
        body["id"] = call_id
    return {"functionCall": body, **extra}


def signed(call_id: str | None, name: str = "f") -> dict[str, Any]:
    return call(call_id, name, thoughtSignature=SKIP_SIGNATURE)


def response(call_id: str | None, name: str = "f", output: str = "ok") -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "response": {"output": output}}
    if call_id is not None:
        body["id"] = call_id
    return {"functionResponse": body}


def lost(call_id: str | None, name: str = "f", text: str = DEFAULT_LOST_RESPONSE) -> Turn:
    body: dict[str, Any] = {"name": name, "response": {"error": text}}
    if call_id is not None:
        body["id"] = call_id
    return {"functionResponse": body}


# Pass 0 and 1: thoughts, empty turns, same-role neighbours.


def test_empty_history_stays_empty() -> None:
    assert harden_history([]) == []


def test_thought_parts_are_stripped() -> None:
    history = [user(txt("q")), model({"text": "musing", "thought": True}, txt("a")), user(txt("b"))]
    assert harden_history(history) == [user(txt("q")), model(txt("a")), user(txt("b"))]


def test_turns_left_empty_are_dropped_and_neighbours_merged() -> None:
    history = [user(txt("a")), model({"text": "only a thought", "thought": True}), user(txt("b"))]
    assert harden_history(history) == [user(txt("a"), txt("b"))]


def test_consecutive_same_role_turns_are_merged() -> None:
    history = [user(txt("a")), user(txt("b")), model(txt("c")), model(txt("d")), user(txt("e"))]
    assert harden_history(history) == [
        user(txt("a"), txt("b")),
        model(txt("c"), txt("d")),
        user(txt("e")),
    ]


# Pass 2: pairing and signatures.


def test_first_call_of_a_model_turn_gets_the_skip_signature() -> None:
    history = [user(txt("q")), model(call("a"), call("b")), user(response("a"), response("b"))]
    assert harden_history(history)[1] == model(signed("a"), call("b"))


def test_an_existing_signature_is_kept() -> None:
    history = [user(txt("q")), model(call("a", thoughtSignature="real")), user(response("a"))]
    assert harden_history(history)[1] == model(call("a", thoughtSignature="real"))


def test_missing_response_is_added_to_the_next_user_turn() -> None:
    history = [user(txt("q")), model(call("a"), call("b")), user(response("a"), txt("more"))]
    assert harden_history(history)[2] == user(response("a"), lost("b"), txt("more"))


def test_missing_response_gets_a_new_user_turn_before_the_next_model_turn() -> None:
    history = [user(txt("q")), model(call("a")), model(txt("later")), user(txt("end"))]
    # The two model turns merge first, so the call is answered after the merged turn.
    assert harden_history(history) == [
        user(txt("q")),
        model(signed("a"), txt("later")),
        user(lost("a"), txt("end")),
    ]


def test_missing_response_at_the_end_gets_a_new_user_turn() -> None:
    history = [user(txt("q")), model(call("a", name="read"))]
    assert harden_history(history) == [
        user(txt("q")),
        model(signed("a", name="read")),
        user(lost("a", name="read")),
    ]


def test_lost_response_text_can_be_replaced() -> None:
    history = [user(txt("q")), model(call("a"))]
    assert harden_history(history, lost_response="gone")[2] == user(lost("a", text="gone"))


def test_response_must_match_name_as_well_as_id() -> None:
    history = [user(txt("q")), model(call("a", name="f")), user(response("a", name="g"))]
    hardened = harden_history(history)
    assert hardened[1] == model(signed("a", name="f"), call("a", name="g"))
    assert hardened[2] == user(response("a", name="g"), lost("a", name="f"))


def test_calls_and_responses_without_ids_pair_with_each_other() -> None:
    history = [user(txt("q")), model(call(None)), user(response(None))]
    assert harden_history(history) == [user(txt("q")), model(signed(None)), user(response(None))]


def test_pairing_is_one_to_one() -> None:
    history = [user(txt("q")), model(call("a"), call("a")), user(response("a"))]
    hardened = harden_history(history)
    assert hardened[2] == user(response("a"), lost("a"))
    assert violations(hardened) == []


def test_orphan_response_gets_a_call_in_the_previous_model_turn() -> None:
    history = [user(txt("q")), model(call("a")), user(response("a"), response("x"))]
    # The model turn already had a signed call, so the synthetic one is not signed.
    assert harden_history(history)[1] == model(signed("a"), call("x"))


def test_orphan_call_is_signed_when_the_previous_turn_had_no_calls() -> None:
    history = [user(txt("q")), model(txt("thinking aloud")), user(response("x"))]
    assert harden_history(history)[1] == model(txt("thinking aloud"), signed("x"))


def test_orphan_response_in_the_first_turn_gets_a_new_model_turn() -> None:
    history = [user(response("x"), txt("hi"))]
    assert harden_history(history) == [
        user(txt(DEFAULT_CONTINUATION)),
        model(signed("x")),
        user(response("x"), txt("hi")),
    ]


# Pass 3: order of responses.


def test_responses_are_sorted_by_call_order_and_hoisted() -> None:
    history = [
        user(txt("q")),
        model(call("a"), call("b"), call("c")),
        user(txt("note"), response("c"), response("a"), response("b")),
    ]
    assert harden_history(history)[2] == user(
        response("a"), response("b"), response("c"), txt("note")
    )


def test_responses_to_unknown_ids_go_last() -> None:
    history = [user(txt("q")), model(call("a")), user(response("zz"), txt("t"), response("a"))]
    hardened = harden_history(history)
    assert hardened[2] == user(response("a"), response("zz"), txt("t"))


# Pass 4: role constraints.


def test_history_starting_with_the_model_gets_a_continuation_turn() -> None:
    history = [model(txt("a")), user(txt("b"))]
    assert harden_history(history) == [
        user(txt(DEFAULT_CONTINUATION)),
        model(txt("a")),
        user(txt("b")),
    ]


def test_continuation_text_can_be_replaced() -> None:
    assert harden_history([model(txt("a")), user(txt("b"))], continuation="...")[0] == user(
        txt("...")
    )


def test_history_ending_with_the_model_gets_a_final_user_turn() -> None:
    assert harden_history([user(txt("a")), model(txt("b"))])[-1] == user(txt("Please continue."))


def test_final_user_text_can_be_replaced() -> None:
    hardened = harden_history([user(txt("a")), model(txt("b"))], final_user_text="Go on.")
    assert hardened[-1] == user(txt("Go on."))


# Pass 5: scrub.


def test_parts_are_reduced_to_documented_fields() -> None:
    history = [
        {
            "role": "user",
            "id": "turn-1",
            "parts": [
                {"text": "q", "videoMetadata": {"fps": 1}, "callIndex": 3},
                {"inlineData": {"mimeType": "image/png", "data": "AA"}},
                {"fileData": {"mimeType": "image/png", "fileUri": "gs://b/x.png"}},
            ],
        },
        model(
            {"executableCode": {"language": "PYTHON", "code": "1"}},
            {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}},
            {
                "functionCall": {"id": "a", "name": "f", "args": {"k": 1}, "extra": True},
                "thoughtSignature": "sig",
            },
        ),
        user(
            {
                "functionResponse": {
                    "id": "a",
                    "name": "f",
                    "response": {"output": "x"},
                    "parts": [{"inlineData": {}}],
                    "willContinue": False,
                    "scheduling": "SILENT",
                }
            }
        ),
    ]
    assert harden_history(history) == [
        user(
            txt("q"),
            {"inlineData": {"mimeType": "image/png", "data": "AA"}},
            {"fileData": {"mimeType": "image/png", "fileUri": "gs://b/x.png"}},
        ),
        model(
            {"executableCode": {"language": "PYTHON", "code": "1"}},
            {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}},
            {"functionCall": {"name": "f", "args": {"k": 1}, "id": "a"}, "thoughtSignature": "sig"},
        ),
        user(response("a", output="x")),
    ]


def test_parts_without_a_payload_are_dropped() -> None:
    history = [user(txt("q"), {"videoMetadata": {"fps": 1}}, {"callIndex": 1})]
    assert harden_history(history) == [user(txt("q"))]


# Input validation and purity.


@pytest.mark.parametrize("bad", [[{"role": "assistant", "parts": [txt("x")]}], ["text"]])
def test_malformed_turns_are_refused(bad: list[Any]) -> None:
    with pytest.raises(InvalidInputError):
        harden_history(bad)


def test_input_is_never_mutated_or_shared() -> None:
    history = [
        model(call("a"), {"text": "t", "thought": True}),
        user(response("x"), txt("q")),
        model(call("b")),
    ]
    before = copy.deepcopy(history)
    hardened = harden_history(history)
    assert history == before
    ids_in = {id(obj) for turn in history for obj in (turn, turn["parts"], *turn["parts"])}
    ids_out = {id(obj) for turn in hardened for obj in (turn, turn["parts"], *turn["parts"])}
    assert not ids_in & ids_out
    hardened[0]["parts"][0]["text"] = "changed"
    assert history == before


# Properties over arbitrary (not necessarily paired) histories.

_IDS = st.sampled_from(["a", "b", "c", None])
_NAMES = st.sampled_from(["f", "g"])
_PARTS = st.one_of(
    st.builds(txt, st.sampled_from(["x", "y"])),
    st.builds(lambda t: {"text": t, "thought": True}, st.just("thought")),
    st.builds(call, _IDS, _NAMES),
    st.builds(response, _IDS, _NAMES),
    st.just({"videoMetadata": {}}),
)
_TURNS = st.lists(
    st.builds(
        lambda role, parts: {"role": role, "parts": parts},
        st.sampled_from(["user", "model"]),
        st.lists(_PARTS, max_size=4),
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(_TURNS)
def test_hardened_history_always_satisfies_the_api_rules(history: list[Turn]) -> None:
    hardened = harden_history(history)
    assert violations(hardened) == []


@settings(max_examples=300, deadline=None)
@given(_TURNS)
def test_hardening_is_idempotent(history: list[Turn]) -> None:
    once = harden_history(history)
    assert harden_history(once) == once


def test_calls_and_responses_in_the_wrong_role_are_split_off() -> None:
    history = [user(txt("q"), call("a")), model(txt("t"), response("a"))]
    # The split-off call joins the model turn that follows it.
    assert harden_history(history) == [
        user(txt("q")),
        model(signed("a"), txt("t")),
        user(response("a")),
    ]
