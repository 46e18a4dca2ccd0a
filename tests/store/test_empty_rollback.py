"""A rollback with nothing written after its cutoff removes nothing, and runs nowhere: the
library wrote an empty ``rollbacks`` row (and moved the clock), which ``audit``, the report
and the timeline listed as a rollback, and which then refused an import's replacement of
rows ("a rollback or restore ran after"); the command line said "no rollback ran" for the
same call. Library, JSON-RPC and command line now agree: nothing is written, and the report
says so (``rollback_id`` None). Rows such a rollback wrote before say "removed nothing"."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.storage import timeline as timeline_rows
from tests.cli.conftest import run
from tests.conftest import assistant, user


def _conversation(store: ContextStore) -> str:
    cid = store.create_conversation(title="t").id
    store.append(cid, [user("task"), assistant("done")])
    store.checkpoint(cid, "cp")
    return cid


@pytest.mark.parametrize("purge", [False, True])
@pytest.mark.parametrize("to", ["cp", "last ts"])
def test_a_rollback_with_nothing_after_its_cutoff_writes_nothing(
    store: ContextStore, purge: bool, to: str
) -> None:
    cid = _conversation(store)
    before = store.row_counts(cid)
    last = store.get_conversation(cid).last_ts
    preview = store.rollback(cid, "cp", dry_run=True)

    report = store.rollback(cid, "cp" if to == "cp" else last, purge=purge)

    assert report.rollback_id is None and not report.archived and not report.dry_run
    assert report.total_removed == 0 and report == preview.removed
    assert report.cutoff_ts == store.checkpoints(cid)[0].ts
    assert store.row_counts(cid) == before
    assert store.get_conversation(cid).last_ts == last  # no tick either
    assert store.audit(cid).rollbacks == []
    assert [e.event for e in store.timeline(cid)] == ["message", "message", "checkpoint"]


def test_a_rollback_that_removes_rows_still_runs_and_is_recorded(store: ContextStore) -> None:
    cid = _conversation(store)
    store.append(cid, "user", "later")
    report = store.rollback(cid, "cp")
    assert report.rollback_id is not None and report.archived and report["messages"] == 1
    (event,) = store.audit(cid).rollbacks
    assert event.rollback_id == report.rollback_id and event.total_removed == 2
    (shown,) = [e for e in store.timeline(cid) if e.event == "rollback"]
    assert "removed nothing" not in shown.detail


def test_inside_a_transaction_it_leaves_the_transactions_other_writes(
    store: ContextStore,
) -> None:
    cid = _conversation(store)
    with store.transaction():
        assert store.rollback(cid, "cp").rollback_id is None
        store.append(cid, "user", "more")
    assert len(store.messages(cid)) == 3 and store.audit(cid).rollbacks == []


def test_it_no_longer_blocks_an_import_replacing_its_rows(store: ContextStore) -> None:
    """An importer replaces rows the other agent rewrote unless a caller's rollback ran
    since; an empty rollback, which changed nothing, refused it."""
    cid = _conversation(store)
    first = store.messages(cid)
    after = store.message_timestamps(cid)[0]
    store.rollback(cid, "cp")
    replaced = store.discard_imported_rows(cid, after=after)
    assert replaced.removed["messages"] == 1 and store.messages(cid) == first[:1]


def _legacy_empty_rollback(store: ContextStore, cid: str) -> int:
    """A rollbacks row as versions before this one wrote for a rollback with nothing after
    its cutoff: the clock's tick, the row, zero counts."""
    cutoff = store.checkpoints(cid)[0].ts
    counts = dict.fromkeys((t.name for t in timeline_rows.REMOVAL_ORDER), 0)

    def work(connection: Any) -> int:
        rollback_id = timeline_rows.start_rollback(connection, cid, cutoff, "cp", False)
        timeline_rows.set_rollback_counts(connection, rollback_id, counts)
        return rollback_id

    return store.database.write(work)


def test_an_empty_rollback_recorded_before_says_it_removed_nothing(store: ContextStore) -> None:
    cid = _conversation(store)
    rollback_id = _legacy_empty_rollback(store, cid)
    (event,) = store.audit(cid).rollbacks
    assert event.rollback_id == rollback_id and event.total_removed == 0
    (shown,) = [e for e in store.timeline(cid) if e.event == "rollback"]
    assert shown.ref_id == rollback_id and shown.detail.endswith(", removed nothing")


def test_audit_and_report_say_an_old_empty_rollback_removed_nothing(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with ContextStore.open(db) as store:
        cid = _conversation(store)
        _legacy_empty_rollback(store, cid)
    audit = run("--db", str(db), "audit", cid)
    assert audit.code == 0
    section = audit.out[audit.out.index("\nrollbacks\n") :]
    (line,) = [line for line in section.splitlines() if re.match(r"\s*1\s+\d{4}-", line)]
    assert "removed nothing" in line and "0 archived" in line
    out = tmp_path / "r.html"
    assert run("--db", str(db), "report", cid, "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    rollbacks = page[page.index("<h3>Rollbacks</h3>") :]
    assert "<td>removed nothing</td>" in rollbacks
    timeline = page[page.index('<section id="timeline"') : page.index('<section id="conversation"')]
    assert re.search(r"<td>rollback</td><td>to ts \d+ \(cp\), removed nothing</td>", timeline)


def test_rollback_yes_when_the_rows_went_meanwhile_says_no_rollback_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The preview counted rows that another process rolled back before this one ran: it
    printed a table titled "rollback None" instead of saying nothing ran."""
    db = tmp_path / "raced.db"
    with ContextStore.open(db) as store:
        cid = _conversation(store)
        store.append(cid, "user", "later")
    real = ContextStore.rollback

    def raced(self: ContextStore, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("dry_run"):
            real(self, *args, **kwargs)  # the other process's rollback
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ContextStore, "rollback", raced)
    got = run("--db", str(db), "rollback", cid, "--to", "cp", "--yes")
    assert got.code == 0, got.err
    assert "no rollback ran" in got.err and "None" not in got.out + got.err
    monkeypatch.undo()
    with ContextStore.open(db) as store:
        assert len(store.audit(cid).rollbacks) == 1  # the other process's, only
