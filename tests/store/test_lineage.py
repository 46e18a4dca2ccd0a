"""Lineage as rows: rewrites replace nodes, summaries abstract them, edges only point back
in time, go with a rollback, and are walked by the README's recursive query."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import text

from contextstore import ContextStore, IntegrityViolationError, InvalidInputError
from contextstore.core.lineage import NodeRef
from tests.conftest import assistant, user

README = Path(__file__).resolve().parents[2] / "README.md"


def _history(store: ContextStore, count: int = 8) -> str:
    cid = store.create_conversation().id
    store.append(cid, [user(f"m{i}") if i % 2 == 0 else assistant(f"m{i}") for i in range(count)])
    return cid


def _update(store: ContextStore, cid: str, m: int, b: int, new_text: str) -> NodeRef:
    ts = store.add_context_update(cid, m, b, new_text)
    return NodeRef.update(ts, m, b)


def test_a_rewrite_replaces_the_visible_node_and_a_rewrite_of_it_replaces_it(
    store: ContextStore,
) -> None:
    cid = _history(store)
    first = _update(store, cid, 2, 0, "distilled")
    second = _update(store, cid, 2, 0, "masked")
    found = store.lineage(cid, second)
    assert [(e.derived, e.relation, e.source, e.depth) for e in found.ancestors] == [
        (second, "replaces", first, 1),
        (first, "replaces", store.lineage(cid, (2, 0)).node, 2),
    ]
    down = store.lineage(cid, (2, 0)).descendants
    assert [(e.derived, e.depth) for e in down] == [(first, 1), (second, 2)]


def test_a_summary_of_summaries_abstracts_the_earlier_summary_and_what_it_newly_hides(
    store: ContextStore,
) -> None:
    cid = _history(store, 10)
    masked = _update(store, cid, 3, 0, "masked")
    first_ts = store.set_deleted_range(cid, 3, summary="first")
    second_ts = store.set_deleted_range(cid, 5, summary="second of the first")
    first, second = NodeRef.range(first_ts), NodeRef.range(second_ts)
    up = store.lineage(cid, second).ancestors
    direct = {(e.source.kind, e.source.message_idx) for e in up if e.depth == 1}
    assert direct == {("range", None), ("block", 4), ("block", 5)}
    deeper = {(e.derived.key, e.source.kind, e.source.message_idx) for e in up if e.depth == 2}
    # the first summary abstracts message 2's block and message 3 as it was seen: masked
    assert deeper == {(first.key, "block", 2), (first.key, "update", 3)}
    assert (masked.key, "block", 3) in {
        (e.derived.key, e.source.kind, e.source.message_idx) for e in up if e.depth == 3
    }


def test_lineage_that_points_forward_in_time_is_refused(store: ContextStore) -> None:
    cid = _history(store)
    old = _update(store, cid, 2, 0, "old")
    new = _update(store, cid, 3, 0, "new")
    before = store.lineage_edges(cid)
    with pytest.raises(IntegrityViolationError, match="cycle"):
        store.add_lineage(cid, old, new)
    with pytest.raises(IntegrityViolationError, match="cycle"):
        store.add_lineage(cid, old, old)
    assert store.lineage_edges(cid) == before
    assert store.add_lineage(cid, new, old, relation="abstracts") is True
    assert store.add_lineage(cid, new, old, relation="abstracts") is False
    with pytest.raises(InvalidInputError, match="no update node"):
        store.add_lineage(cid, NodeRef.update(1, 2, 0), (2, 0))


def test_the_database_refuses_an_edge_to_a_newer_node(store: ContextStore) -> None:
    cid = _history(store)
    node = _update(store, cid, 2, 0, "x")
    assert node.ts is not None
    insert = text(
        "INSERT INTO lineage (conversation_id, ts, derived_kind, relation, "
        "source_kind, source_ts) VALUES (:c, :ts, 'range', 'abstracts', 'range', :ts)"
    )
    with pytest.raises(Exception, match=r"(?i)check|constraint"):
        store.database.write(
            lambda connection: connection.execute(insert, {"c": cid, "ts": node.ts})
        )


def test_lineage_goes_with_a_rollback_and_comes_back_with_a_restore(store: ContextStore) -> None:
    cid = _history(store)
    kept = _update(store, cid, 2, 0, "kept")
    cp = store.checkpoint(cid, "cp")
    _update(store, cid, 2, 0, "gone")
    store.set_deleted_range(cid, 4, summary="gone too")
    edges = store.lineage_edges(cid)
    report = store.rollback(cid, "cp")
    assert report.removed["lineage"] == len(edges) - 1
    assert [e.derived for e in store.lineage_edges(cid)] == [kept]
    assert all(e.derived.ts is not None and e.derived.ts <= cp.ts for e in store.lineage_edges(cid))
    assert store.lineage(cid, kept).descendants == ()
    assert report.rollback_id is not None
    store.restore(cid, report.rollback_id)
    assert store.lineage_edges(cid) == edges


def test_a_derived_node_whose_source_was_rolled_back_goes_with_it(store: ContextStore) -> None:
    cid = _history(store, 4)
    cp = store.checkpoint(cid, "cp")
    store.append(cid, [user("later")])
    derived = _update(store, cid, 4, 0, "derived from a rolled-back message")
    assert store.lineage(cid, derived).ancestors[0].source.message_idx == 4
    store.rollback(cid, cp.ts)
    assert store.lineage_edges(cid) == []


def test_a_fork_keeps_its_lineage(store: ContextStore) -> None:
    cid = _history(store)
    node = _update(store, cid, 2, 0, "x")
    fork = store.fork(cid)
    assert store.lineage_edges(fork.id) == store.lineage_edges(cid)
    assert store.lineage(fork.id, node).ancestors[0].source.message_idx == 2


def _readme_query(title: str) -> str:
    section = README.read_text(encoding="utf-8").split(title, 1)[1]
    found = re.search(r"```sql\n(.*?)```", section, re.S)
    assert found is not None, title
    return found.group(1)


def test_the_readme_recursive_query_walks_what_the_store_walks(store: ContextStore) -> None:
    cid = _history(store, 10)
    _update(store, cid, 3, 0, "masked")
    store.set_deleted_range(cid, 3, summary="first")
    last = NodeRef.range(store.set_deleted_range(cid, 5, summary="second"))
    query = _readme_query("<!-- lineage-walk -->")
    with store.database.read() as connection:
        rows = connection.execute(text(query.split(";")[0])).all()
    walked = {(r.derived_ts, r.source_kind, r.source_ts, r.source_message_idx) for r in rows}
    expected = {
        (e.derived.ts, e.source.kind, e.source.ts, e.source.message_idx)
        for e in store.lineage(cid, last).ancestors
    }
    assert walked == expected and len(expected) >= 6


@pytest.mark.parametrize(
    "node",
    [
        NodeRef("range", None),
        NodeRef("update", None, 0, 0),
        NodeRef("range", 5, 0, None),
        NodeRef("block", None, 0, -1),
        NodeRef("block", None, -1, 0),
    ],
    ids=[
        "range without ts",
        "update without ts",
        "range with a message",
        "negative block",
        "negative message",
    ],
)
def test_a_node_missing_its_identity_is_refused(store: ContextStore, node: NodeRef) -> None:
    cid = store.create_conversation().id
    store.append(cid, [user("a"), assistant("b")])
    with pytest.raises(InvalidInputError, match=r"^node"):
        store.lineage(cid, node)


def test_add_lineage_names_the_end_it_refuses(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, [user("a"), assistant("b")])
    with pytest.raises(InvalidInputError, match=r"^derived must be a NodeRef"):
        store.add_lineage(cid, "nope", (0, 0))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"^source must be a NodeRef"):
        store.add_lineage(cid, NodeRef.range(1), "nope")  # type: ignore[arg-type]


def test_a_node_the_conversation_lacks_is_refused(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, [user("a"), assistant("b")])
    block_ts = store.lineage(cid, (1, 0)).node.ts
    assert block_ts is not None
    for missing in [(5, 0), (1, 3), NodeRef("block", block_ts + 1, 1, 0), NodeRef.range(block_ts)]:
        with pytest.raises(InvalidInputError, match="has no"):
            store.lineage(cid, missing)
    assert store.lineage(cid, NodeRef("block", block_ts, 1, 0)).node.ts == block_ts


def test_a_block_is_named_by_the_node_id_the_views_print(store: ContextStore) -> None:
    """``show --nodes`` and the views print ``m1.b0``; lineage takes it as it is printed,
    and nothing else spelled like it."""
    cid = store.create_conversation().id
    store.append(cid, [user("a"), assistant("b"), user("c")])
    printed = [
        row[0]
        for row in store.query(
            "SELECT node_id FROM pristine_nodes WHERE message_idx = 1 AND block_idx = 0"
        ).rows
    ]
    assert printed == ["m1.b0"]
    assert store.lineage(cid, "m1.b0") == store.lineage(cid, (1, 0))
    assert store.lineage(cid, "m2.b0").node.message_idx == 2
    for spelled in ["m01.b0", "m1.b0 ", "M1.B0", "m1.b", "m1b0", "1.0", "m-1.b0", "m1.b0.x"]:
        with pytest.raises(InvalidInputError, match=r"node_id such as 'm12\.b0'"):
            store.lineage(cid, spelled)
    with pytest.raises(InvalidInputError, match="has no"):
        store.lineage(cid, "m9.b0")
