"""A fork's clock starts when the fork is made.

A fork copies its parent's rows up to ``at`` with their own ``ts`` and is created now; its
``last_ts`` (the clock) was left at ``at``, so the ``conversations`` table showed a fork of a
past moment whose last activity came before its creation. The clock is now the later of the
two, and the fork still renders as its parent did at ``at``.
"""

from __future__ import annotations

from pathlib import Path

from contextstore import ContextStore
from contextstore.interop import import_cline
from tests.cli.conftest import run
from tests.interop.real import CLINE, need


def test_a_fork_of_a_real_tasks_checkpoint_is_never_last_before_it_was_created(
    tmp_path: Path,
) -> None:
    task = need(CLINE / "gmfstu-task-1769053680585")
    db = tmp_path / "a.db"
    with ContextStore.open(db) as store:
        cid = import_cline(store, task).conversation_id
        assert cid is not None
        checkpoint = store.checkpoints(cid)[10]
        fork = store.fork(cid, at=checkpoint.label)
        assert fork.forked_at_ts == checkpoint.ts < fork.created_ts  # a moment of January 2026
        assert fork.created_ts <= fork.last_ts
        assert store.get_conversation(fork.id).last_ts == fork.last_ts
        assert store.render(fork.id) == store.render(cid, as_of=checkpoint.ts)
        added = store.append(fork.id, "user", "Go on from here.")
        assert added.ts > fork.last_ts
    listed = run("--db", str(db), "conversations", "--json").json()
    assert [c["id"] for c in listed if c["last_ts"] < c["created_ts"]] == []
    behind = run("--db", str(db), "sql", "SELECT id FROM conversations WHERE last_ts < created_ts")
    assert behind.code == 0 and fork.id not in behind.out


def test_a_fork_of_now_keeps_its_parents_last_moment_as_forked_at(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "a.db") as store:
        parent = store.create_conversation()
        store.append(parent.id, "user", "task")
        last = store.get_conversation(parent.id).last_ts
        fork = store.fork(parent.id)
        assert fork.forked_at_ts == last <= fork.last_ts
        assert fork.created_ts <= fork.last_ts
        assert store.messages(fork.id) == store.messages(parent.id)
