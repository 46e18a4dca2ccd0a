"""One-line summaries of blocks and messages in the CLI's conversation tables."""

from __future__ import annotations

import json

import pytest

from contextstore.cli.output import SUMMARY_WIDTH, summarise_block, summarise_message


@pytest.mark.parametrize(("length", "clipped"), [(60, False), (61, True)])
def test_a_text_is_clipped_past_60_characters_with_an_ellipsis(length: int, clipped: bool) -> None:
    text = "x" * length
    shown = summarise_block({"type": "text", "text": text})
    assert shown == f"text: {'x' * 60}..." if clipped else f"text: {text}"


def test_a_text_shows_on_one_line() -> None:
    assert summarise_block({"type": "text", "text": "a\nb"}) == "text: a b"


def test_long_tool_arguments_end_with_an_ellipsis_so_they_do_not_look_whole() -> None:
    arguments = {"path": "golden_tests/NetworkTests.cs", "task_progress": "- [x] read"}
    shown = summarise_block(
        {"type": "tool_use", "id": "t1", "name": "read_file", "input": arguments}
    )
    whole = json.dumps(arguments)
    assert shown == f"tool_use read_file({whole[:40]}...) id=t1"


def test_short_tool_arguments_are_shown_whole_and_unescaped() -> None:
    shown = summarise_block(
        {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "é.md"}}
    )
    assert shown == 'tool_use read_file({"path": "é.md"}) id=t1'


@pytest.mark.parametrize(("length", "clipped"), [(50, False), (51, True)])
def test_a_tool_result_is_clipped_past_50_characters(length: int, clipped: bool) -> None:
    block = {"type": "tool_result", "tool_use_id": "t1", "content": "y" * length, "is_error": True}
    shown = summarise_block(block)
    assert shown == "tool_result error for t1: " + ("y" * 50 + "..." if clipped else "y" * length)


def test_a_message_summary_is_cut_to_the_table_width() -> None:
    message = {"role": "user", "content": [{"type": "text", "text": "z" * 50}] * 4}
    summary = summarise_message(message)
    assert len(summary) == SUMMARY_WIDTH
    assert summary.endswith("...")
