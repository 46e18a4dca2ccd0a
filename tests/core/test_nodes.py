"""Typing blocks as nodes: each Cline and Gemini CLI block shape lands on its type and file."""

from __future__ import annotations

from typing import Any

import pytest

from contextstore.core.content import normalize_message_dict
from contextstore.core.errors import IntegrityViolationError, NodeInvariantError
from contextstore.core.nodes import (
    ASSISTANT_TEXT,
    DOCUMENT,
    FILE_CONTENT,
    IMAGE,
    MEMORY_SUMMARY,
    PREFIX_CHARS,
    SYSTEM_PROMPT,
    THINKING,
    TOOL_CALL,
    TOOL_DEFINITIONS,
    TOOL_OUTPUT,
    USER_PROMPT,
    CallInfo,
    NodeKind,
    NodeRow,
    batch_calls,
    call_info,
    check_nodes,
    count_message,
    node_id,
    prompt_nodes,
    type_block,
    type_message,
    typed_nodes,
)
from contextstore.core.notices import TRUNCATION_NOTICE
from contextstore.core.tokens import MESSAGE_OVERHEAD_TOKENS


class _Chars:
    """A token counter that counts characters (deterministic and fast)."""

    name = "chars"

    def count(self, text: str) -> int:
        return len(text)


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _result(use_id: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": content, **extra}


def test_node_ids_are_message_and_block() -> None:
    assert node_id(12, 0) == "m12.b0"


@pytest.mark.parametrize(
    ("role", "block", "expected"),
    [
        ("user", _text("<task>fix the bug</task>"), NodeKind(USER_PROMPT)),
        ("assistant", _text("I'll read the file."), NodeKind(ASSISTANT_TEXT)),
        ("assistant", {"type": "thinking", "thinking": "hm", "signature": "s"}, NodeKind(THINKING)),
        ("assistant", {"type": "redacted_thinking", "data": "xx"}, NodeKind(THINKING)),
        (
            "user",
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}},
            NodeKind(IMAGE),
        ),
        (
            "user",
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "d"},
            },
            NodeKind(DOCUMENT),
        ),
        # Cline's text tool results (3.5x: no tool_result blocks)
        (
            "user",
            _text("[read_file for 'src/app.py'] Result:\nimport os\n"),
            NodeKind(FILE_CONTENT, "src/app.py"),
        ),
        (
            "user",
            _text(
                "[write_to_file for 'a/b.cs'] Result:\nThe content was successfully saved to "
                'a/b.cs.\n\n<final_file_content path="a/b.cs">\nclass B {}\n</final_file_content>'
            ),
            NodeKind(FILE_CONTENT, "a/b.cs"),
        ),
        (
            "user",
            _text("[replace_in_file for 'a/b.cs'] Result:\nThe user denied this operation."),
            NodeKind(TOOL_OUTPUT),
        ),
        (
            "user",
            _text("[execute_command for 'cd x && echo 'hi''] Result:\nhi"),
            NodeKind(TOOL_OUTPUT),
        ),
        ("user", _text("[attempt_completion] Result:\nDone"), NodeKind(TOOL_OUTPUT)),
        (
            "user",
            _text("Tool [read_file] was not executed because of a previous tool failure."),
            NodeKind(TOOL_OUTPUT),
        ),
        # Cline's @-mentions
        (
            "user",
            _text('<task>look</task>\n<file_content path="docs/x.md">\n# X\n</file_content>'),
            NodeKind(FILE_CONTENT, "docs/x.md"),
        ),
        # summaries and notices as stored
        ("assistant", _text(TRUNCATION_NOTICE), NodeKind(MEMORY_SUMMARY)),
        (
            "user",
            _text("<state_snapshot>\n<overall_goal>x</overall_goal>"),
            NodeKind(MEMORY_SUMMARY),
        ),
        (
            "user",
            _text(
                '{"active_tasks": [], "discovered_facts": [], '
                '"constraints_and_preferences": [], "recent_arc": []}'
            ),
            NodeKind(MEMORY_SUMMARY),
        ),
        (
            "user",
            _text("[summary of 40,000 characters; the original is kept in the database]\nshort"),
            NodeKind(MEMORY_SUMMARY),
        ),
    ],
)
def test_each_block_shape_lands_on_its_type(
    role: str, block: dict[str, Any], expected: NodeKind
) -> None:
    assert type_block(role, block) == expected


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("read_file", {"path": "src/a.py"}, CallInfo("read_file", "src/a.py")),  # Cline
        ("read_file", {"file_path": "a.h"}, CallInfo("read_file", "a.h")),  # Gemini CLI
        (
            "read_file",
            {"absolute_path": "/w/a.h", "offset": 100, "limit": 50},
            CallInfo("read_file", "/w/a.h", 101, 150),
        ),
        ("read_many_files", {"paths": ["one.md"]}, CallInfo("read_many_files", "one.md")),
        ("read_many_files", {"paths": ["a", "b"]}, CallInfo("read_many_files")),
        (
            "Read",
            {"file_path": "/r.py", "offset": 10, "limit": 5},
            CallInfo("Read", "/r.py", 10, 14),
        ),
        ("write_file", {"file_path": "w.txt", "content": "x"}, CallInfo("write_file", "w.txt")),
        ("run_shell_command", {"command": "ls"}, CallInfo("run_shell_command")),
        ("read_file", "not a dict", CallInfo("read_file")),
        ("read_file", {"path": "a", "offset": -3, "limit": 0}, CallInfo("read_file", "a", 1)),
        # no line a line column holds: "²" is a digit to str.isdigit but not to int, a
        # string of 5,000 digits is one int() refuses, and 10**30 overflowed the column
        (
            "read_file",
            {"path": "a", "start_line": "²", "end_line": "9"},
            CallInfo("read_file", "a"),
        ),
        ("read_file", {"path": "a", "offset": "1" * 5_000}, CallInfo("read_file", "a")),
        ("read_file", {"path": "a", "start_line": 10**30}, CallInfo("read_file", "a")),
        ("read_file", {"path": "a", "offset": 5, "limit": 10**30}, CallInfo("read_file", "a", 6)),
        (
            "read_file",
            {"path": "a", "offset": 2**31 - 2, "limit": 2**31 - 1},
            CallInfo("read_file", "a", 2**31 - 1),
        ),
    ],
)
def test_tool_calls_give_their_file_and_lines(
    name: str, arguments: Any, expected: CallInfo
) -> None:
    assert call_info(name, arguments) == expected
    block = {"type": "tool_use", "id": "t", "name": name, "input": arguments}
    kind = type_block("assistant", block)
    assert kind == NodeKind(TOOL_CALL, expected.path, expected.line_start, expected.line_end)


def test_native_results_take_their_calls_file() -> None:
    calls = {
        "r": CallInfo("read_file", "a.py", 1, 40),
        "w": CallInfo("replace_in_file", "b.py"),
        "s": CallInfo("summarize_task"),
        "x": CallInfo("execute_command"),
    }
    assert type_block("user", _result("r", "print(1)"), calls) == NodeKind(
        FILE_CONTENT, "a.py", 1, 40
    )
    assert type_block("user", _result("r", "no such file", is_error=True), calls) == NodeKind(
        TOOL_OUTPUT
    )
    final = '<final_file_content path="b.py">x</final_file_content>'
    assert type_block("user", _result("w", final), calls) == NodeKind(FILE_CONTENT, "b.py")
    assert type_block("user", _result("w", "denied"), calls) == NodeKind(TOOL_OUTPUT)
    assert type_block("user", _result("s", "the summary"), calls) == NodeKind(MEMORY_SUMMARY)
    assert type_block("user", _result("x", "ok"), calls) == NodeKind(TOOL_OUTPUT)
    assert type_block("user", _result("unknown", "ok"), calls) == NodeKind(TOOL_OUTPUT)
    listed = _result("r", [_text("line one"), _text("line two")])
    assert type_block("user", listed, calls).node_type == FILE_CONTENT


def test_gemini_truncated_read_reports_the_lines_shown() -> None:
    calls = {"g": CallInfo("read_file", "big.ts")}
    notice = (
        "IMPORTANT: The file content has been truncated.\nStatus: Showing lines 201-400 of "
        "900 total lines.\n..."
    )
    assert type_block("user", _result("g", notice), calls) == NodeKind(
        FILE_CONTENT, "big.ts", 201, 400
    )
    inverted = notice.replace("201-400", "400-201")
    assert type_block("user", _result("g", inverted), calls) == NodeKind(FILE_CONTENT, "big.ts")


def test_cline_old_header_alone_in_block_zero_makes_block_one_the_file() -> None:
    kinds = type_message("user", [_text("[read_file for 'x.py'] Result:"), _text("print(1)")])
    assert kinds == [NodeKind(TOOL_OUTPUT), NodeKind(FILE_CONTENT, "x.py")]


def test_typing_reads_only_a_bounded_prefix() -> None:
    late = "x" * PREFIX_CHARS + '<file_content path="late.md">y</file_content>'
    assert type_block("user", _text(late)) == NodeKind(USER_PROMPT)
    huge = "[read_file for 'big.log'] Result:\n" + "line\n" * 1_000_000
    assert type_block("user", _text(huge)) == NodeKind(FILE_CONTENT, "big.log")


def _counted(role: str, blocks: list[dict[str, Any]]) -> Any:
    return count_message(normalize_message_dict({"role": role, "content": blocks}), _Chars())


def test_block_counts_add_up_to_the_message_count() -> None:
    counted = _counted("user", [_text("abc"), _text("de")])
    assert counted.block_tokens == (3, 2)
    assert counted.tokens == 5 + MESSAGE_OVERHEAD_TOKENS


def test_a_result_is_typed_by_a_call_in_the_same_batch_or_a_stored_one() -> None:
    call = {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a.py"}}
    written = [
        (0, _counted("assistant", [call])),
        (1, _counted("user", [_result("t1", "code"), _result("t0", "older")])),
    ]
    local, missing = batch_calls(c.message for _, c in written)
    assert missing == ["t0"]
    rows = typed_nodes(written, {**local, "t0": CallInfo("read_file", "old.py")})
    assert [(r.node_type, r.path) for r in rows[1]] == [
        (FILE_CONTENT, "a.py"),
        (FILE_CONTENT, "old.py"),
    ]
    assert rows[0][0].node_type == TOOL_CALL and rows[0][0].path == "a.py"


def test_results_without_a_matching_id_pair_with_the_calls_before_them_in_order() -> None:
    """Gemini CLI exports calls without ids and responses with ids of their own."""
    calls = [
        {
            "type": "tool_use",
            "id": "gemini_call_4_0",
            "name": "read_file",
            "input": {"file_path": "a.h"},
        },
        {"type": "tool_use", "id": "gemini_call_4_1", "name": "run_shell_command", "input": {}},
    ]
    written = [
        (4, _counted("assistant", calls)),
        (5, _counted("user", [_result("read_file-1", "x"), _result("run-2", "y")])),
    ]
    local, _ = batch_calls(c.message for _, c in written)
    rows = typed_nodes(written, local)
    assert [(r.node_type, r.path) for r in rows[1]] == [(FILE_CONTENT, "a.h"), (TOOL_OUTPUT, None)]


def _row(node_type: str = USER_PROMPT, tokens: int = 1, **extra: Any) -> NodeRow:
    values = {"path": None, "line_start": None, "line_end": None, **extra}
    return NodeRow(node_type, values["path"], values["line_start"], values["line_end"], tokens)


def test_invariants_accept_what_typing_produced() -> None:
    check_nodes([(0, [_text("a")], [_row()], 1 + MESSAGE_OVERHEAD_TOKENS)])


@pytest.mark.parametrize(
    ("written", "rule"),
    [
        ([(0, [_text("a")], [_row()], 1 + 4), (0, [_text("b")], [_row()], 5)], "written twice"),
        ([(0, [_text("a")], [], 4)], "1 blocks have 0 nodes"),
        ([(0, [_text("a")], [_row("paragraph")], 5)], "not a node type"),
        ([(0, [_text("a")], [_row(tokens=-1)], 3)], "negative"),
        ([(0, [_text("a")], [_row(tokens=2)], 5)], "recount to 6"),
        (
            [(0, [{"type": "tool_use", "id": "t", "name": ""}], [_row(TOOL_CALL)], 5)],
            "names no tool",
        ),
        ([(0, [_text("  ")], [_row(MEMORY_SUMMARY)], 5)], "has no text"),
        ([(0, [_text("a")], [_row(line_start=0)], 5)], "starts at 0"),
        ([(0, [_text("a")], [_row(line_start=9, line_end=3)], 5)], "9-3 is inverted"),
        ([(0, [_text("a")], [_row(line_end=3)], 5)], "None-3 is inverted"),
    ],
)
def test_each_broken_invariant_is_raised(written: Any, rule: str) -> None:
    with pytest.raises(NodeInvariantError, match=rule) as raised:
        check_nodes(written)
    assert isinstance(raised.value, IntegrityViolationError)
    assert "m0.b0" in str(raised.value)


def test_a_broken_invariant_names_the_node_that_breaks_it() -> None:
    """The address is formatted only for the error: it names the message and the block."""
    empty_summary = {"type": "tool_result", "tool_use_id": "t", "content": [_text(" ")]}
    fine = (2, [_text("a")], [_row()], 5)
    with pytest.raises(NodeInvariantError, match=r"node m3\.b1 .*summary has no text"):
        check_nodes([fine, (3, [_text("a"), empty_summary], [_row(), _row(MEMORY_SUMMARY)], 6)])
    with pytest.raises(NodeInvariantError, match=r"node m7\.b2 .*starts at 0"):
        rows = [_row(), _row(), _row(line_start=0)]
        check_nodes([(7, [_text("a"), _text("b"), _text("c")], rows, 7)])
    summary_with_text = {"type": "tool_result", "tool_use_id": "t", "content": "kept"}
    check_nodes([(3, [summary_with_text], [_row(MEMORY_SUMMARY)], 5)])


def test_system_prompts_and_tools_are_nodes_by_content_hash() -> None:
    system, tools = prompt_nodes("be careful", [{"name": "t", "input_schema": {}}])
    assert system is not None and system.node_type == SYSTEM_PROMPT
    assert tools is not None and tools.node_type == TOOL_DEFINITIONS
    assert tools.content == '[{"input_schema":{},"name":"t"}]'
    again, _ = prompt_nodes("be careful", None)
    assert again == system and len(system.sha256) == 64
    assert prompt_nodes("", []) == (None, None)
    assert prompt_nodes(None, None) == (None, None)
