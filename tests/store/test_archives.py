"""The rollbacks' archive tables (revision 0011): one per archived table, rows kept as they
were, deleted with their conversation, and carried across the revision both ways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, inspect, select, text

from contextstore import ContextStore
from contextstore.storage import migrate, timeline
from contextstore.storage.tables import ARCHIVES
from tests.conftest import open_backend, session


def _archived_counts(store: ContextStore) -> dict[str, int]:
    with store.database.read() as connection:
        return {
            name: int(connection.execute(select(func.count()).select_from(table)).scalar() or 0)
            for name, table in ARCHIVES.items()
        }


def _history(store: ContextStore, cid: str) -> tuple[int, list[Any]]:
    """A conversation with one row of most timeline tables after a checkpoint; returns the
    rollback's id and the view before it."""
    store.append(cid, session(2))
    store.checkpoint(cid, "start")
    count = len(store.messages(cid))
    store.append(cid, session(3))
    store.record_request(cid, tokens_in=7)
    store.add_context_update(cid, count + 1, 0, "rewritten")
    store.set_deleted_range(cid, count + 1 if (count + 1) % 2 else count + 2)
    store.checkpoint(cid, "later", note="kept in the archive")
    view = store.render(cid)
    report = store.rollback(cid, "start")
    assert report.rollback_id is not None
    return report.rollback_id, view


def test_a_rollback_keeps_each_row_in_its_tables_archive(store: ContextStore) -> None:
    cid = store.create_conversation().id
    rid, _ = _history(store, cid)
    counts = _archived_counts(store)
    removed = store.row_counts(cid)
    assert counts["messages"] == 7 and removed["messages"] == 5
    assert counts["api_requests"] == counts["checkpoints"] == counts["context_updates"] == 1
    assert counts["blocks"] >= counts["messages"]
    with store.database.read() as connection:
        rows_archived = connection.execute(
            text("SELECT rows_archived FROM audit_rollbacks WHERE rollback_id = :r"), {"r": rid}
        ).scalar()
    assert rows_archived == sum(counts.values())


def test_deleting_a_conversation_deletes_its_archive_and_no_other(store: ContextStore) -> None:
    gone = store.create_conversation().id
    kept = store.create_conversation().id
    _history(store, gone)
    _history(store, kept)
    both = _archived_counts(store)
    store.delete_conversation(gone)
    left = _archived_counts(store)
    assert all(2 * left[name] == both[name] for name in ARCHIVES), (both, left)
    assert store.row_counts(gone) == dict.fromkeys(store.row_counts(gone), 0)
    assert store.check(full=True).ok


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_archived_rows_cross_revision_0011_down_and_up(tmp_path: Path, backend: str) -> None:
    """Downgraded to 0010 the archive is ``archived_rows`` (JSON objects, ``row_id`` set);
    upgraded again the rows are back in their archives, and a restore puts them back."""
    store, cleanup = open_backend(backend, tmp_path)
    try:
        cid = store.create_conversation().id
        rid, view = _history(store, cid)
        counts = _archived_counts(store)
        engine = store.database.engine
        is_sqlite = engine.dialect.name == "sqlite"
        store.database.close()
        migrate.downgrade(engine, is_sqlite=is_sqlite, revision="0010")
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT table_name, count(*), count(row_id) FROM archived_rows GROUP BY 1")
            ).all()
        old = {name: (n, with_id) for name, n, with_id in rows}
        assert {name: n for name, (n, _) in old.items()} == {
            name: n for name, n in counts.items() if n
        }
        assert old["messages"][1] == 0 and old["checkpoints"] == (1, 1)
        migrate.upgrade(engine, is_sqlite=is_sqlite)
        assert _archived_counts(store) == counts
        restored = store.restore(cid, rid)
        assert restored.restored["messages"] == counts["messages"]
        assert store.render(cid) == view
        assert [c.label for c in store.checkpoints(cid)] == ["start", "later"]
        assert store.check(full=True).ok
    finally:
        cleanup()


def test_blocks_have_no_foreign_key_and_go_with_their_conversation(store: ContextStore) -> None:
    """Revision 0011 dropped ``blocks -> messages``: a deletion takes the blocks itself."""
    assert inspect(store.database.engine).get_foreign_keys("blocks") == []
    gone = store.create_conversation().id
    kept = store.create_conversation().id
    store.append(gone, session(3))
    store.append(kept, session(3))
    blocks = store.row_counts(kept)["blocks"]
    store.delete_conversation(gone)
    assert store.row_counts(gone)["blocks"] == 0 and store.row_counts()["blocks"] == blocks
    assert store.check(full=True).ok


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_the_downgrade_puts_the_blocks_key_back(tmp_path: Path, backend: str) -> None:
    store, cleanup = open_backend(backend, tmp_path)
    try:
        cid = store.create_conversation().id
        store.append(cid, session(2))
        before = store.render(cid)
        engine = store.database.engine
        is_sqlite = engine.dialect.name == "sqlite"
        store.database.close()
        migrate.downgrade(engine, is_sqlite=is_sqlite, revision="0010")
        (key,) = inspect(engine).get_foreign_keys("blocks")
        assert key["referred_table"] == "messages" and key["options"]["ondelete"] == "CASCADE"
        migrate.upgrade(engine, is_sqlite=is_sqlite)
        assert inspect(engine).get_foreign_keys("blocks") == []
        assert store.render(cid) == before
    finally:
        cleanup()


def _scans(plan: dict[str, Any], relation: str = "messages") -> list[dict[str, Any]]:
    """The plan's nodes that read ``relation``'s rows (not those that change them)."""
    reads = plan.get("Relation Name") == relation and plan["Node Type"].endswith("Scan")
    found = [plan] if reads else []
    for child in plan.get("Plans", []):
        found.extend(_scans(child, relation))
    return found


def _removal_plan(
    tmp_path: Path, turns: int, *, archive: bool, setting: str
) -> tuple[dict[str, Any], int]:
    """EXPLAIN ANALYZE of a PostgreSQL rollback's removal (rolled back) of the last six
    messages after ``turns`` turns, with ``setting`` run first; returns the plan and how
    many blocks the removal takes."""
    store, cleanup = open_backend("postgres", tmp_path)
    try:
        cid = store.create_conversation().id
        store.append(cid, session(turns))
        cp = store.checkpoint(cid, "cp")
        store.append(cid, session(3)[1:])
        removed = sum(len(m["content"]) for m in store.messages(cid)[len(session(turns)) :])
        statement = timeline._removal_on_postgres(archive=archive).text
        with store.database.engine.connect() as connection:
            connection.exec_driver_sql(setting)
            (plan,) = connection.execute(
                text(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}"),
                {"cid": cid, "cutoff": cp.ts, "rid": 1},
            ).scalar_one()
            connection.rollback()
        return plan, removed
    finally:
        cleanup()


def _rows_read(plan: dict[str, Any], part: str, relation: str) -> int:
    """Rows the plan's CTE ``part`` read from ``relation`` (kept or filtered out)."""
    (found,) = [p for p in plan["Plan"]["Plans"] if p.get("Subplan Name") == f"CTE {part}"]
    return sum(
        s["Actual Rows"] + s.get("Rows Removed by Filter", 0) for s in _scans(found, relation)
    )


def test_the_first_removed_message_is_found_without_reading_the_history(
    tmp_path: Path,
) -> None:
    """On PostgreSQL the rollback's ``first_removed`` reads the removed messages only, not
    the conversation from its first message (rows read are counted, not timed)."""
    plan, _ = _removal_plan(tmp_path, 100, archive=False, setting="SET LOCAL enable_seqscan = off")
    assert 0 < _rows_read(plan, "first_removed", "messages") <= 10, plan


@pytest.mark.parametrize("archive", [True, False], ids=["rollback", "purge"])
def test_the_removed_blocks_are_found_without_reading_the_history(
    tmp_path: Path, archive: bool
) -> None:
    """On PostgreSQL, with statistics that know the conversation's blocks, the removal reads
    the removed blocks through the primary key: the rows it reads are those it removes, not
    the conversation's (the planner, left free, once chose to scan every block)."""
    plan, removed = _removal_plan(tmp_path, 400, archive=archive, setting="ANALYZE blocks")
    assert _rows_read(plan, "gone_blocks", "blocks") == removed, plan


@pytest.mark.parametrize("archive", [True, False], ids=["rollback", "purge"])
def test_the_removed_messages_are_found_through_the_key(tmp_path: Path, archive: bool) -> None:
    """On PostgreSQL the removal reads the removed messages through the primary key (no
    index covers ``messages.ts`` since revision 0012): the rows it reads are those it
    removes, whatever the length of the history."""
    plan, _ = _removal_plan(tmp_path, 400, archive=archive, setting="ANALYZE messages")
    assert _rows_read(plan, "gone_messages", "messages") == 6, plan
