"""``contextstore mcp`` through the MCP SDK's own client (``stdio_client`` + ``ClientSession``):
the tools it lists, each one called, read-only unless ``--allow-writes``."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from contextstore import ContextStore
from tests.server.conftest import server_env

mcp = pytest.importorskip("mcp", reason='the MCP tests need pip install "contextstore[mcp]"')

READ_TOOLS = {"list_conversations", "show_conversation", "list_checkpoints", "show_request"}


def _history(db: Path) -> dict[str, Any]:
    """A conversation with a tool call, a checkpoint, a later turn and a prepared request."""
    with ContextStore.open(db) as store:
        conv = store.create_conversation(model_id="claude-sonnet-4-5", title="mcp history")
        store.append(conv.id, "user", "<task>read a.py</task>")
        store.append(
            conv.id,
            [
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "read_file",
                     "input": {"path": "a.py"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "print('a')"}]},
            ],
        )  # fmt: skip
        checkpoint = store.checkpoint(conv.id, label="after-read")
        store.append(conv.id, "assistant", "It prints a.")
        store.append(conv.id, "user", "Thanks.")
        prepared = store.prepare_request(conv.id, system="Be brief.")
        return {
            "cid": conv.id,
            "checkpoint": checkpoint,
            "request_id": prepared.request_id,
            "payload": prepared.payload,
            "counts": store.row_counts(conv.id),
        }


Session = Any


def _with_session(
    db: Path, data_home: Path, extra: list[str], body: Callable[[Session], Awaitable[None]]
) -> None:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "contextstore", "--db", str(db), "mcp", *extra],
        env=server_env(data_home),
    )

    async def run() -> None:
        with anyio.fail_after(120):
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                await body(session)

    anyio.run(run)


async def _call(session: Session, name: str, **arguments: Any) -> Any:
    result = await session.call_tool(name, arguments)
    assert not result.is_error, result.content
    structured = result.structured_content or {}
    return structured.get("result", structured)  # lists come wrapped in {"result": ...}


async def _fails(session: Session, name: str, **arguments: Any) -> str:
    result = await session.call_tool(name, arguments)
    assert result.is_error
    return str(result.content[0].text)


def test_the_read_only_tools_answer_from_the_history(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    state = _history(db)
    cid = state["cid"]

    async def body(session: Session) -> None:
        listed = await session.list_tools()
        assert {t.name for t in listed.tools} == READ_TOOLS
        assert all(t.annotations.read_only_hint for t in listed.tools)
        assert all(t.description for t in listed.tools)

        conversations = await _call(session, "list_conversations")
        assert [c["id"] for c in conversations] == [cid]
        assert conversations[0]["title"] == "mcp history"

        now = await _call(session, "show_conversation", conversation_id=cid)
        assert [m["role"] for m in now] == ["user", "assistant", "user", "assistant", "user"]
        then = await _call(
            session, "show_conversation", conversation_id=cid, as_of=state["checkpoint"].ts
        )
        assert then == now[:3]
        openai = await _call(session, "show_conversation", conversation_id=cid, format="openai")
        assert openai[1]["tool_calls"][0]["function"]["name"] == "read_file"
        pristine = await _call(session, "show_conversation", conversation_id=cid, pristine=True)
        with ContextStore.open(db) as store:
            assert pristine == store.messages(cid)

        checkpoints = await _call(session, "list_checkpoints", conversation_id=cid)
        assert [(c["label"], c["ts"]) for c in checkpoints] == [
            ("after-read", state["checkpoint"].ts)
        ]
        payload = await _call(
            session, "show_request", conversation_id=cid, request_id=state["request_id"]
        )
        assert payload == state["payload"]

        missing = await _fails(session, "show_conversation", conversation_id="nope")
        assert "ConversationNotFoundError" in missing and "'nope'" in missing
        assert "ReadOnly" not in await _fails(
            session, "show_request", conversation_id=cid, request_id=999
        )
        unknown = await _fails(session, "checkpoint", conversation_id=cid, label="x")
        assert "checkpoint" in unknown

    _with_session(db, tmp_path / "data", [], body)
    with ContextStore.open(db) as store:
        assert store.row_counts(cid) == state["counts"]  # nothing was written


def test_writes_are_offered_only_with_allow_writes(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    state = _history(db)
    cid = state["cid"]

    async def body(session: Session) -> None:
        listed = await session.list_tools()
        tools = {t.name: t for t in listed.tools}
        assert set(tools) == READ_TOOLS | {"checkpoint", "rollback"}
        assert tools["rollback"].annotations.destructive_hint is True
        assert not tools["checkpoint"].annotations.read_only_hint

        made = await _call(session, "checkpoint", conversation_id=cid, label="mcp", note="n")
        assert made["label"] == "mcp"
        preview = await _call(session, "rollback", conversation_id=cid, to="after-read")
        assert preview["dry_run"] is True and preview["removed"]["messages"] == 2
        done = await _call(session, "rollback", conversation_id=cid, to="after-read", dry_run=False)
        assert done["removed"] == preview["removed"] and done["archived"] is True
        wrong = await _fails(session, "rollback", conversation_id=cid, to="no-such-label")
        assert "CheckpointNotFoundError" in wrong

    _with_session(db, tmp_path / "data", ["--allow-writes"], body)
    with ContextStore.open(db) as store:
        assert len(store.messages(cid)) == 3
        assert [c.label for c in store.checkpoints(cid)] == ["after-read"]


def test_the_tool_results_are_also_json_text_for_clients_without_structured_output(
    tmp_path: Path,
) -> None:
    db = tmp_path / "mcp.db"
    state = _history(db)

    async def body(session: Session) -> None:
        result = await session.call_tool("list_checkpoints", {"conversation_id": state["cid"]})
        assert json.loads(result.content[0].text)["label"] == "after-read"

    _with_session(db, tmp_path / "data", [], body)
