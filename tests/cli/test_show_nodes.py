"""``contextstore show CID --nodes``: the typed nodes, active or (``--pristine``) as stored."""

from __future__ import annotations

from pathlib import Path

from contextstore import ContextStore
from tests.cli.conftest import run
from tests.conftest import assistant, file_read, text, tool_result, tool_use, user


def _db(tmp_path: Path) -> tuple[str, str]:
    db = str(tmp_path / "n.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append_many(
            cid,
            [
                user("<task>t</task>"),
                assistant("original answer"),
                assistant(tool_use("t1", "read_file", file_path="a.py", offset=0, limit=3)),
                user(file_read("t1", "a.py", "one\ntwo\nthree\n")),
            ],
        )
        store.add_context_update(cid, 1, 0, "rewritten answer")
    return db, cid


def test_show_nodes_prints_the_active_nodes_and_pristine_the_stored_ones(tmp_path: Path) -> None:
    db, cid = _db(tmp_path)
    active = run("--db", db, "show", cid, "--nodes")
    assert active.code == 0, active.err
    assert active.out.startswith(f"{cid}, active nodes, now: 4 nodes")
    assert "file_content" in active.out and "a.py:1-3" in active.out
    assert "manual" in active.out and "rewritten answer" in active.out
    pristine = run("--db", db, "show", cid, "--nodes", "--pristine")
    assert pristine.out.startswith(f"{cid}, pristine nodes, now: 4 nodes")
    assert "original answer" in pristine.out and "rewritten answer" not in pristine.out


def test_show_nodes_json(tmp_path: Path) -> None:
    db, cid = _db(tmp_path)
    doc = run("--db", db, "show", cid, "--nodes", "--json").json()
    assert set(doc) == {"conversation_id", "as_of", "view", "nodes"}
    assert doc["view"] == "active"
    by_id = {n["id"]: n for n in doc["nodes"]}
    assert by_id["m3.b0"]["node_type"] == "file_content"
    assert (by_id["m3.b0"]["path"], by_id["m3.b0"]["line_start"], by_id["m3.b0"]["line_end"]) == (
        "a.py",
        1,
        3,
    )
    assert by_id["m1.b0"]["rewritten_by"] == "manual"
    pristine = run("--db", db, "show", cid, "--nodes", "--pristine", "--json").json()
    assert pristine["view"] == "pristine"
    assert {n["id"]: n for n in pristine["nodes"]}["m1.b0"]["text"] == "original answer"


def test_show_nodes_refuses_a_provider_format(tmp_path: Path) -> None:
    db, cid = _db(tmp_path)
    refused = run("--db", db, "show", cid, "--nodes", "--format", "gemini")
    assert refused.code == 2 and "--nodes" in refused.err and "Traceback" not in refused.err


def _cut_db(tmp_path: Path) -> tuple[str, str]:
    """Messages 2-3 hidden: message 4 holds only the result of the hidden call ``t1``,
    which the view drops (message 1's ``t0`` gets a ``result missing`` placeholder);
    message 6's result is a list of two texts, its first rewritten."""
    db = str(tmp_path / "cut.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append_many(
            cid,
            [
                user("<task>t</task>"),
                assistant(tool_use("t0", "read_file", path="a.py")),
                user(file_read("t0", "a.py", "one\n")),
                assistant(tool_use("t1", "read_file", path="b.py")),
                user(file_read("t1", "b.py", "hidden call's file\n")),
                assistant(tool_use("t2", "write_file", path="c.py")),
                user(tool_result("t2", [text("first item"), text("second item")])),
            ],
        )
        store.set_deleted_range(cid, 3)
        store.add_context_update(cid, 6, 0, "rewritten result")
    return db, cid


def test_show_nodes_leaves_out_the_orphan_result_the_view_drops(tmp_path: Path) -> None:
    db, cid = _cut_db(tmp_path)
    shown = run("--db", db, "show", cid, "--nodes", "--json")
    assert shown.code == 0, shown.err
    nodes = shown.json()["nodes"]
    assert [n["id"] for n in nodes] == ["m0.b0", "m1.b0", "m5.b0", "m6.b0"]
    table = run("--db", db, "show", cid, "--nodes")
    assert table.out.startswith(f"{cid}, active nodes, now: 4 nodes")
    assert "m4.b0" not in table.out and "hidden call's file" not in table.out
    assert "m4.b0" in run("--db", db, "show", cid, "--nodes", "--pristine").out
    rows = run("--db", db, "sql", "SELECT node_id FROM active_nodes", "--json").json()
    assert [r["node_id"] for r in rows] == [n["id"] for n in nodes]


def test_a_rewritten_list_result_shows_its_other_items(tmp_path: Path) -> None:
    db, cid = _cut_db(tmp_path)
    (node,) = [
        n
        for n in run("--db", db, "show", cid, "--nodes", "--json").json()["nodes"]
        if n["id"] == "m6.b0"
    ]
    assert node["text"] == "rewritten result\nsecond item"
    query = "SELECT original_text, effective_text FROM effective_blocks WHERE message_idx = 6"
    (row,) = run("--db", db, "sql", query, "--json").json()
    assert row == {"original_text": "first item\nsecond item", "effective_text": node["text"]}
