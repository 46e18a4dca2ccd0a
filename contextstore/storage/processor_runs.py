"""Statements on processor runs: recording them, and the state each processor resumes from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, select

from contextstore.core.runs import ProcessorRun
from contextstore.storage.codec import decode_object, encode_json
from contextstore.storage.sql import Statement
from contextstore.storage.tables import processor_runs

_p = processor_runs.c

_FIELDS = tuple(c.name for c in processor_runs.c if c.name != "id")

_INSERT = Statement(lambda: insert(processor_runs).values({n: bindparam(n) for n in _FIELDS}))


def insert_runs(
    connection: Connection, conversation_id: str, ts: int, runs: Sequence[Mapping[str, Any]]
) -> None:
    """Insert processor-run rows (dicts keyed by column, without id, conversation or ts),
    all stamped ``ts``."""
    _INSERT.run_many(
        connection,
        [
            {
                **run,
                "conversation_id": conversation_id,
                "ts": ts,
                "result": encode_json(run["result"]),
            }
            for run in runs
        ],
    )


_SEEN = Statement(
    lambda: (
        select(_p.config_sha256, func.max(_p.seen_through))
        .where(_p.conversation_id == bindparam("cid"), _p.ts <= bindparam("as_of"))
        .group_by(_p.config_sha256)
    )
)


def seen_state(connection: Connection, conversation_id: str, as_of: int) -> dict[str, int]:
    """The newest message index each processor (by its config key) handled in the runs
    recorded with ``ts <= as_of``. A run's ``seen_through`` never goes back, so it is the
    maximum over the runs; a rollback removes the runs after its cutoff with the rest."""
    return {
        str(key): int(seen)
        for key, seen in _SEEN.rows(connection, {"cid": conversation_id, "as_of": as_of})
    }


_RUNS = Statement(
    lambda: (
        select(processor_runs)
        .where(_p.conversation_id == bindparam("cid"), _p.ts <= bindparam("as_of"))
        .order_by(_p.ts, _p.id)
    )
)


def list_runs(connection: Connection, conversation_id: str, as_of: int) -> list[ProcessorRun]:
    """The conversation's processor runs with ``ts <= as_of``, oldest first."""
    found = []
    for row in _RUNS.rows(connection, {"cid": conversation_id, "as_of": as_of}):
        values = list(row)
        values[-1] = decode_object(values[-1], f"processor run {values[0]} result")
        found.append(ProcessorRun(*values))
    return found
