"""Writes of one conversation that interleave on PostgreSQL keep its history whole.

On PostgreSQL, writers of a conversation serialise on its row (the clock's ``UPDATE``), and
a write transaction reads at ``READ COMMITTED``: what a write reads before it locks the row
may be changed by another writer's commit before it writes. Each test here stops one writer
at the point where, until 2026-12-05, it had read without the lock, lets a rollback of the
same conversation run (to its end, or until it waits for the lock the first writer holds
now), then lets the first writer go on; the history must stay whole either way. SQLite
writers take the whole file at ``BEGIN IMMEDIATE``, so there the interleaving cannot occur.
The verdicts are outcomes; :data:`HUNG` only bounds a wait that would hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from contextstore import ContextStore
from contextstore.core.errors import InvalidInputError
from contextstore.storage import conversations, timeline
from tests import conftest
from tests.conftest import POSTGRES_URL, text
from tests.pg_schemas import connect_args

HUNG = 60.0
"""Seconds after which a wait is taken to have hung (a deadline, not a measure)."""


@pytest.fixture
def schema() -> Iterator[str]:
    """A migrated PostgreSQL schema of the pool, given back afterwards."""
    pools = conftest._SCHEMAS
    if pools is None:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    taken = pools.take()
    yield taken
    pools.give_back(taken)


def _open(schema: str) -> ContextStore:
    return ContextStore.open(str(POSTGRES_URL), engine_kwargs=connect_args(schema))


def _history(store: ContextStore, cid: str, count: int) -> None:
    """``count`` messages, user and assistant in turn, texts ``m0``, ``m1``, ..."""
    for i in range(count):
        store.append(cid, "user" if i % 2 == 0 else "assistant", [text(f"m{i}")])


class Stop:
    """Stops the thread named ``stopped`` where :meth:`here` is called, until released."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.released = threading.Event()

    def here(self) -> None:
        if threading.current_thread().name == "stopped":
            self.reached.set()
            assert self.released.wait(HUNG), "never released"


def _backend_pid(store: ContextStore) -> int:
    """The server process of the calling thread's connection."""
    with store.database.read() as connection:
        return int(connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


def _waits_for_a_lock(pid: int) -> bool:
    conninfo = str(POSTGRES_URL).replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(conninfo) as watcher:
        row = watcher.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return row is not None and row[0] == "Lock"


def _interleaved(first: Callable[[], Any], stop: Stop, second: Callable[[], Any]) -> list[Any]:
    """Run ``first`` on a thread until it reaches ``stop``; then ``second`` on another,
    until it has ended or waits for a lock on the server; then let ``first`` go on. Returns
    each one's result or error."""
    outcomes: list[Any] = [None, None]

    def run(index: int, work: Callable[[], Any]) -> None:
        try:
            outcomes[index] = work()
        except Exception as exc:
            outcomes[index] = exc

    first_thread = threading.Thread(target=run, args=(0, first), name="stopped")
    first_thread.start()
    assert stop.reached.wait(HUNG), "the first writer never reached its stop"
    pid: list[int] = []
    second_thread = threading.Thread(target=run, args=(1, lambda: second(pid)), name="second")
    second_thread.start()
    deadline = time.monotonic() + HUNG
    while second_thread.is_alive() and not (pid and _waits_for_a_lock(pid[0])):
        assert time.monotonic() < deadline, "the second writer neither ended nor waited"
        second_thread.join(0.01)
    stop.released.set()
    first_thread.join(HUNG)
    second_thread.join(HUNG)
    assert not first_thread.is_alive() and not second_thread.is_alive()
    return outcomes


def _rollback_to(store: ContextStore, cid: str, to: int) -> Callable[[list[int]], Any]:
    def work(pid: list[int]) -> Any:
        pid.append(_backend_pid(store))
        return store.rollback(cid, to=to)

    return work


@contextmanager
def _stopping(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, stop: Stop) -> Iterator[None]:
    """``owner.name`` (a function) stops the thread named ``stopped`` once it returns."""
    original = getattr(owner, name)

    def stopping(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        stop.here()
        return result

    monkeypatch.setattr(owner, name, stopping)
    yield


def test_a_restore_and_a_rollback_to_an_earlier_moment_never_leave_a_gap(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(schema) as restorer, _open(schema) as other:
        cid = restorer.create_conversation().id
        _history(restorer, cid, 3)
        first_ts = restorer.message_timestamps(cid)[0]
        kept = restorer.checkpoint(cid, label="three").ts
        _history(restorer, cid, 3)  # m0..m2 again, as messages 3..5
        removed = restorer.rollback(cid, to=kept)
        assert removed.rollback_id is not None
        stop = Stop()
        # Until 2026-12-05 the restore looked for later rollbacks before it locked.
        with _stopping(monkeypatch, timeline, "later_rollbacks_below", stop):
            restored, rolled_back = _interleaved(
                lambda: restorer.restore(cid, removed.rollback_id),
                stop,
                _rollback_to(other, cid, first_ts),
            )
        assert not isinstance(rolled_back, Exception)
        # Either order is a history that existed: restored then rolled back to message 0,
        # or rolled back and the restore refused (it would continue a history now gone).
        assert isinstance(restored, InvalidInputError) or restored.restored["messages"] == 3
        assert other.check(cid, raise_on_problems=False).ok
        assert [m["content"][0]["text"] for m in other.messages(cid)] == ["m0"]


def test_a_fork_copies_its_parent_whole_while_the_parent_rolls_back(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(schema) as forker, _open(schema) as other:
        cid = forker.create_conversation().id
        _history(forker, cid, 2)
        kept = forker.checkpoint(cid, label="two").ts
        _history(forker, cid, 4)
        stop = Stop()
        copies = dict(timeline._COPY)

        class StopBeforeBlocks:
            """The copy of the blocks, after the messages were copied."""

            def count(self, connection: Any, params: Any) -> int:
                stop.here()
                return int(copies["blocks"].count(connection, params))

        monkeypatch.setitem(timeline._COPY, "blocks", StopBeforeBlocks())
        forked, rolled_back = _interleaved(
            lambda: forker.fork(cid), stop, _rollback_to(other, cid, kept)
        )
        assert not isinstance(forked, Exception) and not isinstance(rolled_back, Exception)
        # The fork copied the parent as it was before the rollback or after it, whole.
        fork_id = forked.id
        counts = other.row_counts(fork_id)
        assert counts["messages"] == counts["blocks"] in (2, 6)
        other.append(fork_id, "user", [text("after the fork")])
        assert len(other.messages(fork_id)) == counts["messages"] + 1
        assert other.check(fork_id, raise_on_problems=False).ok
        assert other.check(cid, raise_on_problems=False).ok


def _changing(store: ContextStore, cid: str, **change: Any) -> Callable[[list[int]], Any]:
    def work(pid: list[int]) -> Any:
        pid.append(_backend_pid(store))
        return store.set_conversation_model(cid, **change)

    return work


def test_two_model_changes_at_once_both_land(schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with _open(schema) as first, _open(schema) as other:
        cid = first.create_conversation(model_id="old-model", context_window=100_000).id
        stop = Stop()
        # Until 2026-12-05 each wrote back the field it kept as it had read it, unlocked.
        with _stopping(monkeypatch, conversations, "get_conversation", stop):
            outcomes = _interleaved(
                lambda: first.set_conversation_model(cid, model_id="new-model"),
                stop,
                _changing(other, cid, context_window=50_000),
            )
        assert not any(isinstance(outcome, Exception) for outcome in outcomes)
        now = other.get_conversation(cid)
        assert (now.model_id, now.context_window) == ("new-model", 50_000)


def test_auto_condense_set_while_an_importer_writes_metadata_keeps_the_importers(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(schema) as first, _open(schema) as other:
        cid = first.create_conversation().id
        first.set_auto_condense(cid, 0.5)
        stop = Stop()
        with _stopping(monkeypatch, conversations, "get_conversation", stop):
            outcomes = _interleaved(
                lambda: first.set_auto_condense(cid, 0.8),
                stop,
                lambda pid: (
                    pid.append(_backend_pid(other)),
                    other.set_conversation_metadata(cid, {"importer": "its state"}),
                ),
            )
        assert not any(isinstance(outcome, Exception) for outcome in outcomes)
        # In either order the importer's metadata stays (until 2026-12-05 the auto-condense
        # write put back the metadata it had read, without the importer's).
        assert other.get_conversation(cid).metadata["importer"] == "its state"
