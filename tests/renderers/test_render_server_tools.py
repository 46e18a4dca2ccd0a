"""Server tool blocks in each provider's request: Anthropic gets them verbatim in the
assistant message, with the broken pairs taken out (a call without its result only ends a
final assistant message: a paused turn); OpenAI and Gemini get them as text in their place,
never their encrypted values."""

from __future__ import annotations

from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.server_tools import paired_server_blocks
from contextstore.renderers import anthropic, gemini, openai
from contextstore.renderers.anthropic import conforming, render_message, render_messages
from contextstore.renderers.registry import build_request, validate_provider_payload
from tests.conftest import assistant, text, tool_result, tool_use, user
from tests.renderers.oracles import sdk_problems
from tests.server_tools import (
    ENCRYPTED,
    bash_result,
    code_result,
    code_use,
    container_upload,
    encrypted_code_result,
    error_result,
    every_pair,
    search_result,
    search_use,
)

FORMATS = ("anthropic", "openai", "gemini")


def _history() -> list[dict[str, Any]]:
    return [
        user(container_upload(), "analyse the file, then search"),
        assistant(*every_pair()),
        user("thanks"),
    ]


def test_anthropic_sends_server_blocks_as_stored_and_the_sdk_takes_them() -> None:
    history = _history()
    rendered = render_messages(history)
    assert rendered == [{"role": m["role"], "content": m["content"]} for m in history]
    assert sdk_problems("anthropic", rendered) == []
    assert anthropic.violations(rendered) == []


def test_anthropic_keeps_only_the_fields_the_api_defines() -> None:
    use = {**search_use(), "call_id": "c1", "agent_note": "x"}
    found = {**search_result(), "reasoning_details": [], "caller": {"type": "direct"}}
    (_, sent) = render_messages([user("q"), assistant(use, found)])
    assert sent["content"] == [search_use(), {**search_result(), "caller": {"type": "direct"}}]


def test_a_paused_turn_s_call_is_sent_only_at_the_end_of_the_final_message() -> None:
    paused = [user("q"), assistant("Searching.", search_use())]
    assert render_messages(paused)[-1]["content"][-1] == search_use()
    assert anthropic.violations(render_messages(paused)) == []
    later = [*paused, user("never mind"), assistant("ok")]
    rendered = render_messages(later)
    assert rendered[1]["content"] == [text("Searching.")]
    assert anthropic.violations(rendered) == []
    not_last = [user("q"), assistant(search_use(), "Searching.")]
    assert render_messages(not_last)[-1]["content"] == [text("Searching.")]


def test_the_continuation_of_a_paused_turn_pairs_across_the_merged_messages() -> None:
    history = [
        user("q"),
        assistant("Searching.", search_use()),
        assistant(search_result(), "Found it."),
    ]
    (_, turn) = render_messages(history)
    assert turn["content"] == [text("Searching."), search_use(), search_result(), text("Found it.")]
    assert anthropic.violations([user("q"), turn]) == []


def test_only_the_final_message_s_unanswered_calls_are_a_paused_turn() -> None:
    """In a final turn of two assistant messages, a call nothing answers in the first is
    broken even though only a call follows it: the pause is the last message's alone."""
    first, last = assistant(search_use("srvtoolu_01")), assistant(search_use("srvtoolu_02"))
    kept = paired_server_blocks([user("q"), first, last])
    assert kept == [user("q"), last]


def test_messages_a_pairing_leaves_alone_are_the_same_objects() -> None:
    """Only a message that loses a block is replaced; the rest of its turn is returned as
    given (``paired_server_blocks`` promises this, and the renderers rely on it to skip
    copies)."""
    history = [user("q"), assistant("Looking."), assistant(search_result(), "Found it.")]
    out = paired_server_blocks(history)
    assert out[1] is history[1] and out[0] is history[0]
    assert out[2] is not history[2] and out[2]["content"] == [text("Found it.")]


def test_a_result_whose_call_is_gone_is_dropped_and_an_empty_message_with_it() -> None:
    cut = [user("q"), assistant(search_result(), "Found it."), user("and?")]
    assert render_messages(cut)[1]["content"] == [text("Found it.")]
    only = [user("q"), assistant(search_result()), user("and?")]
    assert render_messages(only) == [{"role": "user", "content": [text("q"), text("and?")]}]


def test_the_checks_report_a_broken_pair() -> None:
    unanswered = [user("q"), assistant(search_use(), "x"), user("y")]
    early = [user("q"), assistant(search_result(), search_use())]
    for payload in (unanswered, early):
        (problem,) = anthropic.violations(payload)
        assert "server tool blocks" in problem


def test_pieces_with_a_broken_pair_are_rendered_whole() -> None:
    whole = [render_message(m) for m in [user("q"), assistant(*every_pair()), user("ok")]]
    assert all(piece is not None for piece in whole)
    assert conforming([p for p in whole if p is not None])
    paused = [render_message(m) for m in [user("q"), assistant("a", search_use())]]
    assert not conforming([p for p in paused if p is not None])


def test_a_prepared_request_is_the_whole_render_turn_after_turn(store: ContextStore) -> None:
    cid = store.create_conversation(id="c").id
    store.append(cid, "user", "q")
    store.append(cid, "assistant", [text("Searching."), search_use()])
    for step in range(3):
        ctx = store.prepare_request(cid)
        assert ctx.payload["messages"] == render_messages(store.render(cid, format=None))
        assert validate_provider_payload("anthropic", ctx.payload) == []
        assert store.request_payload(cid, ctx.request_id) == ctx.payload
        if step == 0:
            assert ctx.payload["messages"][-1]["content"][-1] == search_use()
            store.append(cid, "assistant", [search_result(), text("Found it.")])
        elif step == 1:
            store.append(cid, "user", "thanks")


def _texts(rendered: Any) -> str:
    return repr(rendered)


@pytest.mark.parametrize("format", ["openai", "gemini"])
def test_other_providers_get_text_in_place_and_no_encrypted_value(format: str) -> None:
    history = [
        user(container_upload(), "go"),
        assistant(
            *every_pair()[:-1],
            code_use("srvtoolu_08", "bash_code_execution"),
            error_result("bash_code_execution_tool_result", "srvtoolu_08", "output_file_too_large"),
        ),
        user("ok"),
    ]
    payload = build_request(format, history, model="m")
    assert sdk_problems(format, payload) == []
    assert validate_provider_payload(format, payload) == []
    shown = _texts(payload)
    assert ENCRYPTED not in shown
    for expected in (
        "[Server tool call web_search:",
        "1. Write-Ahead Logging <https://sqlite.org/wal.html> (April 2, 2025)",
        "[Code execution result: return code 0]",
        "[Bash result: return code 2]",
        "No such file or directory",
        "its output is encrypted",
        "[Tool search found: get_weather]",
        "[Bash error: output_file_too_large]",
        "[File uploaded to the code execution container: file_0123]",
        "WAL mode...",
    ):
        assert expected in shown, expected


def test_openai_puts_the_texts_in_block_order_in_the_assistant_content() -> None:
    (_, sent) = openai.render_messages(
        [user("q"), assistant("Let me look.", search_use(), search_result(), "Found.")]
    )
    assert sent["role"] == "assistant"
    lines = sent["content"].split("\n\n")
    assert lines[0] == "Let me look."
    assert lines[1] == '[Server tool call web_search: {"query":"sqlite wal"}]'
    assert lines[2].startswith("[Web search results]\n1. Write-Ahead Logging")
    assert lines[-1] == "Found."


def test_gemini_shows_them_as_model_text_parts() -> None:
    contents = gemini.render_contents([user("q"), assistant(code_use(), code_result(), "done")])
    parts = contents[1]["parts"]
    assert contents[1]["role"] == "model"
    assert parts[0] == {"text": '[Server tool call code_execution: {"code":"print(1)"}]'}
    assert parts[1] == {
        "text": "[Code execution result: return code 0]\nstdout:\n1\nFiles written: file_011"
    }


@pytest.mark.parametrize("format", FORMATS)
def test_every_format_drops_the_same_broken_pairs(format: str) -> None:
    history = [
        user("q"),
        assistant(search_use(), "Searching.", tool_use("t1", "read_file", path="a")),
        user(tool_result("t1")),
        assistant(bash_result("srvtoolu_99"), encrypted_code_result("srvtoolu_98"), "done"),
    ]
    shown = _texts(build_request(format, history, model="m", max_tokens=10))
    assert "web_search" not in shown and "Bash" not in shown and "Code execution" not in shown
    assert "Searching." in shown and "done" in shown


def test_a_paused_call_no_longer_last_is_not_sent_from_the_kept_pieces(
    store: ContextStore,
) -> None:
    cid = store.create_conversation(id="c").id
    store.append(cid, "user", "q")
    store.append(cid, "assistant", [text("Searching."), search_use()])
    assert store.prepare_request(cid).payload["messages"][-1]["content"][-1] == search_use()
    store.append(cid, "user", "never mind")
    ctx = store.prepare_request(cid)
    assert ctx.payload["messages"][1]["content"] == [text("Searching.")]
    assert validate_provider_payload("anthropic", ctx.payload) == []
