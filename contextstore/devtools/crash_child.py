"""The writer that the crash harness kills: seeded operations, each journaled around the call.

Run as ``python -m contextstore.devtools.crash_child --db F --journal J --seed S --run N``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from contextstore.devtools.crash_checks import (
    CONVERSATION_ID,
    Row,
    read_snapshot,
)

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


class _Journal:
    """Append-only JSON lines, each flushed and fsync'd before the call returns."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())


def nonce_message(role: str, nonce: str) -> dict[str, Any]:
    """A one-block text message whose text is ``nonce``, so the journal can find it."""
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
                batch.append(nonce_message("assistant", f"{nonce}x"))
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


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the child's arguments and loop operations until killed."""
    parser = argparse.ArgumentParser(prog="python -m contextstore.devtools.crash_child")
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--run", type=int, required=True)
    args = parser.parse_args(argv)
    run_child(args.db, args.journal, args.seed, args.run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
