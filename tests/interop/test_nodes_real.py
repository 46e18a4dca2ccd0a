"""Real Cline and Gemini CLI files (``../shared/real``): imported blocks land on the right
node type and file."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.interop import import_cline, import_gemini
from tests.interop.real import CLINE, GEMINI, cline_tasks_with_history, gemini_files, need, params


def _typed(store: ContextStore, cid: str) -> dict[str, tuple[str, str | None]]:
    return {n.id: (n.node_type, n.path) for n in store.nodes(cid)}


def test_cline_task_reads_and_writes_are_file_contents(memory_store: ContextStore) -> None:
    folder = need(CLINE / "gmfstu-task-1769053680585")
    cid = import_cline(memory_store, folder).conversation_id
    typed = _typed(memory_store, cid)
    # "[read_file for 'ActionSystem.cs'] Result:" in a plain text block (no tool_result)
    assert typed["m2.b0"] == ("file_content", "ActionSystem.cs")
    assert typed["m26.b0"] == ("file_content", "golden_tests/NetworkTests.cs")
    # a write_to_file result holding <final_file_content>
    assert typed["m34.b0"] == (
        "file_content",
        "/workspaces/Online-Card-Architecture/BeginTurnGA.cs",
    )
    assert typed["m0.b0"] == ("user_prompt", None)  # the <task>
    assert typed["m1.b0"] == ("thinking", None)
    counts = Counter(kind for kind, _ in typed.values())
    assert counts["tool_call"] == 47 and counts["thinking"] == 47
    assert counts["file_content"] == 43
    calls = [n for n in memory_store.nodes(cid) if n.node_type == "tool_call"]
    assert {n.tool_name for n in calls} >= {"read_file", "write_to_file", "attempt_completion"}
    assert all(n.path for n in calls if n.tool_name == "read_file")


def test_gemini_session_reads_are_file_contents(memory_store: ContextStore) -> None:
    path = need(GEMINI / "m-gemini" / "session-2025-12-24T06-40-c330aea9.json")
    cid = import_gemini(memory_store, path).conversation_id
    typed = _typed(memory_store, cid)
    assert typed["m2.b0"] == ("file_content", "Gemini-Playground/index.html")
    assert typed["m2.b2"] == ("file_content", "Gemini-Playground/script.js")
    assert typed["m14.b0"] == ("file_content", "Gemini-Playground/GEMINI.md")
    assert typed["m1.b0"][0] in ("tool_call", "assistant_text")


def test_gemini_export_pairs_id_less_calls_with_their_responses(
    memory_store: ContextStore,
) -> None:
    path = need(GEMINI / "minwookhan-ksl" / "1215-15.json")
    cid = import_gemini(memory_store, path).conversation_id
    typed = _typed(memory_store, cid)
    # message 0 is the environment context the checkpoint opens with, message 1 the prompt
    assert typed["m5.b0"] == ("file_content", "gRPCFileClientDlg.h")
    assert typed["m5.b1"] == ("file_content", "gRPCFileClientDlg.cpp")
    assert typed["m4.b0"] == ("tool_call", "gRPCFileClientDlg.h")


@pytest.mark.parametrize("folder", params(cline_tasks_with_history()))
def test_every_real_cline_block_is_a_checked_node(memory_store: ContextStore, folder: Path) -> None:
    cid = import_cline(memory_store, folder).conversation_id
    found = memory_store.nodes(cid)
    messages = memory_store.messages(cid)
    assert len(found) == sum(
        1 if isinstance(m["content"], str) else len(m["content"]) for m in messages
    )
    assert len({n.id for n in found}) == len(found)
    assert all(n.token_count >= 0 for n in found)
    assert any(n.node_type == "file_content" for n in found)


@pytest.mark.parametrize("path", params(gemini_files()))
def test_every_real_gemini_file_types_its_calls(memory_store: ContextStore, path: Path) -> None:
    cid = import_gemini(memory_store, path).conversation_id
    found = memory_store.nodes(cid)
    results = [n for n in found if n.block_type == "tool_result"]
    assert all(n.node_type in ("tool_output", "file_content", "memory_summary") for n in results)
    reads = [n for n in found if n.node_type == "tool_call" and n.tool_name == "read_file"]
    assert all(n.path for n in reads)
