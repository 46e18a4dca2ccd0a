"""A refused call names the argument it refuses, first, in the caller's terms: the message is
the whole interface a caller has to find their mistake (README "Errors")."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore, InvalidInputError, NotFoundError
from contextstore.core.lineage import NodeRef
from contextstore.core.rows import MessageRow, RequestRow, UpdateRow
from tests.conftest import assistant, tool_use, user

START = 1_700_000_000_000

Call = Callable[[ContextStore, str], Any]

CASES: list[tuple[str, Call, str]] = [
    (
        "update block_idx",
        lambda s, c: s.add_context_update(c, 1, "0", "x", kind="manual", source="t"),
        r"^block_idx must",
    ),
    (
        "range tokens_total",
        lambda s, c: s.set_deleted_range(c, 2, tokens_total=-1),
        r"^tokens_total must",
    ),
    (
        "truncate first_user_replacement",
        lambda s, c: s.truncate(c, first_user_replacement="yes"),
        r"^first_user_replacement must be True or False\.$",
    ),
    (
        "request cache_writes",
        lambda s, c: s.record_request(c, cache_writes=-1),
        r"^cache_writes must",
    ),
    (
        "restore rollback_id",
        lambda s, c: s.restore(c, None),
        r"^rollback_id must",
    ),
    (
        "lineage from a block",
        lambda s, c: s.add_lineage(c, NodeRef.block(0, 0), (1, 0)),
        r"^derived must be an update or a range node; a stored block is an original\.$",
    ),
    (
        "prepare tools shape",
        lambda s, c: s.prepare_request(c, tools=[{"description": "no name"}]),
        r"^tools must be a list of tool definitions like \{'name'",
    ),
    (
        "prepare tools value",
        lambda s, c: s.prepare_request(c, tools=[{"name": "t", "limit": math.nan}]),
        r"^tools\[0\]\.limit is nan",
    ),
    (
        "prepare tool name with a space",
        lambda s, c: s.prepare_request(c, tools=[{"name": "a b", "input_schema": {}}]),
        r"^tools\[0\]\.name 'a b' is not a name the providers accept",
    ),
    (
        "prepare tool name empty",
        lambda s, c: s.prepare_request(c, format="openai", tools=[{"name": ""}]),
        r"^tools\[0\]\.name '' is not a name",
    ),
    (
        "prepare tool name too long",
        lambda s, c: s.prepare_request(c, format="gemini", tools=[{"name": "x" * 65}]),
        r"^tools\[0\]\.name 'x+' is not a name",
    ),
    (
        "prepare tool name twice",
        lambda s, c: s.prepare_request(c, format="openai", tools=[{"name": "t"}, {"name": "t"}]),
        r"^tools\[1\]\.name 't' is already the name of tools\[0\]",
    ),
    (
        "prepare anthropic tool without a schema",
        lambda s, c: s.prepare_request(c, tools=[{"name": "t", "description": "d"}]),
        r"^tools\[0\] \('t'\) has no input_schema",
    ),
    (
        "import a foreign row",
        lambda s, c: s.import_timeline(c, [object()]),
        r"^row 0 is a object; pass rows from contextstore\.core\.rows\.$",
    ),
    (
        "import request details",
        lambda s, c: s.import_timeline(c, [RequestRow(START + 100, details=[1])]),
        r"details must be a mapping",
    ),
    (
        "import tool_input on text",
        lambda s, c: s.import_timeline(c, [UpdateRow(START + 100, 0, 0, "{}", mode="tool_input")]),
        r"^row 0 \(context_updates, ts \d+\): mode='tool_input' applies to tool_use blocks only\.$",
    ),
    *[
        (
            f"tool_input {label}",
            lambda s, c, text=text: s.add_context_update(c, 1, 1, text, mode="tool_input"),
            r"^a tool_input update's text must be the JSON of",
        )
        for label, text in [
            ("not JSON", "not json"),
            ("NaN", '{"p": NaN}'),
            ("an array", "[1, 2]"),
            ("a string", '"path"'),
        ]
    ],
    (
        "tool_input infinity",
        lambda s, c: s.add_context_update(c, 1, 1, '{"p": 1e999}', mode="tool_input"),
        r"inf",
    ),
    (
        "import tool_input not an object",
        lambda s, c: s.import_timeline(c, [UpdateRow(START + 100, 1, 1, "[1]", mode="tool_input")]),
        r"^row 0 \(context_updates, ts \d+\): a tool_input update's text must be the JSON of",
    ),
]


@pytest.fixture
def conversation(store: ContextStore) -> str:
    cid = store.create_conversation(created_ts=START).id
    store.import_timeline(
        cid,
        [
            MessageRow(START + 1, user("task")),
            MessageRow(START + 2, assistant("reading", tool_use("t1", "read_file", path="a"))),
            MessageRow(
                START + 3, user({"type": "tool_result", "tool_use_id": "t1", "content": "x"})
            ),
            MessageRow(START + 4, assistant("done")),
        ],
    )
    return cid


@pytest.mark.parametrize(("call", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_refusal_names_what_it_refuses(
    store: ContextStore, conversation: str, call: Call, expected: str
) -> None:
    before = store.row_counts()
    with pytest.raises(InvalidInputError, match=expected):
        call(store, conversation)
    assert store.row_counts() == before


def test_a_tool_input_rewrite_of_a_tool_call_is_imported(
    store: ContextStore, conversation: str
) -> None:
    store.import_timeline(
        conversation, [UpdateRow(START + 100, 1, 1, '{"path": "b"}', mode="tool_input")]
    )
    assert store.render(conversation)[1]["content"][1]["input"] == {"path": "b"}


def test_a_range_keeps_the_total_that_triggered_it(store: ContextStore, conversation: str) -> None:
    store.set_deleted_range(conversation, 2, tokens_total=500, reason="test")
    (event,) = store.audit(conversation).truncations
    assert (event.tokens_total, event.end_idx) == (500, 2)


def test_a_read_only_store_needs_an_existing_file(tmp_path: Path) -> None:
    """Not found, as without ``auto_migrate`` (it was ``InvalidInputError``, so the command
    line said exit 2 for a missing file with --read-only and exit 3 without)."""
    missing = tmp_path / "missing.db"
    with pytest.raises(
        NotFoundError, match=r"^there is no database at .*missing\.db; check the path \(a store"
    ):
        ContextStore.open(missing, read_only=True)
    assert not missing.exists()


def test_tools_the_providers_accept_are_prepared(store: ContextStore, conversation: str) -> None:
    tools = [
        {"name": "read_file", "description": "Read", "input_schema": {"type": "object"}},
        {"name": "x" * 64, "input_schema": {"type": "object", "properties": {}}},
        {"type": "web_search_20250305", "name": "web_search"},  # a server tool: no schema
    ]
    ctx = store.prepare_request(conversation, tools=tools)
    assert [t["name"] for t in ctx.payload["tools"]] == ["read_file", "x" * 64, "web_search"]
    assert store.prepare_request(conversation, format="openai", tools=[{"name": "t"}]).payload
