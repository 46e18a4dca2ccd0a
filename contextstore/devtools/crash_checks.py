"""What a crashed database must satisfy: its rows as comparable snapshots, a model
replayed from the journal, and the all-or-nothing checks on the call in flight."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contextstore.storage.tables import ARCHIVED_TABLES

ARCHIVED_NAMES = tuple(table.name for table in ARCHIVED_TABLES)
"""Tables whose removed rows a rollback keeps in ``archived_<name>``."""

CONVERSATION_ID = "crash-conversation"
CONTEXT_WINDOW = 8_192
"""Small, so that recorded totals above 6,553 tokens make prepare_request truncate."""


Row = tuple[Any, ...]


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
        archived = [
            (name, ts)
            for name in ARCHIVED_NAMES
            for (ts,) in connection.execute(
                f"SELECT {'NULL' if name == 'blocks' else 'ts'} FROM archived_{name} "  # noqa: S608
                "WHERE rollback_id = ?",
                (rid,),
            )
        ]
        expected = 0 if purged else sum(counts.values())
        if len(archived) != expected:
            problems.append(
                f"rollback {rid}: {len(archived)} archived rows, counts say {expected} ({counts})"
            )
        for table_name, ts in archived:
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
            # Blocks go with their messages; lineage edges and processor runs are rows about
            # other rows (written in their transactions), which the journal does not model.
            derived = ("blocks", "lineage", "processor_runs")
            expected = sum(v for k, v in counts.items() if k not in derived)
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
