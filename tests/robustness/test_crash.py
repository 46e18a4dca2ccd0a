"""Crash safety: SIGKILL a writer at random moments, reopen, and find every commit intact.

See :mod:`contextstore.devtools.crash` for the harness; ``contextstore crash-test``
runs the same campaign for 500 kills or more.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.devtools.crash import CONVERSATION_ID, run_campaign

KILLS = 32


@pytest.mark.slow
def test_sigkill_mid_operation_never_loses_or_half_applies_a_write(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    tally = run_campaign(db, kills=KILLS, seed=7)
    assert tally.violations == []
    assert tally.lost == 0
    assert tally.kills == KILLS
    # not vacuous: every run committed before its kill (the harness waits for journaled
    # commits, not for time to pass), operations of every kind ran, and kills hit calls in
    # flight
    assert tally.committed >= KILLS
    for operation in ("append", "append_many", "record_request", "checkpoint", "rollback"):
        assert tally.by_operation[operation] > 0, operation
    assert tally.in_flight_applied + tally.in_flight_discarded > KILLS // 2
    assert set(tally.durability) == {"full", "normal"}
    # after the last kill the file is sound and usable
    connection = sqlite3.connect(db)
    assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    connection.close()
    with ContextStore.open(db) as store:
        store.check(CONVERSATION_ID)
        assert len(store.messages(CONVERSATION_ID)) == tally.final_messages >= 2
