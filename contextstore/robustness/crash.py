"""A crash-safety harness: kill a writing process with SIGKILL, reopen, verify nothing broke.

A *child* process (``python -m contextstore.robustness.crash child ...``) opens a store on
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
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONVERSATION_ID = "crash-conversation"
CONTEXT_WINDOW = 8_192
"""Small, so that recorded totals above 6,553 tokens make prepare_request truncate."""

_OPERATIONS: tuple[tuple[str, int], ...] = (
    ("append", 24),
    ("append_many", 20),
    ("record_request", 12),
    ("checkpoint", 10),
    ("rollback", 5),
    ("set_deleted_range", 6),
    ("add_context_update", 12),
    ("prepare_request", 6),
    ("truncate", 3),
)

Row = tuple[Any, ...]


# -- the child ------------------------------------------------------------------------------


class _Journal:
    """Append-only JSON lines, each flushed and fsync'd before the call returns."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())


def _message(role: str, nonce: str) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": nonce}]}


def _pair(nonce: str) -> list[dict[str, Any]]:
    """An assistant tool call and its result: the block 0 text of each is ``nonce``."""
    call = {"type": "tool_use", "id": f"tu_{nonce}", "name": "read_file", "input": {"path": nonce}}
    result = {"type": "tool_result", "tool_use_id": f"tu_{nonce}", "content": nonce}
    return [
        {"role": "assistant", "content": [{"type": "text", "text": nonce}, call]},
        {"role": "user", "content": [result]},
    ]


def _rows_written(db: Path, conversation_id: str, after: int) -> dict[str, list[Row]]:
    """The range, update and request rows with ``ts > after`` (what the last call wrote)."""
    connection = sqlite3.connect(db)
    try:
        snap = read_snapshot(connection, conversation_id)
    finally:
        connection.close()
    return {
        name: sorted(row for row in snap.table(name) if row[0] > after)
        for name in ("ranges", "updates", "requests")
    }


def run_child(db: Path, journal_path: Path, seed: int, run: int) -> None:
    """Loop random operations on ``db`` forever, journaling each; the parent kills us."""
    from contextstore.core.errors import ContextStoreError
    from contextstore.storage.engine import Durability
    from contextstore.store import ContextStore

    rng = random.Random(seed * 1_000_003 + run)
    durability: Durability = rng.choice(("full", "normal"))
    store = ContextStore.open(db, durability=durability)
    journal = _Journal(journal_path)
    cid = CONVERSATION_ID
    names = [name for name, _ in _OPERATIONS]
    weights = [weight for _, weight in _OPERATIONS]
    print("ready", durability, flush=True)
    seq = 0
    while True:
        seq += 1
        nonce = f"r{run}s{seq}"
        op = rng.choices(names, weights)[0]
        intent: dict[str, Any] = {"t": "intent", "op": op, "nonce": nonce}
        call: Callable[[], dict[str, Any]]
        if op == "append":
            role = rng.choice(("user", "assistant"))
            intent["messages"] = [[role, nonce, 1]]

            def call(role: str = role, nonce: str = nonce) -> dict[str, Any]:
                written = store.append(cid, role, [{"type": "text", "text": nonce}])
                return {"messages": [[written.index, written.ts]]}

        elif op == "append_many":
            batch = _pair(nonce)
            if rng.random() < 0.3:
                batch.append(_message("assistant", f"{nonce}x"))
            intent["messages"] = [
                [m["role"], m["content"][0].get("text") or nonce, len(m["content"])] for m in batch
            ]

            def call(batch: list[dict[str, Any]] = batch) -> dict[str, Any]:
                written = store.append_many(cid, batch)
                return {"messages": [[w.index, w.ts] for w in written]}

        elif op == "record_request":
            tokens_in = rng.choice((rng.randint(100, 4_000), rng.randint(6_600, 9_000)))

            def call(tokens_in: int = tokens_in, nonce: str = nonce) -> dict[str, Any]:
                record = store.record_request(
                    cid, tokens_in=tokens_in, tokens_out=rng.randint(1, 400), model_id=nonce
                )
                return {"ts": record.ts}

        elif op == "checkpoint":

            def call(nonce: str = nonce) -> dict[str, Any]:
                return {"ts": store.checkpoint(cid, nonce).ts}

        elif op == "rollback":
            labels = [c.label for c in store.checkpoints(cid) if c.label]
            if not labels:
                continue
            label = rng.choice(labels)
            purge = rng.random() < 0.2
            intent.update(label=label, purge=purge)

            def call(label: str = label, purge: bool = purge) -> dict[str, Any]:
                report = store.rollback(cid, label, purge=purge)
                return {"cutoff": report.cutoff_ts, "counts": report.removed}

        elif op == "set_deleted_range":
            count = store.row_counts(cid)["messages"]
            current = store.deleted_range(cid)
            low = max(current[1] if current else 1, 1)
            if low > count - 2:
                continue
            end = rng.randint(low, min(count - 2, low + 6))
            intent["end"] = end

            def call(end: int = end, nonce: str = nonce) -> dict[str, Any]:
                return {"ts": store.set_deleted_range(cid, end, keep="manual", reason=nonce)}

        elif op == "add_context_update":
            count = store.row_counts(cid)["messages"]
            target = rng.randrange(count)
            intent["target"] = target

            def call(target: int = target, nonce: str = nonce) -> dict[str, Any]:
                return {"ts": store.add_context_update(cid, target, 0, nonce)}

        else:
            method = getattr(store, op, None)
            if method is None:
                continue

            def call(method: Callable[..., Any] = method, op: str = op) -> dict[str, Any]:
                before = store.get_conversation(cid).last_ts
                if op == "truncate":
                    method(cid, keep=rng.choice(("half", "quarter", "last_two")))
                else:
                    method(cid)
                return {"rows": _rows_written(db, cid, before)}

        journal.write(intent)
        try:
            result = call()
        except ContextStoreError as exc:
            journal.write({"t": "refused", "nonce": nonce, "error": type(exc).__name__})
            continue
        journal.write({"t": "done", "op": op, "nonce": nonce, **result})


# -- the model and the checks -----------------------------------------------------------------


@dataclass
class Snapshot:
    """One conversation's rows, as comparable tuples keyed by table."""

    messages: set[Row] = field(default_factory=set)
    """``(idx, ts, role, block_count, block0_text)``"""
    ranges: set[Row] = field(default_factory=set)
    """``(ts, end_idx, keep)``"""
    updates: set[Row] = field(default_factory=set)
    """``(ts, message_idx, block_idx, kind, text)``"""
    requests: set[Row] = field(default_factory=set)
    """``(ts, model_id)``"""
    checkpoints: set[Row] = field(default_factory=set)
    """``(ts, label)``"""
    rollbacks: set[Row] = field(default_factory=set)
    """``(id, cutoff_ts, purged, counts_json)``"""

    TABLES = ("messages", "ranges", "updates", "requests", "checkpoints", "rollbacks")

    def table(self, name: str) -> set[Row]:
        """The rows of one table, by its snapshot name."""
        rows: set[Row] = getattr(self, name)
        return rows

    def copy(self) -> Snapshot:
        """An independent copy."""
        return Snapshot(*(set(self.table(name)) for name in self.TABLES))

    def remove_after(self, cutoff: int) -> int:
        """Drop every timeline row with ``ts > cutoff`` (a rollback); returns how many."""
        removed = 0
        for name in ("messages", "ranges", "updates", "requests", "checkpoints"):
            position = 1 if name == "messages" else 0
            rows = self.table(name)
            gone = {row for row in rows if row[position] > cutoff}
            rows -= gone
            removed += len(gone)
        return removed

    def next_index(self) -> int:
        """The index the next appended message gets."""
        return max((row[0] for row in self.messages), default=-1) + 1

    def max_ts(self) -> int:
        """The newest ``ts`` of any timeline row."""
        stamps = [row[1] for row in self.messages]
        for name in ("ranges", "updates", "requests", "checkpoints"):
            stamps.extend(row[0] for row in self.table(name))
        return max(stamps, default=0)


def read_snapshot(connection: sqlite3.Connection, conversation_id: str) -> Snapshot:
    """Read a conversation's rows straight from the file (fixed SQL, bound parameters)."""
    c = (conversation_id,)
    snap = Snapshot()
    snap.messages = {
        tuple(row)
        for row in connection.execute(
            "SELECT m.idx, m.ts, m.role,"
            " (SELECT count(*) FROM blocks b WHERE b.conversation_id = m.conversation_id"
            "  AND b.message_idx = m.idx),"
            " (SELECT b.text FROM blocks b WHERE b.conversation_id = m.conversation_id"
            "  AND b.message_idx = m.idx AND b.block_idx = 0)"
            " FROM messages m WHERE m.conversation_id = ?",
            c,
        )
    }
    snap.ranges = set(
        connection.execute(
            "SELECT ts, end_idx, keep FROM deleted_ranges WHERE conversation_id = ?", c
        )
    )
    snap.updates = set(
        connection.execute(
            "SELECT ts, message_idx, block_idx, kind, text FROM context_updates"
            " WHERE conversation_id = ?",
            c,
        )
    )
    snap.requests = set(
        connection.execute("SELECT ts, model_id FROM api_requests WHERE conversation_id = ?", c)
    )
    snap.checkpoints = set(
        connection.execute("SELECT ts, label FROM checkpoints WHERE conversation_id = ?", c)
    )
    snap.rollbacks = {
        (int(rid), int(cutoff), bool(purged), json.dumps(json.loads(counts), sort_keys=True))
        for rid, cutoff, purged, counts in connection.execute(
            "SELECT id, cutoff_ts, purged, counts FROM rollbacks WHERE conversation_id = ?", c
        )
    }
    return snap


def check_archives(connection: sqlite3.Connection, conversation_id: str) -> list[str]:
    """Every archived rollback holds exactly the rows its counts report, none still live."""
    problems: list[str] = []
    live_ts: dict[str, set[int]] = {}
    for table in ("messages", "deleted_ranges", "context_updates", "api_requests", "checkpoints"):
        live_ts[table] = {
            int(ts)
            for (ts,) in connection.execute(
                f"SELECT ts FROM {table} WHERE conversation_id = ?",  # noqa: S608 (constant)
                (conversation_id,),
            )
        }
    rollbacks = connection.execute(
        "SELECT id, cutoff_ts, purged, counts FROM rollbacks WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchall()
    for rid, cutoff, purged, counts_json in rollbacks:
        counts: dict[str, int] = json.loads(counts_json)
        archived = connection.execute(
            "SELECT table_name, ts, data FROM archived_rows WHERE rollback_id = ?", (rid,)
        ).fetchall()
        expected = 0 if purged else sum(counts.values())
        if len(archived) != expected:
            problems.append(
                f"rollback {rid}: {len(archived)} archived rows, counts say {expected} ({counts})"
            )
        for table_name, ts, _data in archived:
            if table_name == "blocks":
                continue
            if ts <= cutoff:
                problems.append(f"rollback {rid} archived a {table_name} row at ts {ts} <= cutoff")
            if int(ts) in live_ts.get(table_name, set()):
                problems.append(f"rollback {rid} archived {table_name} ts {ts}, still live")
    return problems


def check_notices(snapshot: Snapshot) -> list[str]:
    """Every truncation range is covered by a truncation notice written with it or before it.

    The engine writes the notice with the first truncation (later ones reuse it, as Cline
    does); since a notice written at or before a range's ``ts`` survives every rollback
    that keeps the range, a range without one means a truncation landed half-applied.
    """
    notices = [row[0] for row in snapshot.updates if row[3] == "truncation_notice"]
    return [
        f"truncation range at ts {row[0]} has no truncation notice at or before it"
        for row in snapshot.ranges
        if row[2] != "manual" and not any(ts <= row[0] for ts in notices)
    ]


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


class _Model:
    """The expected rows, replayed from journal lines."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.rows = snapshot

    def apply_done(
        self, record: dict[str, Any], intent: dict[str, Any], actual: Snapshot
    ) -> list[str]:
        """Replay one committed operation; returns problems with what the child reported."""
        op = record["op"]
        rows = self.rows
        if op in ("append", "append_many"):
            for (role, text, count), (idx, ts) in zip(
                intent["messages"], record["messages"], strict=True
            ):
                rows.messages.add((idx, ts, role, count, text))
        elif op == "record_request":
            rows.requests.add((record["ts"], intent["nonce"]))
        elif op == "checkpoint":
            rows.checkpoints.add((record["ts"], intent["nonce"]))
        elif op == "set_deleted_range":
            rows.ranges.add((record["ts"], intent["end"], "manual"))
        elif op == "add_context_update":
            rows.updates.add((record["ts"], intent["target"], 0, "manual", intent["nonce"]))
        elif op == "rollback":
            counts: dict[str, int] = record["counts"]
            removed = rows.remove_after(record["cutoff"])
            expected = sum(v for k, v in counts.items() if k != "blocks")
            new = [r for r in actual.rollbacks - rows.rollbacks if r[1] == record["cutoff"]]
            problems = []
            if new:
                rows.rollbacks.add(min(new))
                if json.loads(min(new)[3]) != counts:
                    problems.append(f"rollback {intent['nonce']}: row {min(new)} != {counts}")
            if removed != expected:
                problems.append(
                    f"rollback {intent['nonce']}: counts {counts} but the journal model held "
                    f"{removed} rows after cutoff {record['cutoff']}"
                )
            return problems
        else:  # prepare_request / truncate: the rows the child saw them write
            for name, written in record["rows"].items():
                rows.table(name).update(tuple(row) for row in written)
        return []


def _diff(model: Snapshot, actual: Snapshot) -> dict[str, tuple[set[Row], set[Row]]]:
    """Per table: (rows only in the database, rows only in the model)."""
    result = {}
    for name in Snapshot.TABLES:
        added = actual.table(name) - model.table(name)
        missing = model.table(name) - actual.table(name)
        if added or missing:
            result[name] = (added, missing)
    return result


def _judge_in_flight(
    intent: dict[str, Any], model: Snapshot, diff: dict[str, tuple[set[Row], set[Row]]]
) -> str | None:
    """None when ``diff`` is exactly the whole effect of the interrupted call, else why not."""
    op = intent["op"]
    nonce = intent["nonce"]
    added = {name: d[0] for name, d in diff.items()}
    missing = {name: d[1] for name, d in diff.items() if d[1]}

    def only(*names: str) -> bool:
        return set(diff) <= set(names)

    if op in ("append", "append_many"):
        start = model.next_index()
        expected = [
            (start + k, role, count, text)
            for k, (role, text, count) in enumerate(intent["messages"])
        ]
        got = sorted((r[0], r[2], r[3], r[4]) for r in added.get("messages", set()))
        if only("messages") and not missing and got == expected:
            return None
        return f"{op} {nonce} half-applied: expected {expected}, found {got}, missing {missing}"
    single: dict[str, tuple[str, Callable[[Row], bool]]] = {
        "record_request": ("requests", lambda r: r[1] == nonce),
        "checkpoint": ("checkpoints", lambda r: r[1] == nonce),
        "set_deleted_range": ("ranges", lambda r: r[1] == intent.get("end")),
        "add_context_update": (
            "updates",
            lambda r: r[4] == nonce and r[1] == intent.get("target"),
        ),
    }
    if op in single:
        name, match = single[op]
        rows = added.get(name, set())
        if only(name) and not missing and len(rows) == 1 and all(match(r) for r in rows):
            return None
        return f"{op} {nonce}: unexpected change {diff}"
    if op == "rollback":
        cutoffs = [row[0] for row in model.checkpoints if row[1] == intent["label"]]
        if not cutoffs:
            return f"rollback {nonce} to unknown label {intent['label']}"
        cutoff = max(cutoffs)
        expected_model = model.copy()
        removed = expected_model.remove_after(cutoff)
        new_rollbacks = added.get("rollbacks", set())
        for name in ("messages", "ranges", "updates", "requests", "checkpoints"):
            if added.get(name) or missing.get(name, set()) != (
                model.table(name) - expected_model.table(name)
            ):
                return f"rollback {nonce} half-applied on {name}: {diff.get(name)}"
        if len(new_rollbacks) != 1:
            return f"rollback {nonce}: {len(new_rollbacks)} new rollbacks rows"
        (row,) = new_rollbacks
        counts = json.loads(row[3])
        if row[1] != cutoff or sum(v for k, v in counts.items() if k != "blocks") != removed:
            return f"rollback {nonce}: rollbacks row {row} does not match {removed} removed rows"
        return None
    # prepare_request / truncate: additive rows after the model's newest ts, nothing removed
    newest = model.max_ts()
    if missing or not only("ranges", "updates", "requests"):
        return f"{op} {nonce}: removed or touched rows it should not: {diff}"
    stale = [r for rows in added.values() for r in rows if r[0] <= newest]
    return f"{op} {nonce}: rows older than the call: {stale}" if stale else None


def _seed_conversation(db: Path) -> Snapshot:
    from contextstore.store import ContextStore

    with ContextStore.open(db) as store:
        store.create_conversation(
            id=CONVERSATION_ID, context_window=CONTEXT_WINDOW, title="crash test"
        )
        store.append_many(
            CONVERSATION_ID, [_message("user", "task"), _message("assistant", "plan")]
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
        max_delay: the longest wait, in seconds, between a child's start and its kill.
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
                "contextstore.robustness.crash",
                "child",
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
            time.sleep(rng.uniform(0.0, max_delay))
        child.send_signal(signal.SIGKILL)
        child.wait()
        stderr = child.stderr.read().decode() if child.stderr else ""
        if child.stdout:
            child.stdout.close()
        if child.stderr:
            child.stderr.close()
        if child.returncode != -signal.SIGKILL:
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
    """``python -m contextstore.robustness.crash child|run ...``."""
    parser = argparse.ArgumentParser(prog="python -m contextstore.robustness.crash")
    sub = parser.add_subparsers(dest="command", required=True)
    child = sub.add_parser("child", help="loop operations until killed (used by the parent)")
    child.add_argument("--db", type=Path, required=True)
    child.add_argument("--journal", type=Path, required=True)
    child.add_argument("--seed", type=int, required=True)
    child.add_argument("--run", type=int, required=True)
    campaign = sub.add_parser("run", help="run a crash campaign and print its tally")
    campaign.add_argument("--db", type=Path, required=True)
    campaign.add_argument("--kills", type=int, default=30)
    campaign.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.command == "child":
        run_child(args.db, args.journal, args.seed, args.run)
        return 0
    tally = run_campaign(args.db, kills=args.kills, seed=args.seed)
    print(tally.summary())
    return 0 if tally.ok else 1


if __name__ == "__main__":
    sys.exit(main())
