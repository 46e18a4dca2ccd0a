"""Round trips and statements of a rollback and an append on PostgreSQL, counted (never
timed): libpq's trace of the store's connection shows each time the client waited on the
server (its messages followed by the server's)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.errors import CheckpointNotFoundError, ConversationNotFoundError
from contextstore.storage import timeline
from tests.conftest import session
from tests.store.internals import recorded_statements


def round_trips(store: ContextStore, tmp_path: Path, call: Callable[[], Any]) -> int:
    """How many times ``call`` waited on the server: in libpq's trace of the connection, each
    run of client messages followed by the server's is one round trip."""
    from psycopg import pq

    with store.database.read() as connection:  # the thread's held connection
        raw: Any = connection.connection.driver_connection
    trace = tmp_path / "libpq.trace"
    fd = os.open(trace, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    raw.pgconn.trace(fd)
    raw.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
    try:
        call()
    finally:
        raw.pgconn.untrace()
        os.close(fd)
    # A message's line starts with its side and a tab (a statement's text may go on over
    # further lines).
    sides = [line[0] for line in trace.read_text().splitlines() if line[:2] in ("F\t", "B\t")]
    assert "B" in sides, sides
    return sum(1 for pair in itertools.pairwise(sides) if pair == ("F", "B"))


def _with_tail(store: ContextStore) -> str:
    conv = store.create_conversation()
    store.append(conv.id, session(3))
    store.checkpoint(conv.id, "cp")
    store.append(conv.id, session(6)[1:])
    store.record_request(conv.id, tokens_in=1)
    return conv.id


@pytest.mark.parametrize("purge", [False, True])
def test_a_rollback_on_postgresql_is_five_round_trips(
    postgres: ContextStore, tmp_path: Path, purge: bool
) -> None:
    """BEGIN; the conversation with its checkpoint; the tick with the rollback's row; the
    removal; the message count and the rollback's counts with the COMMIT."""
    cid = _with_tail(postgres)
    reports: list[Any] = []
    trips = round_trips(
        postgres, tmp_path, lambda: reports.append(postgres.rollback(cid, "cp", purge=purge))
    )
    assert trips == 5
    (report,) = reports
    assert report.removed["messages"] == 12 and report.removed["api_requests"] == 1
    if not purge:
        restored = postgres.restore(cid, report.rollback_id)
        assert restored.restored["messages"] == 12
        assert len(postgres.messages(cid)) == 19
    else:
        # The conversation's message count went back with the rows: the next index is 7.
        assert postgres.append(cid, "user", "again").index == 7


def test_a_rollback_to_a_ts_on_postgresql_is_five_round_trips(
    postgres: ContextStore, tmp_path: Path
) -> None:
    cid = _with_tail(postgres)
    cutoff = postgres.checkpoints(cid)[0].ts
    assert round_trips(postgres, tmp_path, lambda: postgres.rollback(cid, cutoff)) == 5
    assert len(postgres.messages(cid)) == 7


def test_an_append_on_postgresql_is_one_round_trip(postgres: ContextStore, tmp_path: Path) -> None:
    """One statement, committed by the server as it ends."""
    conv = postgres.create_conversation()
    postgres.append(conv.id, session(3))
    assert round_trips(postgres, tmp_path, lambda: postgres.append(conv.id, "user", "more")) == 1
    assert round_trips(postgres, tmp_path, lambda: postgres.append(conv.id, session(4)[1:])) == 1
    assert len(postgres.messages(conv.id)) == 16


def test_an_append_answering_calls_it_must_read_is_four_round_trips(
    postgres: ContextStore, tmp_path: Path
) -> None:
    """The calls' SELECT, then BEGIN; the clock; the inserts with the COMMIT."""
    conv = postgres.create_conversation()
    postgres.append(conv.id, session(3)[:-1])  # ends on a call
    postgres._recent_calls.clear()  # as in another process
    answer = session(3)[-1]
    assert round_trips(postgres, tmp_path, lambda: postgres.append(conv.id, [answer])) == 4


def test_a_rollback_on_postgresql_is_five_statements(postgres: ContextStore) -> None:
    cid = _with_tail(postgres)
    with recorded_statements(postgres) as ran:
        postgres.rollback(cid, "cp")
    assert len(ran) == 5, ran
    assert "checkpoints" in ran[0] and "conversations" in ran[0]
    assert ran[1].startswith("WITH ticked AS") and "INSERT INTO rollbacks" in ran[1]
    assert "DELETE FROM messages" in ran[2]


def test_a_purge_on_postgresql_returns_no_removed_row(postgres: ContextStore) -> None:
    """A purge only counts what its DELETEs remove: they return a constant, not the rows."""
    cid = _with_tail(postgres)
    with recorded_statements(postgres) as ran:
        postgres.rollback(cid, "cp", purge=True)
    (removal,) = [s for s in ran if "DELETE" in s]
    assert removal.count("RETURNING 1") == len(timeline.REMOVAL_ORDER)
    assert "RETURNING *" not in removal and "INSERT INTO archived_" not in removal


def test_a_rollback_refuses_as_before_in_its_one_lookup(postgres: ContextStore) -> None:
    cid = _with_tail(postgres)
    with pytest.raises(ConversationNotFoundError, match=r"no conversation has id 'f+'"):
        postgres.rollback("f" * 32, "cp")
    with pytest.raises(ConversationNotFoundError):
        postgres.rollback("f" * 32, 5)
    with pytest.raises(
        CheckpointNotFoundError, match=r"no checkpoint labelled 'nope' \(labels: 'cp'\)"
    ):
        postgres.rollback(cid, "nope")
    assert len(postgres.messages(cid)) == 19
    assert postgres.rollback(cid, "cp").removed["messages"] == 12
