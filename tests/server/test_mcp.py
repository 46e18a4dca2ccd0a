"""``contextstore mcp`` through the MCP SDK's own client (``stdio_client`` + ``ClientSession``):
the tools it lists, each one called, read-only unless ``--allow-writes``."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from contextstore import ContextStore
from contextstore.server.methods import to_json
from tests.conftest import session, tool_result, tool_use
from tests.server.conftest import ServerProcess, StdioClient, server_env

mcp = pytest.importorskip("mcp", reason='the MCP tests need pip install "contextstore[mcp]"')

READ_TOOLS = {
    "list_conversations",
    "search_conversations",
    "show_conversation",
    "audit_conversation",
    "list_checkpoints",
    "show_request",
}


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
        audited = store.create_conversation(title="long session", context_window=64_000)
        store.append(audited.id, session(6))
        store.append(audited.id, "assistant", [tool_use("again", path="f1.py")])
        store.append(audited.id, "user", [tool_result("again", "contents of f1.py")])
        store.record_request(audited.id, tokens_in=30_000, tokens_out=500, cost=0.5)
        store.truncate(audited.id, keep="half")
        store.record_request(audited.id, tokens_in=20_000, tokens_out=400, failure="cancelled")
        return {
            "audited": audited.id,
            "cid": conv.id,
            "checkpoint": checkpoint,
            "request_id": prepared.request_id,
            "payload": prepared.payload,
            "counts": store.row_counts(conv.id),
        }


Session = Any


def _files_read_by_sql(db: Path, cid: str) -> dict[str, int]:
    """The README's file-read audit query, on one conversation (an oracle in SQL)."""
    import sqlite3

    connection = sqlite3.connect(db)
    try:
        rows = connection.execute(
            "SELECT json_extract(data, '$.input.path') AS path, COUNT(*) FROM blocks "
            "WHERE type = 'tool_use' AND tool_name = 'read_file' AND conversation_id = ? "
            "GROUP BY path",
            (cid,),
        ).fetchall()
    finally:
        connection.close()
    return dict(rows)


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
        assert [c["id"] for c in conversations] == [state["audited"], cid]  # newest first
        assert conversations[1]["title"] == "mcp history"
        assert len(await _call(session, "list_conversations", limit=1)) == 1

        hits = await _call(session, "search_conversations", text="PRINT('A')")
        assert [(h["conversation_id"], h["message_idx"], h["role"]) for h in hits] == [
            (cid, 2, "user")
        ]
        assert "print('a')" in hits[0]["snippet"]
        found = await _call(session, "search_conversations", text="contents of f", limit=3)
        assert len(found) == 3 and {h["conversation_id"] for h in found} == {state["audited"]}
        with ContextStore.open(db, read_only=True) as store:  # the store's own search, shaped
            assert found == [to_json(h) for h in store.search("contents of f", limit=3)]
        assert await _call(session, "search_conversations", text="no such words") == []
        assert "is empty" in await _fails(session, "search_conversations", text=" ")
        for limit in (0, -3):
            refused = await _fails(session, "search_conversations", text="print", limit=limit)
            assert "InvalidInputError" in refused and "limit" in refused

        bogus = await _fails(session, "show_conversation", conversation_id=cid, format="bogus")
        assert bogus.startswith("InvalidInputError: show_conversation was called with")
        assert "format: input should be 'stored', 'anthropic', 'openai' or 'gemini'" in bogus
        missing_id = await _fails(session, "audit_conversation")
        assert (
            "conversation_id: required (audit_conversation takes conversation_id, offset"
            in missing_id
        )
        for leaked in ("pydantic", "validation error for", "Arguments", "input_value"):
            assert leaked not in bogus + missing_id

        audit = await _call(session, "audit_conversation", conversation_id=state["audited"])
        assert (audit["context_window"], audit["max_allowed_size"]) == (64_000, 37_000)
        assert [r["tokens_in"] for r in audit["requests"]] == [30_000, 20_000]
        assert audit["requests"][1]["failure"] == "cancelled"
        assert audit["total_cost"] == 0.5
        with ContextStore.open(db) as store:
            truncated_range = list(store.deleted_range(state["audited"]) or ())
        assert audit["requests"][0]["deleted_range"] is None
        assert audit["requests"][1]["deleted_range"] == truncated_range
        assert [t["deleted_range"] for t in audit["truncations"]] == [truncated_range]
        assert audit["files_read"] == _files_read_by_sql(db, state["audited"])
        assert audit["files_read"]["f1.py"] == 2

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
        assert "list them with the list_conversations tool" in missing
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


def test_the_audit_lists_every_truncation_the_store_s_audit_lists(tmp_path: Path) -> None:
    """A range set without a truncation notice (``set_deleted_range``, an import) was left
    out (the tool listed notices), and no truncation said its keep strategy or why."""
    db = tmp_path / "mcp.db"
    state = _history(db)
    with ContextStore.open(db) as store:
        cid = store.create_conversation(context_window=64_000).id
        store.append(cid, session(6))
        store.set_deleted_range(cid, 5)
        store.record_request(cid, tokens_in=100, tokens_out=1)
        oracles = {c: to_json(store.audit(c).truncations) for c in (cid, state["audited"])}

    async def body(session: Session) -> None:
        for conversation_id, oracle in oracles.items():
            audit = await _call(session, "audit_conversation", conversation_id=conversation_id)
            assert [
                {k: v for k, v in t.items() if k != "deleted_range"} for t in audit["truncations"]
            ] == oracle
            ranges = [[t["start_idx"], t["end_idx"]] for t in oracle]
            assert [t["deleted_range"] for t in audit["truncations"]] == ranges
        assert oracles[cid][0]["start_idx"] == 2 and oracles[cid][0]["end_idx"] == 5
        assert oracles[state["audited"]][0]["keep"] == "half"

    _with_session(db, tmp_path / "data", [], body)


def test_the_audit_counts_the_files_every_read_tool_read(tmp_path: Path) -> None:
    """files_read counted Cline's read_file with a path only: the files Gemini CLI
    (absolute_path, file_path) and Claude Code (Read) read were missing, where the store's
    audit and 'contextstore audit' list them."""
    db = tmp_path / "mcp.db"
    calls = [
        tool_use("t1", "read_file", path="a.py"),
        tool_use("t2", "Read", file_path="a.py"),
        tool_use("t3", "read_file", absolute_path="/abs/c.py"),
        tool_use("t4", "read_file", file_path="d.py"),
        tool_use("t5", "write_to_file", path="a.py", content="x"),
    ]
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "task")
        for call in calls:
            store.append(cid, "assistant", [call])
            store.append(cid, "user", [tool_result(call["id"], "ok")])
        oracle: dict[str, int] = {}
        for read in store.audit(cid).file_reads:
            oracle[read.path] = oracle.get(read.path, 0) + read.reads

    async def body(session: Session) -> None:
        audit = await _call(session, "audit_conversation", conversation_id=cid)
        assert audit["files_read"] == oracle == {"a.py": 2, "/abs/c.py": 1, "d.py": 1}
        assert list(audit["files_read"]) == ["a.py", "/abs/c.py", "d.py"]  # most read first

    _with_session(db, tmp_path / "data", [], body)


def _advised(error: str) -> tuple[int, int]:
    """The page (offset, limit) an answer-too-large error says fits."""
    found = re.search(r"\(offset=(\d+), limit=(\d+) fits\)", error)
    assert found, error
    return int(found[1]), int(found[2])


def test_a_long_history_is_read_a_page_at_a_time_never_whole(tmp_path: Path) -> None:
    """show_conversation answered a long conversation whole (3 MB of JSON for 3,000
    messages, twice over: as text and structured), which no model's context holds, and
    audit_conversation every request; an answer over 100,000 characters is now refused
    saying which page fits, and the pages read in turn give the whole of it."""
    db = tmp_path / "mcp.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation(context_window=200_000).id
        store.append_many(
            cid,
            [
                {"role": ("user", "assistant")[i % 2], "content": f"{i} " + "word " * 400}
                for i in range(120)
            ]
            + [
                {"role": "user", "content": "huge " * 30_000},
                {"role": "assistant", "content": "ok"},
            ],
        )
        with store.transaction():
            for i in range(500):
                store.record_request(cid, tokens_in=1_000 + i, tokens_out=10, cost=0.001)
            for _ in range(600):
                store.create_conversation(title="another")
        view = store.render(cid)
        stored = store.messages(cid)
        request_ids = [r.id for r in store.requests(cid)]

    async def body(session: Session) -> None:
        refused = await _fails(session, "show_conversation", conversation_id=cid)
        assert "AnswerTooLargeError: show_conversation's answer would be" in refused
        assert "this view has 122 messages" in refused and len(refused) < 600
        offset, limit = _advised(refused)
        assert offset == 0 and 0 < limit < 120
        pages: list[Any] = []
        while offset < 120:
            before_huge = min(limit, 120 - offset)
            page = await _call(
                session, "show_conversation", conversation_id=cid, offset=offset, limit=before_huge
            )
            pages += page
            offset += len(page)
        huge = await _fails(session, "show_conversation", conversation_id=cid, offset=120)
        assert "the message at offset 120 alone is 150,0" in huge
        assert "search_conversations finds text in it" in huge and "offset=121" in huge
        pages += await _call(session, "show_conversation", conversation_id=cid, offset=121)
        assert pages == view[:120] + view[121:]
        too_many = await _fails(
            session, "show_conversation", conversation_id=cid, offset=3, limit=limit + 1
        )
        assert _advised(too_many) == (3, limit)
        first = await _call(
            session, "show_conversation", conversation_id=cid, pristine=True, limit=2
        )
        assert first == stored[:2]
        assert await _call(session, "show_conversation", conversation_id=cid, offset=500) == []
        for wrong in ({"offset": -1}, {"limit": 0}):
            text = await _fails(session, "show_conversation", conversation_id=cid, **wrong)
            assert f"{next(iter(wrong))} must be an integer from" in text

        whole = await _fails(session, "audit_conversation", conversation_id=cid)
        assert "it has 500 requests: read them a page at a time" in whole
        offset, limit = _advised(whole)
        ids: list[int] = []
        while offset < 500:
            audit = await _call(
                session, "audit_conversation", conversation_id=cid, offset=offset, limit=limit
            )
            assert audit["requests_total"] == 500 and audit["total_cost"] == pytest.approx(0.5)
            ids += [r["id"] for r in audit["requests"]]
            offset += limit
        assert ids == request_ids

        listed = await _fails(session, "list_conversations", limit=1_000)
        assert "AnswerTooLargeError: list_conversations's answer" in listed
        assert listed.endswith("pass a smaller limit.")
        assert len(await _call(session, "list_conversations")) == 50

    _with_session(db, tmp_path / "data", [], body)


def test_pristine_in_a_provider_format_is_refused_not_answered_in_another(
    tmp_path: Path,
) -> None:
    """pristine=True with format "openai" or "gemini" answered the stored (Anthropic)
    messages: a model that asked for OpenAI's shape got another, silently ('contextstore
    show --pristine --format openai' is refused)."""
    db = tmp_path / "mcp.db"
    state = _history(db)
    cid = state["cid"]
    with ContextStore.open(db) as store:
        stored = store.messages(cid)

    async def body(session: Session) -> None:
        for format in ("openai", "gemini"):
            refused = await _fails(
                session, "show_conversation", conversation_id=cid, pristine=True, format=format
            )
            assert refused.endswith(
                f"InvalidInputError: pristine gives the stored originals, which are not in the "
                f'{format} format; leave format out (or pass "stored") with pristine, or leave '
                f"pristine out for the conversation as the model saw it in the {format} format."
            )
        for format in ("stored", "anthropic"):
            answer = await _call(
                session, "show_conversation", conversation_id=cid, pristine=True, format=format
            )
            assert answer == stored

    _with_session(db, tmp_path / "data", [], body)


def test_the_tool_results_are_also_json_text_for_clients_without_structured_output(
    tmp_path: Path,
) -> None:
    db = tmp_path / "mcp.db"
    state = _history(db)

    async def body(session: Session) -> None:
        result = await session.call_tool("list_checkpoints", {"conversation_id": state["cid"]})
        assert json.loads(result.content[0].text)["label"] == "after-read"

    _with_session(db, tmp_path / "data", [], body)


def test_argument_errors_speak_json_and_name_unknown_arguments(tmp_path: Path) -> None:
    """A misspelt argument is refused, not dropped (the SDK would call the tool with its
    default); wrong types are said in JSON terms, without Python type names."""
    db = tmp_path / "mcp.db"
    state = _history(db)
    cid = state["cid"]

    async def body(session: Session) -> None:
        misspelt = await _fails(session, "list_conversations", limt=1)
        assert misspelt == (
            "InvalidInputError: list_conversations was called with arguments that do not "
            "fit: limt: unknown argument (list_conversations takes limit)."
        )
        extra = await _fails(session, "show_conversation", conversation_id=cid, view="active")
        assert "view: unknown argument" in extra
        assert "takes conversation_id, as_of, format, pristine" in extra
        for limit in (0, -5):  # refused, as search_conversations refuses them, not []
            refused = await _fails(session, "list_conversations", limit=limit)
            assert f"limit must be an integer from 1 to 2,147,483,647, got {limit}" in refused
        assert len(await _call(session, "list_conversations", limit=1)) == 1
        union = await _fails(session, "rollback", conversation_id=cid, to=None)
        assert "to: input should be a valid string or input should be a valid integer" in union
        assert "to.str" not in union and "to.int" not in union

    _with_session(db, tmp_path / "data", ["--allow-writes"], body)


WRONG_TYPES = [
    ("list_conversations", {"limit": "5"}, ["integer"]),
    ("list_conversations", {"limit": 5.5}, ["integer"]),
    ("list_conversations", {"limit": True}, ["integer"]),
    ("search_conversations", {"text": "a", "limit": "3"}, ["integer"]),
    ("show_conversation", {"as_of": "123"}, ["integer"]),
    ("show_conversation", {"as_of": "null"}, ["integer"]),
    ("show_conversation", {"pristine": "true"}, ["boolean"]),
    ("show_conversation", {"pristine": 1}, ["boolean"]),
    ("show_request", {"request_id": "1"}, ["integer"]),
    ("rollback", {"to": "after-read", "dry_run": "false"}, ["boolean"]),
    ("rollback", {"to": "after-read", "dry_run": 0}, ["boolean"]),
    ("rollback", {"to": 1.5}, ["string", "integer"]),
    ("rollback", {"to": False}, ["string", "integer"]),
]
"""(tool, arguments, the JSON types expected of the last argument given)"""


def test_wrongly_typed_arguments_are_refused_naming_the_argument_and_its_json_type(
    tmp_path: Path,
) -> None:
    """As the JSON-RPC methods refuse params: a string is not an integer nor a boolean, a
    number with a fraction is not an integer, true is not 1. The SDK's own argument
    model converted them (a rollback with dry_run "false" ran for real); and a string is
    kept as it was sent, never decoded as JSON first (a label "null" was no label)."""
    db = tmp_path / "mcp.db"
    state = _history(db)
    cid = state["cid"]

    async def body(session: Session) -> None:
        listed = {t.name: t.input_schema for t in (await session.list_tools()).tools}
        for tool, arguments, expected in WRONG_TYPES:
            wrong = list(arguments)[-1]
            clause = f"{wrong}: " + " or ".join(f"input should be a valid {t}" for t in expected)
            if "conversation_id" in listed[tool]["properties"]:
                arguments = {"conversation_id": cid, **arguments}
            refused = await _fails(session, tool, **arguments)
            assert refused == (
                f"InvalidInputError: {tool} was called with arguments that do not fit: "
                f"{clause} ({tool} takes {', '.join(listed[tool]['properties'])})."
            )
        kept = await _call(session, "checkpoint", conversation_id=cid, label="null", note="[1, 2]")
        assert (kept["label"], kept["note"]) == ("null", "[1, 2]")
        then = await _call(
            session, "show_conversation", conversation_id=cid, as_of=state["checkpoint"].ts
        )
        assert len(then) == 3  # the right types still pass
        assert (await _call(session, "rollback", conversation_id=cid, to="null"))["dry_run"]

    _with_session(db, tmp_path / "data", ["--allow-writes"], body)
    with ContextStore.open(db) as store:
        counts = store.row_counts(cid)
        assert [c.label for c in store.checkpoints(cid)] == ["after-read", "null"]
    assert {k: v for k, v in counts.items() if k != "checkpoints"} == {
        k: v for k, v in state["counts"].items() if k != "checkpoints"
    }  # every refused call (rollback included) changed nothing


def test_an_integer_argument_takes_a_number_with_a_zero_fraction(tmp_path: Path) -> None:
    """JSON Schema, which the tools' input schemas are, counts 5.0 as an integer; the strict
    argument model refused it. 5.5 is still refused, and so is a value out of range."""
    from jsonschema import Draft7Validator

    db = tmp_path / "mcp.db"
    state = _history(db)
    cid = state["cid"]

    async def body(session: Session) -> None:
        schemas = {t.name: t.input_schema for t in (await session.list_tools()).tools}
        calls: list[tuple[str, dict[str, Any]]] = [
            ("list_conversations", {"limit": 1.0}),
            ("search_conversations", {"text": "a", "limit": 2e0}),
            ("show_conversation", {"conversation_id": cid, "as_of": state["checkpoint"].ts * 1.0}),
            ("show_request", {"conversation_id": cid, "request_id": state["request_id"] * 1.0}),
            ("rollback", {"conversation_id": cid, "to": state["checkpoint"].ts * 1.0}),
        ]
        for tool, arguments in calls:
            assert Draft7Validator(schemas[tool]).is_valid(arguments), tool
        listed, found, shown, payload, rolled = [
            await _call(session, tool, **arguments) for tool, arguments in calls
        ]
        assert (len(listed), isinstance(found, list), len(shown)) == (1, True, 3)
        assert payload == state["payload"]
        assert rolled["dry_run"] and rolled["cutoff_ts"] == state["checkpoint"].ts
        refused = await _fails(session, "list_conversations", limit=0.0)
        assert "limit must be an integer from 1 to 2,147,483,647, got 0" in refused
        assert not Draft7Validator(schemas["list_conversations"]).is_valid({"limit": 1.5})
        refused = await _fails(session, "show_request", conversation_id=cid, request_id=1e300)
        assert "request_id: a number with a fraction or exponent is taken as an integer" in refused

    _with_session(db, tmp_path / "data", ["--allow-writes"], body)


def test_an_unknown_tool_s_name_is_repeated_clipped(tmp_path: Path) -> None:
    """The SDK's "Unknown tool" error repeated the name whole: a 1 MB name came back."""
    db = tmp_path / "mcp.db"
    _history(db)

    async def body(session: Session) -> None:
        refused = await _fails(session, "t" * 2**20)
        assert refused == (
            f"Unknown tool: {'t' * 100!r}... (1,048,576 characters); tools/list lists the tools."
        )
        assert (await _fails(session, "nope")).startswith("Unknown tool: 'nope';")

    _with_session(db, tmp_path / "data", [], body)


def test_store_errors_name_tools_not_python_calls(tmp_path: Path) -> None:
    """Every MCP wording rule, triggered by a real call: the model reads tool names."""
    from contextstore.server.wording import MCP_RULES

    db = tmp_path / "mcp.db"
    state = _history(db)
    with ContextStore.open(db) as store:
        unprepared = store.requests(state["audited"])[0].id

    async def body(session: Session) -> None:
        texts = [
            await _fails(session, "audit_conversation", conversation_id="nope"),
            await _fails(session, "show_request", conversation_id=state["cid"], request_id=999),
            await _fails(
                session, "show_request", conversation_id=state["audited"], request_id=unprepared
            ),
        ]
        assert "list them with the list_conversations tool." in texts[0]
        assert "audit_conversation lists its requests with their ids" in texts[1]
        assert "only requests prepared through contextstore can be rebuilt" in texts[2]
        for text in texts:
            assert "ContextStore." not in text and "prepare_request" not in text
        assert len(texts) == len(MCP_RULES) - 1  # and test_a_damaged_file_names_no_python_call

    _with_session(db, tmp_path / "data", [], body)


def test_a_damaged_file_names_no_python_call(tmp_path: Path) -> None:
    """A file damaged while the server runs: the tool error named ContextStore.recover,
    which a model reading it cannot call."""
    db = tmp_path / "mcp.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, [{"role": "user", "content": "word " * 500}] * 200)

    async def body(session: Session) -> None:
        size = db.stat().st_size
        with db.open("r+b") as handle:
            handle.seek(size * 2 // 5)
            handle.write(b"\xde\xad" * (size // 10))
        text = await _fails(session, "show_conversation", conversation_id=cid)
        assert "CorruptDatabaseError" in text
        assert "with 'contextstore recover SRC DEST', or restore a backup" in text
        assert "ContextStore." not in text

    _with_session(db, tmp_path / "data", [], body)


def _raw_request(request_id: int, name: str, arguments: str) -> bytes:
    """A tools/call line with ``arguments`` as JSON text (escapes kept as written)."""
    head = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call"})
    return f'{head[:-1]}, "params": {{"name": "{name}", "arguments": {arguments}}}}}'.encode()


def _handshake(client: StdioClient) -> None:
    """MCP's opening exchange, written by hand: ``initialize``, then ``initialized``."""
    client.write(
        b'{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {'
        b'"protocolVersion": "2025-06-18", "capabilities": {}, '
        b'"clientInfo": {"name": "raw", "version": "1"}}}'
    )
    assert client.read()["id"] == 0
    client.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')


def test_a_request_the_sdk_cannot_read_is_answered_and_serving_goes_on(tmp_path: Path) -> None:
    """JSON allows a lone surrogate escape (JavaScript's JSON.stringify writes one for half
    of an emoji's pair) and deep nesting; the SDK's parser refuses both and dropped the line,
    so the client waited forever. Such a request gets an error with its id, naming the
    argument, and the next call is served."""
    db = tmp_path / "mcp.db"
    state = _history(db)
    server = ServerProcess(["--db", str(db), "mcp"], tmp_path / "data", stdin=True)
    client = StdioClient(server)
    try:
        _handshake(client)
        client.write(_raw_request(1, "search_conversations", '{"text": "read \\ud83d"}'))
        surrogate = client.read()
        nested = "[" * 300 + "]" * 300
        client.write(_raw_request(2, "show_conversation", f'{{"conversation_id": {nested}}}'))
        too_deep = client.read()
        client.write(
            _raw_request(3, "list_checkpoints", json.dumps({"conversation_id": state["cid"]}))
        )
        served = client.read()
    finally:
        server.stop()
    assert surrogate["id"] == 1 and surrogate["error"]["code"] == -32602
    assert surrogate["error"]["message"] == (
        "invalid params: params.arguments.text is not valid Unicode text (surrogates not "
        "allowed, character 5); pass well-formed text."
    )
    assert too_deep["id"] == 2 and too_deep["error"]["code"] == -32602
    assert "more than 100 levels deep" in too_deep["error"]["message"]
    assert served["id"] == 3 and not served["result"]["isError"]


def test_a_request_python_cannot_read_either_is_answered_with_its_id(tmp_path: Path) -> None:
    """Nesting past Python's own recursion limit, and an integer of more digits than
    ``int`` converts, failed the second reading too, so the request got no answer and the
    client waited forever. Each member is now read on its own: the id and method are
    known, and the error names the member that cannot be read."""
    db = tmp_path / "mcp.db"
    _history(db)
    server = ServerProcess(["--db", str(db), "mcp"], tmp_path / "data", stdin=True)
    client = StdioClient(server)
    nested = "[" * 5000 + "]" * 5000
    try:
        _handshake(client)
        client.write(_raw_request(1, "search_conversations", f'{{"text": "a", "x": {nested}}}'))
        deep = client.read()
        client.write(_raw_request(2, "list_conversations", '{"limit": ' + "9" * 4301 + "}"))
        long_number = client.read()
        client.write(
            b'{"jsonrpc": "2.0", "id": 3, "method": "ping", "extra": ' + nested.encode() + b"}"
        )
        deep_member = client.read()
        client.write(b'{"jsonrpc": "2.0", "id": 4, "method": "ping"}')
        served = client.read()
    finally:
        server.stop()
    assert deep == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {
            "code": -32602,
            "message": "invalid params: params nests arrays and objects more than 100 levels "
            "deep; flatten the value.",
        },
    }
    assert long_number["id"] == 2 and long_number["error"] == {
        "code": -32602,
        "message": "invalid params: params holds an integer of 4,301 digits, over the 300 a "
        "value may have; send such a number as a string.",
    }
    assert deep_member["id"] == 3 and deep_member["error"] == {
        "code": -32600,
        "message": "invalid request: 'extra' nests arrays and objects more than 100 levels "
        "deep; flatten the value.",
    }
    assert served == {"jsonrpc": "2.0", "id": 4, "result": {}}


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc": "2.0", "id": ' + "9" * 4301 + ', "method": "tools/list", "params": {"a": 1}}',
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"a": '
        + "[" * 2000
        + "]" * 2000
        + "}} trailing",
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"a": '
        + "[" * 2000
        + "]" * 1999
        + "}}",
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"a": "\\ud800} ',
        '{"jsonrpc": "2.0", "id": 1 "method": "tools/call", "params": {"a": "\\ud800"}}',
    ],
)
def test_a_line_read_member_by_member_still_needs_to_be_one_json_object(line: str) -> None:
    """An id that is itself unreadable has nothing to answer with, and text that is not
    one whole JSON object (trailing text, an unclosed array, an unclosed string, a missing
    comma) is not a request, however deep or odd its parts."""
    from mcp.types import jsonrpc_message_adapter
    from pydantic import ValidationError

    from contextstore.server.mcp_stdio import unreadable_request_error

    with pytest.raises(ValidationError) as refused:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    assert unreadable_request_error(refused.value) is None


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": "\\ud800"}}',
        '{"jsonrpc": "2.0", "id": "\\ud800", "method": "tools/list"}',
        '{"jsonrpc": "2.0", "id": true, "method": "tools/call", "params": {"a": "\\ud800"}}',
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' + "[" * 2000 + "]" * 2000,
        "not json \\ud800",
    ],
)
def test_an_unreadable_line_without_an_id_to_answer_stays_unanswered(line: str) -> None:
    """A notification, an id that cannot be sent back, or text that is not JSON at all:
    nothing to answer (as before), and nothing raised."""
    from mcp.types import jsonrpc_message_adapter
    from pydantic import ValidationError

    from contextstore.server.mcp_stdio import unreadable_request_error

    with pytest.raises(ValidationError) as refused:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    assert unreadable_request_error(refused.value) is None


def test_a_request_with_an_envelope_the_sdk_refuses_is_answered_with_its_id(
    tmp_path: Path,
) -> None:
    """JSON that the SDK's message model refuses (no "jsonrpc", a method that is not a
    string, params that are not an object, a batch) was dropped without an answer, so the
    client waited forever for its id. Each request is answered with -32600 (-32602 for
    params by position) carrying its id; notifications and responses stay unanswered, and
    the next call is served."""
    db = tmp_path / "mcp.db"
    state = _history(db)
    server = ServerProcess(["--db", str(db), "mcp"], tmp_path / "data", stdin=True)
    client = StdioClient(server)
    lines = [
        b'{"id": 1, "method": "tools/list"}',
        b'{"jsonrpc": "1.0", "id": 2, "method": "tools/list"}',
        b'{"jsonrpc": "2.0", "id": "three", "method": 3}',
        b'{"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": []}',
        b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": "list_conversations"}',
        b'{"jsonrpc": "2.0", "id": 6, "result": 5}',  # a (bad) response: nothing to answer
        b'[{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, '
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}, '
        b'{"jsonrpc": "2.0", "id": 8, "method": "ping"}]',
        b"[]",
    ]
    try:
        _handshake(client)
        for line in lines:
            client.write(line)
        answers = [client.read() for _ in range(7)]
        client.write(
            _raw_request(9, "list_checkpoints", json.dumps({"conversation_id": state["cid"]}))
        )
        served = client.read()
    finally:
        server.stop()
    errors = {a["id"]: a["error"] for a in answers}
    assert list(errors) == [1, 2, "three", 4, 5, 7, 8]
    assert errors[1] == {"code": -32600, "message": 'invalid request: it needs "jsonrpc": "2.0".'}
    assert errors[2] == errors[1]
    assert errors["three"]["message"] == 'invalid request: it needs a "method" string.'
    assert errors[4]["code"] == -32602
    assert "params as an object of named params, not an array" in errors[4]["message"]
    assert errors[5]["message"] == "invalid request: params must be an object, or left out."
    assert errors[7] == errors[8] and errors[7]["code"] == -32600
    assert "not a batch" in errors[7]["message"]
    assert served["id"] == 9 and not served["result"]["isError"]


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc": "2.0", "method": "notifications/x", "params": []}',
        '{"jsonrpc": "2.0", "id": 1, "result": 5}',
        '{"jsonrpc": "2.0", "id": true, "method": 5}',
        '[{"jsonrpc": "2.0", "method": "notifications/x"}]',
        "[]",
        "5",
    ],
)
def test_a_refused_message_without_a_request_to_answer_stays_unanswered(line: str) -> None:
    """A notification, a response, an id MCP cannot carry, a batch of notifications:
    nothing to answer."""
    from mcp.types import jsonrpc_message_adapter
    from pydantic import ValidationError

    from contextstore.server.mcp_stdio import refused_request_errors

    with pytest.raises(ValidationError) as refused:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    assert refused_request_errors(refused.value) == []


def test_requests_piped_in_are_all_answered_before_the_server_ends(tmp_path: Path) -> None:
    """A script that writes its requests and closes stdin (``printf ... | contextstore
    mcp``) got answers to the first one or two: the SDK stopped serving at the end of the
    input, and the requests still being handled went unanswered. Every one is answered now,
    then the server exits 0."""
    import subprocess

    db = tmp_path / "mcp.db"
    state = _history(db)
    opening = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "script", "version": "1"},
        },
    }
    lines = [opening, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    calls = [
        ("list_conversations", {}),
        ("show_conversation", {"conversation_id": state["cid"]}),
        ("audit_conversation", {"conversation_id": state["audited"]}),
        ("list_checkpoints", {"conversation_id": state["cid"]}),
        ("search_conversations", {"text": "a.py"}),
    ] * 3
    for number, (name, arguments) in enumerate(calls, start=1):
        params = {"name": name, "arguments": arguments}
        lines.append({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params})
    lines.append({"jsonrpc": "2.0", "id": len(calls) + 1, "method": "tools/list"})
    finished = subprocess.run(
        [sys.executable, "-m", "contextstore", "--db", str(db), "mcp"],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        env=server_env(tmp_path / "data"),
        timeout=120,
    )
    answers = [json.loads(line) for line in finished.stdout.splitlines()]
    assert finished.returncode == 0, finished.stderr
    assert sorted(answer["id"] for answer in answers) == list(range(len(calls) + 2))
    assert all("result" in answer for answer in answers)
    assert not any(answer["result"].get("isError") for answer in answers[1:-1])


def test_a_cancelled_request_is_not_waited_for_at_the_end_of_the_input() -> None:
    """The client cancels a request (the server then sends no answer): the end of the
    input is not held back for it, while one still due is waited for."""
    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

    from contextstore.server.mcp_stdio import AnsweringReader, AnswerLedger

    async def body() -> None:
        to_server, read = anyio.create_memory_object_stream[SessionMessage | Exception](10)
        written, _replies = anyio.create_memory_object_stream[SessionMessage](10)
        ledger = AnswerLedger(written)
        reader = AnsweringReader(read, ledger, ledger)
        for request_id in (7, "eight"):
            request = JSONRPCRequest(jsonrpc="2.0", id=request_id, method="tools/list")
            await to_server.send(SessionMessage(request))
        cancel = JSONRPCNotification(
            jsonrpc="2.0", method="notifications/cancelled", params={"requestId": 7}
        )
        await to_server.send(SessionMessage(cancel))
        await to_server.aclose()
        for _ in range(3):
            await reader.receive()
        with anyio.move_on_after(0.2) as waited:
            await reader.receive()  # "eight" is still due: the end is held back
        assert waited.cancelled_caught
        answer = JSONRPCResponse(jsonrpc="2.0", id="eight", result={})
        await ledger.send(SessionMessage(answer))
        with anyio.fail_after(30), pytest.raises(anyio.EndOfStream):
            await reader.receive()

    anyio.run(body)


def test_requests_the_sdk_refuses_for_their_params_are_told_why(tmp_path: Path) -> None:
    """The SDK answered a request its model refused (a tools/call without a tool's name,
    arguments that are not an object), and any request before the handshake, with a bare
    "Invalid request parameters". The answer now names the param and what it must be, or
    the missing handshake, with the SDK's code; the next call is served."""
    db = tmp_path / "mcp.db"
    state = _history(db)
    server = ServerProcess(["--db", str(db), "mcp"], tmp_path / "data", stdin=True)
    client = StdioClient(server)
    lines = [
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}',
        b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": 7}}',
        _raw_request(3, "list_checkpoints", "5"),
        b'{"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"cursor": 5}}',
        b'{"jsonrpc": "2.0", "id": 5, "method": "resources/read"}',
    ]
    try:
        client.write(b'{"jsonrpc": "2.0", "id": 0, "method": "tools/list"}')
        early = client.read()
        _handshake(client)
        for line in lines:
            client.write(line)
        answers = {answer["id"]: answer["error"] for answer in (client.read() for _ in lines)}
        client.write(
            _raw_request(6, "list_checkpoints", json.dumps({"conversation_id": state["cid"]}))
        )
        served = client.read()
    finally:
        server.stop()
    assert early["id"] == 0 and early["error"]["code"] == -32602
    assert early["error"]["message"] == (
        "'tools/list' came before the session was initialized: send initialize first (then "
        "notifications/initialized)."
    )
    assert {error["code"] for error in answers.values()} == {-32602}
    messages = {request_id: error["message"] for request_id, error in answers.items()}
    assert messages == {
        1: "invalid params for 'tools/call': params.name is required.",
        2: "invalid params for 'tools/call': params.name must be a string.",
        3: "invalid params for 'tools/call': params.arguments must be an object.",
        4: "invalid params for 'tools/list': params.cursor must be a string.",
        5: "invalid params for 'resources/read': params.uri is required.",
    }
    assert served["id"] == 6 and not served["result"]["isError"]


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tools/call", {"name": "render", "arguments": {}}),
        ("tools/list", None),
        ("tools/list", {}),
        ("ping", None),
        ("no/such/method", {"name": 7}),
    ],
)
def test_params_the_sdk_takes_or_of_a_method_it_does_not_know_have_no_problem(
    method: str, params: object
) -> None:
    from contextstore.server.mcp_stdio import params_problems

    assert params_problems(method, params) == []


def test_a_bare_refusal_of_params_the_sdk_model_takes_after_the_handshake_says_so() -> None:
    from contextstore.server.mcp_stdio import explained_refusal

    assert explained_refusal("tools/list", {}, initialized=True) == (
        "invalid params for 'tools/list': the MCP SDK refused them."
    )
    assert "before the session was initialized" in explained_refusal(
        "tools/list", {}, initialized=False
    )
    assert explained_refusal("initialize", {}, initialized=False).startswith(
        "invalid params for 'initialize': params.protocolVersion is required"
    )
