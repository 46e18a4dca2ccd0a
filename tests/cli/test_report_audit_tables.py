"""The report's audit tables say what ``contextstore audit`` says (its sections, its columns)."""

from __future__ import annotations

import re
from pathlib import Path

from contextstore import ContextStore
from contextstore.cli.times import format_ts
from contextstore.devtools import demo_data
from tests.cli.conftest import run
from tests.interop.real import CLINE, need


def _section(page: str, title: str) -> str:
    start = page.index(f"<h3>{title}</h3>")
    end = page.find("<h3>", start + 1)
    return page[start : end if end >= 0 else len(page)]


def _rows(section: str) -> list[list[str]]:
    return [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row) for row in section.split("<tr>")[1:]]


def test_the_reports_rollbacks_say_when_they_were_restored(tmp_path: Path) -> None:
    """A real Cline task rolled back to one of its checkpoints, then restored: the audit
    lists the restore, the report's table said only "0 archived" (the rows are no longer
    in the archive), which read as rows lost; it now has the audit's columns."""
    task = need(CLINE / "gmfstu-task-1769053680585")
    db = str(tmp_path / "r.db")
    assert run("--db", db, "import", "cline", str(task)).code == 0
    cid = task.name
    label = run("--db", db, "checkpoints", cid, "--json").json()[20]["label"]
    assert run("--db", db, "rollback", cid, "--to", label, "--yes").code == 0
    assert run("--db", db, "restore", cid, "1").code == 0
    audited = run("--db", db, "audit", cid, "--json").json()["rollbacks"]
    assert [r["restored_ts"] is not None for r in audited] == [True]
    out = tmp_path / "r.html"
    assert run("--db", db, "report", cid, "-o", str(out)).code == 0
    rows = _rows(_section(out.read_text(encoding="utf-8"), "Rollbacks"))
    assert rows[0] == ["id", "ran", "to", "target", "removed", "kept", "restored"]
    (rollback,) = audited
    assert rows[1][0] == "1" and rows[1][3] == label
    assert rows[1][5] == "0 archived"
    assert rows[1][6] == format_ts(rollback["restored_ts"])


def test_the_report_lists_the_de_duplication_rewrites(tmp_path: Path) -> None:
    """The report showed the characters de-duplication saved, but not the rewrites that
    saved them, which ``audit`` lists."""
    db = str(tmp_path / "d.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation(context_window=64_000).id
        store.append(cid, [*demo_data.opening_turns(), *demo_data.long_session(8)])
        first = store.prepare_request(cid)
        store.record_request(cid, request_id=first.request_id, tokens_in=38_500, tokens_out=900)
        store.prepare_request(cid)
    savings = run("--db", db, "audit", cid, "--json").json()["dedup_savings"]
    assert savings
    out = tmp_path / "d.html"
    assert run("--db", db, "report", cid, "-o", str(out)).code == 0
    rows = _rows(_section(out.read_text(encoding="utf-8"), "De-duplication"))
    assert rows[0] == ["time", "message", "block", "kind", "original", "rewritten", "saved"]
    assert [(int(r[1]), int(r[2]), int(r[6].replace(",", ""))) for r in rows[1:]] == [
        (s["message_idx"], s["block_idx"], s["chars_saved"]) for s in savings
    ]


def test_the_report_lists_the_checkpoints_as_audit_does(tmp_path: Path) -> None:
    """``audit`` has a checkpoints section (label, git commit, note); the report counted
    them and had no table, so a real Cline task's 47 commits were not on the page."""
    task = need(CLINE / "gmfstu-task-1769053680585")
    db = str(tmp_path / "c.db")
    assert run("--db", db, "import", "cline", str(task)).code == 0
    audited = run("--db", db, "audit", task.name, "--json").json()["checkpoints"]
    assert len(audited) > 20 and all(c["git_hash"] for c in audited)
    out = tmp_path / "c.html"
    assert run("--db", db, "report", task.name, "-o", str(out)).code == 0
    rows = _rows(_section(out.read_text(encoding="utf-8"), "Checkpoints"))
    assert rows[0] == ["id", "time", "label", "git", "note"]
    assert [(r[0], r[1], r[2], r[3]) for r in rows[1:]] == [
        (f"{c['id']:,}", format_ts(c["ts"]), c["label"] or "", c["git_hash"]) for c in audited
    ]


def test_a_forks_report_names_the_conversation_it_was_forked_from(tmp_path: Path) -> None:
    """A fork's report read as a conversation of its own: its parent and the moment it
    shares the history up to were nowhere on the page."""
    db = str(tmp_path / "f.db")
    with ContextStore.open(db) as store:
        parent = store.create_conversation().id
        store.append(parent, "user", "hello")
        cp = store.checkpoint(parent, "start")
        store.append(parent, "assistant", "hi")
        child = store.fork(parent, at=cp.ts)
    out = tmp_path / "f.html"
    assert run("--db", db, "report", child.id, "-o", str(out)).code == 0
    meta = re.search(r'<p class="meta">(.*?)</p>', out.read_text(encoding="utf-8"))
    assert meta is not None
    assert f"forked from <bdi>{parent}</bdi> at {format_ts(cp.ts)}" in meta.group(1)
