"""Typed nodes in the store: written with their blocks, both views, the documented queries,
the invariants on every write."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore, IntegrityViolationError, NodeInvariantError
from contextstore.core import nodes as core_nodes
from contextstore.core.nodes import NodeRow
from contextstore.core.notices import TRUNCATION_NOTICE
from contextstore.core.tokens import MESSAGE_OVERHEAD_TOKENS, block_tokens
from tests.conftest import assistant, file_read, text, tool_result, tool_use, user

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def readme_query(marker: str) -> str:
    """The README's SQL statement whose comment contains ``marker``."""
    for block in re.findall(r"```sql\n(.*?)```", README, flags=re.S):
        for statement in block.split(";"):
            if marker in statement:
                return statement.strip()
    raise AssertionError(f"README has no SQL statement about {marker!r}")


FILE_TOKENS = readme_query("Tokens spent on file contents per file")
PROMPT_CHANGES = readme_query("Which requests changed the system prompt or the tools")


def _nodes(store: ContextStore, cid: str, view: str = "pristine") -> dict[str, Any]:
    return {n.id: n for n in store.nodes(cid, view=view)}  # type: ignore[arg-type]


def test_append_types_each_block_and_stores_its_token_count(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, "user", "<task>fix the bug</task>")
    call = tool_use("t1", path="src/a.py")
    appended = store.append(cid, "assistant", [text("reading"), call])
    # the result comes in a later append: its call is read back from the store
    store.append(cid, "user", [file_read("t1", "src/a.py", "print(1)\n")])
    store.append(cid, "assistant", [tool_use("t2", "execute_command", command="ls")])
    store.append(cid, "user", [tool_result("t2", "a.py")])
    found = _nodes(store, cid)
    assert [(n.node_type, n.path) for n in found.values()] == [
        ("user_prompt", None),
        ("assistant_text", None),
        ("tool_call", "src/a.py"),
        ("file_content", "src/a.py"),
        ("tool_call", None),
        ("tool_output", None),
    ]
    assert list(found) == ["m0.b0", "m1.b0", "m1.b1", "m2.b0", "m3.b0", "m4.b0"]
    count = store.token_counter.count
    assert found["m1.b1"].token_count == block_tokens(call, count)
    assert found["m1.b0"].token_count + found["m1.b1"].token_count == (
        appended.token_count - MESSAGE_OVERHEAD_TOKENS
    )
    assert found["m2.b0"].tool_use_id == "t1" and found["m1.b1"].tool_name == "read_file"


def test_append_many_and_imports_type_results_by_calls_in_the_same_batch(
    store: ContextStore,
) -> None:
    cid = store.create_conversation().id
    store.append_many(
        cid,
        [
            user("task"),
            assistant(tool_use("g1", "read_file", file_path="lib.ts", offset=10, limit=20)),
            user(tool_result("g1", "export const x = 1")),
        ],
    )
    node = _nodes(store, cid)["m2.b0"]
    assert (node.node_type, node.path, node.line_start, node.line_end) == (
        "file_content",
        "lib.ts",
        11,
        30,
    )


def test_both_views_side_by_side(store: ContextStore) -> None:
    cid = store.create_conversation().id
    messages = [user("<task>t</task>"), assistant("first answer")]
    for i in range(4):
        messages.append(assistant(tool_use(f"t{i}", path=f"f{i}.py")))
        messages.append(user(file_read(f"t{i}", f"f{i}.py", "body " * 50)))
    messages[2:2] = [user("more")]
    store.append_many(cid, messages)
    before = store.checkpoint(cid, "before")
    store.truncate(cid, keep="half")
    hidden = store.deleted_range(cid)
    assert hidden is not None
    pristine = store.nodes(cid, view="pristine")
    active = store.nodes(cid, view="active")
    assert len(pristine) == sum(len(m["content"]) for m in store.messages(cid))
    shown = {n.message_idx for n in active}
    assert shown.isdisjoint(range(hidden[0], hidden[1] + 1))
    # The first message after the cut holds only the result of a hidden call: the view
    # drops it (a result missing placeholder answers message 1), so it has no node.
    first = messages[hidden[1] + 1]["content"]
    assert [b["tool_use_id"] for b in first] == [messages[hidden[1]]["content"][0]["id"]]
    assert shown == {0, 1, *range(hidden[1] + 2, len(messages))}
    notice = next(n for n in active if n.rewritten_by == "truncation_notice")
    assert notice.id == "m1.b0" and notice.node_type == "memory_summary"
    assert notice.text is not None and notice.text.startswith(TRUNCATION_NOTICE[:40])
    assert notice.token_count == store.token_counter.count(notice.text)
    original = next(n for n in pristine if n.id == "m1.b0")
    assert original.node_type == "assistant_text" and original.text == "first answer"
    assert original.rewritten_by is None
    # the past: as of the checkpoint, nothing was hidden or rewritten yet
    then = store.nodes(cid, view="active", as_of=before.ts)
    assert [n.id for n in then] == [n.id for n in pristine]
    assert all(n.rewritten_by is None for n in then)


def test_active_view_applies_the_stores_pipeline(tmp_path: Path) -> None:
    from contextstore.processors import OutputTrimmer, Pipeline

    with ContextStore.open(tmp_path / "p.db", pipeline=Pipeline([OutputTrimmer(400)])) as store:
        cid = store.create_conversation().id
        store.append_many(
            cid,
            [
                user("t"),
                assistant(tool_use("t1", path="big.log")),
                user(file_read("t1", "big.log", "x\n" * 2_000)),
            ],
        )
        trimmed = _nodes(store, cid, "active")["m2.b0"]
        stored = _nodes(store, cid)["m2.b0"]
    assert trimmed.rewritten_by == "processor" and trimmed.node_type == "file_content"
    assert trimmed.token_count < stored.token_count


def test_sql_views_match_the_python_views(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append_many(
        cid, [user("u0"), assistant("a1"), user("u2"), assistant("a3"), user("u4"), assistant("a5")]
    )
    store.truncate(cid, keep="half")
    store.add_context_update(cid, 4, 0, "rewritten")
    for view in ("pristine", "active"):
        rows = store.query(
            f"SELECT node_id, node_type, text FROM {view}_nodes "
            f"WHERE conversation_id = '{cid}' ORDER BY message_idx, block_idx"
        ).rows
        python = [(n.id, n.node_type, n.text) for n in store.nodes(cid, view=view)]  # type: ignore[arg-type]
        assert [tuple(r) for r in rows] == python
    (token_count, pristine_count, kind) = store.query(
        "SELECT token_count, pristine_token_count, update_kind FROM active_nodes "
        f"WHERE conversation_id = '{cid}' AND node_id = 'm4.b0'"
    ).rows[0]
    assert token_count is None and pristine_count > 0 and kind == "manual"


def _orphans_and_a_list_rewrite(store: ContextStore) -> str:
    """Messages 2-5 hidden; message 6 answers the hidden message 5's calls (``t0``, an id
    message 1 issued too, and ``t2``): the view drops both results. Message 8 holds a tool
    result as a list of two texts, its first rewritten."""
    cid = store.create_conversation().id
    store.append_many(
        cid,
        [
            user("task"),
            assistant(tool_use("t0", "run", cmd="ls")),
            user(tool_result("t0", "a.py")),
            assistant(tool_use("t1", "run", cmd="ls")),
            user(tool_result("t1", "a.py")),
            assistant(tool_use("t0", "run", cmd="env"), tool_use("t2", "run")),
            user(
                tool_result("t0", "TOKEN=[REDACTED:github_token]"),
                tool_result("t2", "[REDACTED:github_token]"),
                "go on",
            ),
            assistant(tool_use("t3", "write_file", path="b.py")),
            user(tool_result("t3", [text("first item"), text("second item")])),
        ],
    )
    store.set_deleted_range(cid, 5)
    store.add_context_update(cid, 8, 0, "rewritten result")
    return cid


def test_active_nodes_leave_out_the_orphan_results_the_view_drops(store: ContextStore) -> None:
    """``show --nodes``, ``nodes(view="active")`` and ``active_nodes`` listed the results in
    the first message after the cut that the model never receives (and counted them)."""
    cid = _orphans_and_a_list_rewrite(store)
    active = store.nodes(cid, view="active")
    assert [n.id for n in active] == ["m0.b0", "m1.b0", "m6.b2", "m7.b0", "m8.b0"]
    rows = store.query(
        "SELECT node_id, node_type, text FROM active_nodes "
        f"WHERE conversation_id = '{cid}' ORDER BY message_idx, block_idx"
    ).rows
    assert [tuple(r) for r in rows] == [(n.id, n.node_type, n.text) for n in active]
    # masked_secrets counts the blocks active_nodes lists: the dropped results' markers not.
    assert store.audit(cid).masked_secrets == []


def test_a_text_rewrite_of_a_list_result_keeps_its_other_items(store: ContextStore) -> None:
    """The rewrite replaces the first text item; the model is still sent the second, which
    ``effective_blocks``, ``active_nodes`` and the active nodes left out."""
    cid = _orphans_and_a_list_rewrite(store)
    sent = store.render(cid)[-1]["content"][0]["content"]
    assert [item["text"] for item in sent] == ["rewritten result", "second item"]
    node = next(n for n in store.nodes(cid, view="active") if n.id == "m8.b0")
    assert node.text == "rewritten result\nsecond item"
    assert node.token_count == store.token_counter.count(node.text)
    ((original, effective),) = store.query(
        "SELECT original_text, effective_text FROM effective_blocks "
        f"WHERE conversation_id = '{cid}' AND message_idx = 8"
    ).rows
    assert (original, effective) == ("first item\nsecond item", node.text)
    ((shown,),) = store.query(
        f"SELECT text FROM active_nodes WHERE conversation_id = '{cid}' AND node_id = 'm8.b0'"
    ).rows
    assert shown == node.text


def test_view_must_be_pristine_or_active(memory_store: ContextStore) -> None:
    cid = memory_store.create_conversation().id
    with pytest.raises(Exception, match="pristine, active"):
        memory_store.nodes(cid, view="master")  # type: ignore[arg-type]


def test_readme_query_tokens_per_file(store: ContextStore) -> None:
    cid = store.create_conversation().id
    other = store.create_conversation().id
    for conversation in (cid, other):
        store.append_many(
            conversation,
            [
                user('<task>see <file_content path="docs/a.md">alpha</file_content></task>'),
                assistant(tool_use("t1", path="src/x.py")),
                user(file_read("t1", "src/x.py", "x = 1\n" * 30)),
                assistant(tool_use("t2", path="src/x.py")),
                user(file_read("t2", "src/x.py", "x = 2\n" * 30)),
            ],
        )
    rows = store.query(FILE_TOKENS).rows
    mine = {(r[1]): (r[2], r[3]) for r in rows if r[0] == cid}
    by_node = [n for n in store.nodes(cid) if n.node_type == "file_content"]
    assert set(mine) == {"docs/a.md", "src/x.py"}
    assert mine["src/x.py"] == (
        2,
        sum(n.token_count for n in by_node if n.path == "src/x.py"),
    )
    assert mine["docs/a.md"][0] == 1
    assert len(rows) == 4


def test_readme_query_requests_that_changed_the_prompt_or_tools(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, "user", "hello")
    tools = [{"name": "read_file", "description": "r", "input_schema": {"type": "object"}}]
    more = [*tools, {"name": "ls", "description": "l", "input_schema": {"type": "object"}}]
    ids = [
        store.prepare_request(cid, system="A", tools=tools).request_id,  # first: a change
        store.prepare_request(cid, system="A", tools=tools).request_id,
        store.prepare_request(cid, system="B", tools=tools).request_id,  # system changed
        store.prepare_request(cid, system="B", tools=more).request_id,  # tools changed
        store.prepare_request(cid, system="B", tools=more).request_id,
        store.prepare_request(cid, system=None, tools=more).request_id,  # system dropped
    ]
    store.record_request(cid, tokens_in=5)  # not prepared here: no prompt to compare
    rows = [r for r in store.query(PROMPT_CHANGES).rows if r[0] == cid]
    changed = [(r[1], bool(r[3]), bool(r[4])) for r in rows]
    assert changed == [
        (ids[0], True, True),
        (ids[2], True, False),
        (ids[3], False, True),
        (ids[5], True, False),
    ]
    stored = store.query(
        "SELECT node_type, content, token_count FROM context_nodes ORDER BY node_type, content"
    ).rows
    assert [(r[0], r[1]) for r in stored if r[0] == "system_prompt"] == [
        ("system_prompt", "A"),
        ("system_prompt", "B"),
    ]
    assert sum(1 for r in stored if r[0] == "tool_definitions") == 2
    assert all(r[2] == store.token_counter.count(r[1]) for r in stored)


def test_a_broken_invariant_refuses_the_whole_write(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = store.create_conversation().id
    store.append(cid, "user", "kept")
    real = core_nodes.node_rows

    def miscounted(kinds: Any, counts: Any) -> list[NodeRow]:
        return [row._replace(token_count=row.token_count + 1) for row in real(kinds, counts)]

    monkeypatch.setattr(core_nodes, "node_rows", miscounted)
    with pytest.raises(NodeInvariantError, match="recount") as raised:
        store.append_many(cid, [assistant("a"), user("b")])
    assert isinstance(raised.value, IntegrityViolationError)
    monkeypatch.setattr(core_nodes, "node_rows", real)
    assert store.messages(cid) == [{"role": "user", "content": "kept"}]
    assert len(store.nodes(cid)) == 1


def _lookups(store: ContextStore) -> list[str]:
    from sqlalchemy import event

    seen: list[str] = []

    def listen(_c: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if "tool_use_id IN" in statement:
            seen.append(statement)

    event.listen(store.database.engine, "before_cursor_execute", listen)
    return seen


def test_a_result_of_a_call_this_store_appended_needs_no_lookup(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    with ContextStore.open(path) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "task")
        store.append(cid, "assistant", [tool_use("t1", path="a.py")])
        seen = _lookups(store)
        store.append(cid, "user", [file_read("t1", "a.py", "x")])
        assert seen == []
        store.append(cid, "assistant", [tool_use("t2", path="b.py")])
    with ContextStore.open(path) as reopened:
        seen = _lookups(reopened)
        reopened.append(cid, "user", [file_read("t2", "b.py", "y")])
        assert len(seen) == 1
        typed = [(n.node_type, n.path) for n in reopened.nodes(cid)]
    assert typed[2] == ("file_content", "a.py") and typed[-1] == ("file_content", "b.py")


@pytest.mark.parametrize("removal", ["rollback", "purge", "delete", "transaction"])
def test_a_result_answering_a_removed_call_is_typed_as_the_rows_say(
    store: ContextStore, removal: str
) -> None:
    """A call this store appended and then removed (rolled back, deleted with its
    conversation, undone with its transaction) no longer types a result with its id: the
    result answers no stored call, as a store opened afresh types it. Until 2026-12-05 the
    store's memory of its appends typed it a read of the removed call's file, and the
    audit's files read listed a file no call in the conversation read."""
    cid = store.create_conversation(id="c-removed").id
    store.append(cid, [user("task"), assistant("ok"), user("go on")])
    store.checkpoint(cid, "before")
    call = assistant(tool_use("t1", path="secret.py"))
    if removal == "transaction":
        with pytest.raises(RuntimeError), store.transaction():
            store.append(cid, [call])
            raise RuntimeError("the agent gave up")
    else:
        store.append(cid, [call])
    if removal in ("rollback", "purge"):
        store.rollback(cid, "before", purge=removal == "purge")
    elif removal == "delete":
        store.delete_conversation(cid)
        store.create_conversation(id=cid)
        store.append(cid, [user("task"), assistant("ok"), user("go on")])
    store.append(cid, [assistant("again"), user(tool_result("t1", "hello"))])
    typed = _nodes(store, cid)["m4.b0"]
    assert (typed.node_type, typed.path) == ("tool_output", None)
