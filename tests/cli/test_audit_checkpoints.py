"""``audit``'s text output names each checkpoint's git commit, as ``audit --json`` and
``checkpoints`` do."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import run
from tests.interop.real import CLINE, need


def test_the_audit_text_shows_each_checkpoints_git_hash(tmp_path: Path) -> None:
    """A real Cline task's checkpoints carry the workspace commit Cline recorded
    (``lastCheckpointHash``); the text audit's checkpoints section left it out."""
    task = need(CLINE / "gmfstu-task-1769053680585")
    ui = json.loads((task / "ui_messages.json").read_text(encoding="utf-8"))
    hashes = [m["lastCheckpointHash"] for m in ui if m.get("say") == "checkpoint_created"]
    assert hashes
    db = str(tmp_path / "a.db")
    assert run("--db", db, "import", "cline", str(task)).code == 0
    audited = run("--db", db, "audit", task.name)
    assert audited.code == 0, audited.err
    section = audited.out[audited.out.index("\ncheckpoints\n") :]
    section = section[: section.index("\nrollbacks\n")] if "\nrollbacks\n" in section else section
    header = section.splitlines()[2].split()
    assert header == ["id", "time", "label", "git", "note"]
    for number, commit in enumerate(hashes, start=1):
        (row,) = [line for line in section.splitlines() if line.split()[:1] == [str(number)]]
        assert commit in row.split()
    assert [
        c["git_hash"] for c in run("--db", db, "audit", task.name, "--json").json()["checkpoints"]
    ] == hashes
