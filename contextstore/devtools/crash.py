"""A crash-safety harness: kill a writing process with SIGKILL, reopen, verify nothing broke.

A *child* process (``python -m contextstore.devtools.crash_child ...``) opens a store on
a SQLite file and loops seeded random operations on one conversation: append, append_many,
record_request, checkpoint, rollback to an earlier checkpoint, set_deleted_range,
add_context_update and, when the store has them, prepare_request and truncate. Around every
call it writes two fsync'd lines to a journal: an *intent* (what it is about to do, with
unique nonces in the written values) before the call, and a *done* line (what committed:
indices, timestamps, counts) after the call returns. A *done* line therefore proves a
commit; an intent with no *done* line is the one call that was in flight at the kill.

The *parent* (:func:`run_campaign`) starts a child, waits until it is ready, kills it after
a random delay, then checks the database:

* ``PRAGMA integrity_check`` is ``ok``;
* the rows equal a model replayed from the journal (every journaled write present unless a
  later journaled rollback removed it; nothing unexplained);
* the in-flight call is all or nothing: either no trace of it, or exactly its whole effect
  (an append_many's every message with every block, a rollback's every removal plus its
  ``rollbacks`` row and archive);
* every rollback's archive holds exactly the rows its counts report, and none of the
  archived rows is still live; every truncation range lands with its notice;
* the store opens, renders, passes :meth:`ContextStore.check` and accepts a new append.

Then it starts the next child on the same file, and repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextstore.devtools.crash_checks import (
    CONTEXT_WINDOW,
    CONVERSATION_ID,
    Snapshot,
    _diff,
    _judge_in_flight,
    _Model,
    check_archives,
    check_notices,
    read_snapshot,
)
from contextstore.devtools.crash_child import nonce_message


@dataclass
class CrashTally:
    """What a crash campaign did and found; ``lost`` and ``violations`` must stay empty."""

    kills: int = 0
    committed: int = 0
    """Operations whose *done* line was journaled (each proven committed)."""
    refused: int = 0
    in_flight_applied: int = 0
    """Calls interrupted after their commit but before their *done* line: fully present."""
    in_flight_discarded: int = 0
    """Calls interrupted before their commit: no trace left."""
    lost: int = 0
    """Journaled rows missing from the database."""
    by_operation: Counter[str] = field(default_factory=Counter)
    durability: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    final_messages: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing was lost and no invariant broke."""
        return self.lost == 0 and not self.violations

    def summary(self) -> str:
        """A human-readable tally, one fact a line."""
        ops = ", ".join(f"{name} {count}" for name, count in sorted(self.by_operation.items()))
        lines = [
            f"kills: {self.kills}",
            f"operations committed (journaled): {self.committed}",
            f"  by operation: {ops}",
            f"operations refused with an error: {self.refused}",
            f"in-flight at the kill: {self.in_flight_applied} fully applied, "
            f"{self.in_flight_discarded} left no trace",
            f"child durability settings: {dict(sorted(self.durability.items()))}",
            f"messages in the conversation at the end: {self.final_messages}",
            f"lost: {self.lost}",
            f"invariant violations: {len(self.violations)}",
            f"seconds: {self.seconds:.1f}",
        ]
        lines.extend(f"  - {v}" for v in self.violations[:20])
        return "\n".join(lines)


def _seed_conversation(db: Path) -> Snapshot:
    from contextstore.store import ContextStore

    with ContextStore.open(db) as store:
        store.create_conversation(
            id=CONVERSATION_ID, context_window=CONTEXT_WINDOW, title="crash test"
        )
        store.append_many(
            CONVERSATION_ID, [nonce_message("user", "task"), nonce_message("assistant", "plan")]
        )
    connection = sqlite3.connect(db)
    try:
        return read_snapshot(connection, CONVERSATION_ID)
    finally:
        connection.close()


def _child_environment() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _read_journal(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Complete lines after ``offset``; a torn last line is cut off the file."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with path.open("r+b") as handle:
            handle.truncate(end)
    lines = data[offset:end].decode("utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()], end


def _verify_store(db: Path, run: int, model: Snapshot) -> list[str]:
    """Open, render, check and append through the public API; record the append."""
    from contextstore.store import ContextStore

    with ContextStore.open(db) as store:
        view = store.render(CONVERSATION_ID)
        store.render(CONVERSATION_ID, format="anthropic")
        store.check(CONVERSATION_ID)
        written = store.append(CONVERSATION_ID, "user", f"parent{run}")
        if not view:
            return ["the rendered view is empty"]
    model.messages.add((written.index, written.ts, "user", 1, f"parent{run}"))
    return []


KILLED_STATUS = 1 if sys.platform == "win32" else -9
"""The status of a child that ``Popen.kill()`` ended: minus SIGKILL's number (9 on every
POSIX system); on Windows, where ``signal`` has no SIGKILL and ``kill()`` is
``TerminateProcess(handle, 1)``, 1. Naming ``signal.SIGKILL`` stopped the demo there."""

POLL_SECONDS = 0.0005
"""How often the parent reads the journal while it waits for the moment to kill."""


def _journal_tail(journal: Path, offset: int) -> tuple[int, str | None]:
    """Done lines after ``offset``, and the kind of the last complete line (None if none)."""
    with journal.open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    lines = [line for line in data.split(b"\n")[:-1] if line.strip()]
    done = sum(1 for line in lines if b'"t": "done"' in line)
    last = None
    if lines:
        last = "intent" if b'"t": "intent"' in lines[-1] else "other"
    return done, last


def _wait_for_a_write_in_flight(
    journal: Path, offset: int, child: subprocess.Popen[bytes], *, done: int, linger: float
) -> None:
    """Return once the child has committed ``done`` operations and started another.

    The moment of the kill is chosen by what the child journaled, never by elapsed time,
    so a loaded machine changes how long a campaign takes, not what it exercises: every
    run commits at least one operation and is killed while a call is in flight (between
    its *intent* and its *done* line), at once or, with a ``linger``, up to that many
    seconds into the call, so that some kills land after the commit or between calls.
    """
    while child.poll() is None:
        committed, last = _journal_tail(journal, offset)
        if committed >= done and last == "intent":
            deadline = time.monotonic() + linger
            while time.monotonic() < deadline and _journal_tail(journal, offset)[1] == "intent":
                time.sleep(POLL_SECONDS)
            return
        time.sleep(POLL_SECONDS)


def run_campaign(
    db: Path,
    *,
    kills: int,
    seed: int = 1,
    max_delay: float = 0.25,
    journal: Path | None = None,
    progress: Callable[[int, CrashTally], None] | None = None,
) -> CrashTally:
    """Run ``kills`` child processes on ``db``, SIGKILL each, and check the file after each.

    Args:
        db: the SQLite file (created, with its conversation, when missing).
        kills: how many children to kill.
        seed: seeds the delays and every child's operations (a failure replays).
        max_delay: the longest time, in seconds, a kill waits into a call in flight.
        journal: the journal file (``<db>.journal`` by default).
        progress: called after each check with the run number and the tally so far.
    """
    started = time.monotonic()
    journal = journal or db.with_name(db.name + ".journal")
    if db.exists():
        connection = sqlite3.connect(db)
        try:
            model = _Model(read_snapshot(connection, CONVERSATION_ID))
        finally:
            connection.close()
    else:
        model = _Model(_seed_conversation(db))
    journal.touch()
    offset = journal.stat().st_size
    rng = random.Random(seed)
    tally = CrashTally()
    env = _child_environment()
    for run in range(kills):
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "contextstore.devtools.crash_child",
                "--db",
                str(db),
                "--journal",
                str(journal),
                "--seed",
                str(seed),
                "--run",
                str(run),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        ready = child.stdout.readline().decode().split()
        if ready[:1] == ["ready"]:
            tally.durability[ready[1]] += 1
            _wait_for_a_write_in_flight(
                journal,
                offset,
                child,
                done=rng.randint(1, 4),
                linger=0.0 if rng.random() < 0.75 else rng.uniform(0, max_delay),
            )
        child.kill()
        child.wait()
        stderr = child.stderr.read().decode() if child.stderr else ""
        if child.stdout:
            child.stdout.close()
        if child.stderr:
            child.stderr.close()
        if child.returncode != KILLED_STATUS:
            tally.violations.append(f"run {run}: child exited {child.returncode}: {stderr[-800:]}")
            break
        tally.kills += 1
        tally.violations.extend(
            f"run {run}: {p}" for p in _check_run(db, journal, offset, model, tally)
        )
        offset = journal.stat().st_size
        if tally.violations:
            break
        tally.violations.extend(f"run {run}: {p}" for p in _verify_store(db, run, model.rows))
        if progress is not None:
            progress(run, tally)
        if tally.violations:
            break
    tally.final_messages = len(model.rows.messages)
    tally.seconds = time.monotonic() - started
    return tally


def _check_run(db: Path, journal: Path, offset: int, model: _Model, tally: CrashTally) -> list[str]:
    records, _ = _read_journal(journal, offset)
    connection = sqlite3.connect(db)
    try:
        integrity = connection.execute("PRAGMA integrity_check").fetchall()
        if integrity != [("ok",)]:
            return [f"integrity_check: {integrity[:5]}"]
        actual = read_snapshot(connection, CONVERSATION_ID)
        problems = check_archives(connection, CONVERSATION_ID)
    finally:
        connection.close()
    intent: dict[str, Any] | None = None
    for record in records:
        if record["t"] == "intent":
            intent = record
        elif record["t"] == "done":
            assert intent is not None and intent["nonce"] == record["nonce"]
            tally.committed += 1
            tally.by_operation[record["op"]] += 1
            problems.extend(model.apply_done(record, intent, actual))
            intent = None
        else:
            tally.refused += 1
            intent = None
    diff = _diff(model.rows, actual)
    if diff and intent is not None:
        verdict = _judge_in_flight(intent, model.rows, diff)
        if verdict is None:
            tally.in_flight_applied += 1
            model.rows = actual.copy()
            diff = {}
        else:
            problems.append(verdict)
    elif intent is not None:
        tally.in_flight_discarded += 1
    if diff:
        tally.lost += sum(len(missing) for _, missing in diff.values())
        problems.append(f"database differs from the journal: {diff}")
        model.rows = actual.copy()
    problems.extend(check_notices(actual))
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m contextstore.devtools.crash --db F [--kills N] [--seed S]``."""
    parser = argparse.ArgumentParser(prog="python -m contextstore.devtools.crash")
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    tally = run_campaign(args.db, kills=args.kills, seed=args.seed)
    print(tally.summary())
    return 0 if tally.ok else 1


if __name__ == "__main__":
    sys.exit(main())
