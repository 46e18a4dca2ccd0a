"""The caller's hooks run before the write transaction, once, and on a conversation that is
still the one they read: a plan whose conversation changed is made again, a bounded number
of times, and a busy database retries the write alone."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextstore import ConcurrentChangeError, ContextStore, DatabaseBusyError
from contextstore.facade import base
from contextstore.processors.pipeline import Pipeline
from tests import conftest
from tests.conftest import POSTGRES_URL, session
from tests.pg_schemas import connect_args


def _write_lock_free(path: Path) -> bool:
    """True when another connection can take SQLite's write lock at once (no waiting)."""
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


def test_a_summarizer_runs_once_with_the_write_lock_free(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        conv = store.create_conversation()
        store.append(conv.id, session(6))
        seen: list[bool] = []

        def summarize(hidden: list[dict[str, Any]]) -> str:
            seen.append(_write_lock_free(path))
            return "what happened so far"

        decision = store.truncate(conv.id, keep="half", summarizer=summarize)
    assert decision.action == "truncate"
    assert seen == [True]


def test_the_lock_probe_sees_a_held_write_lock(tmp_path: Path) -> None:
    """The probe above can fail: inside a transaction the lock is held."""
    path = tmp_path / "agent.db"
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        conv = store.create_conversation()
        with store.transaction():
            store.append(conv.id, "user", "inside")
            assert not _write_lock_free(path)
        assert _write_lock_free(path)


def test_another_writer_can_write_the_same_file_while_a_prepare_summarises(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agent.db"
    with ContextStore.open(path, pipeline=Pipeline([])) as store:
        conv = store.create_conversation(context_window=64_000)
        other = store.create_conversation()
        store.append(conv.id, session(8))
        store.record_request(conv.id, tokens_in=60_000)
        calls = 0

        def summarize(hidden: list[dict[str, Any]]) -> str:
            nonlocal calls
            calls += 1
            with ContextStore.open(path, pipeline=Pipeline([])) as second:
                second.append(other.id, "user", "written while the summary was made")
            return "summary"

        ctx = store.prepare_request(conv.id, auto_condense=0.5, summarizer=summarize)
        assert ctx.truncated and calls == 1
        assert store.messages(other.id) == [
            {"role": "user", "content": "written while the summary was made"}
        ]


def test_a_plan_made_stale_by_a_write_is_made_again(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(6))
    calls = 0

    def summarize(hidden: list[dict[str, Any]]) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            store.append(conv.id, "assistant", "written while the first summary was made")
        return f"summary {calls}"

    decision = store.truncate(conv.id, keep="half", summarizer=summarize)
    assert calls == 2 and decision.action == "truncate"
    assert store.messages(conv.id)[-1]["content"] == "written while the first summary was made"
    notices = [u for u in store.context_updates(conv.id) if u["kind"] == "truncation_notice"]
    assert len(notices) == 1 and "summary 2" in notices[0]["text"]


def test_a_conversation_that_keeps_changing_is_refused_and_nothing_is_written(
    store: ContextStore,
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(6))
    calls = 0

    def summarize(hidden: list[dict[str, Any]]) -> str:
        nonlocal calls
        calls += 1
        store.append(conv.id, "assistant" if calls % 2 else "user", f"change {calls}")
        return "summary"

    with pytest.raises(ConcurrentChangeError, match="changed while its context"):
        store.truncate(conv.id, keep="half", summarizer=summarize)
    assert calls == base.PLAN_ATTEMPTS
    assert store.deleted_range(conv.id) is None
    assert store.context_updates(conv.id) == []
    assert isinstance(ConcurrentChangeError("x"), DatabaseBusyError)


def test_a_busy_database_retries_the_write_without_running_the_hook_again(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(6))
    real = base.tick_if_unchanged
    attempts = 0

    def busy_once(*args: Any, **kwargs: Any) -> list[int]:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise DatabaseBusyError("locked by another writer (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(base, "tick_if_unchanged", busy_once)
    calls = 0

    def summarize(hidden: list[dict[str, Any]]) -> str:
        nonlocal calls
        calls += 1
        return "summary"

    decision = store.truncate(conv.id, keep="half", summarizer=summarize)
    assert decision.action == "truncate" and attempts == 2 and calls == 1


UNLOCKED_WRITE_SECONDS = 0.5
"""How long a run waits for the append it started and does not wait out: ample for an
append that nothing blocks (a slower one makes the test pass without proving the lock)."""


@pytest.fixture(params=["file", "postgres"])
def two_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two stores of one database, as two processes of an agent would open it."""
    if request.param == "file":
        opened = [ContextStore.open(tmp_path / "agent.db") for _ in range(2)]
        yield opened[0], opened[1]
        for store in opened:
            store.close()
        return
    pools = conftest._SCHEMAS
    if pools is None:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    schema = pools.take()
    opened = [
        ContextStore.open(str(POSTGRES_URL), engine_kwargs=connect_args(schema)) for _ in range(2)
    ]
    yield opened[0], opened[1]
    for store in opened:
        store.close()
    pools.give_back(schema)


class _ConcurrentAppends:
    """A processor, local by its own word, during whose runs another store's writer
    appends to the conversation: finished before the run ends on the first runs, started
    and left running on the last."""

    name = "concurrent-appends"
    local = True

    def __init__(self, store: ContextStore, other: ContextStore, cid: str, waited: int) -> None:
        self.store = store
        self.other = other
        self.conversation_id = cid
        self.waited_runs = waited
        self.in_write: list[bool] = []
        self.left_running: list[threading.Thread] = []

    def config(self) -> dict[str, Any]:
        return {}

    def propose(self, view: Any) -> list[Any]:
        run = len(self.in_write) + 1
        # Whether this run is part of a write transaction (the store's own bookkeeping).
        self.in_write.append(self.store._db._thread.kind == "write")
        role = "assistant" if run % 2 else "user"
        writer = threading.Thread(
            target=self.other.append, args=(self.conversation_id, role, f"written in run {run}")
        )
        writer.start()
        if run <= self.waited_runs:
            writer.join()
        else:
            # Given time to write, which it gets unless this run holds the write lock.
            writer.join(timeout=UNLOCKED_WRITE_SECONDS)
            self.left_running.append(writer)
        return []


def test_a_prepare_without_hooks_succeeds_while_another_writer_keeps_appending(
    two_stores: tuple[ContextStore, ContextStore],
) -> None:
    """Another writer appended during every plan, so every attempt found the conversation
    changed and the prepare failed (ConcurrentChangeError) whenever a conversation was
    written all the while. With no hook of the caller's to run, the last attempt plans
    holding the conversation's write lock: the other writer waits for it."""
    store, other = two_stores
    conv = store.create_conversation()
    store.append(conv.id, session(3))
    appends = _ConcurrentAppends(store, other, conv.id, waited=base.PLAN_ATTEMPTS - 1)
    pipeline = Pipeline([appends])
    assert pipeline.local
    prepared = store.prepare_request(conv.id, pipeline=pipeline)
    for writer in appends.left_running:
        writer.join()
    assert appends.in_write == [False] * (base.PLAN_ATTEMPTS - 1) + [True]
    sent = [m["content"] for m in prepared.messages]
    assert sent[-1] == "written in run 2" and "written in run 3" not in str(sent)
    assert store.messages(conv.id)[-1]["content"] == "written in run 3"
    assert store.message_timestamps(conv.id)[-1] > prepared.ts
    assert store.request_payload(conv.id, prepared.request_id) == prepared.payload


def test_a_prepare_with_a_processor_that_may_call_out_never_plans_under_the_lock(
    two_stores: tuple[ContextStore, ContextStore],
) -> None:
    store, other = two_stores
    conv = store.create_conversation()
    store.append(conv.id, session(3))
    appends = _ConcurrentAppends(store, other, conv.id, waited=base.PLAN_ATTEMPTS)
    appends.local = False  # type: ignore[misc]
    with pytest.raises(ConcurrentChangeError, match="changed while its context"):
        store.prepare_request(conv.id, pipeline=Pipeline([appends]))
    assert appends.in_write == [False] * base.PLAN_ATTEMPTS
    assert store.requests(conv.id) == []


def test_only_processors_that_say_so_are_local() -> None:
    from contextstore.processors.degrade import MediaDegrader
    from contextstore.processors.distill import Distiller
    from contextstore.processors.secrets import SecretMasker
    from contextstore.processors.summarize import Summarizer
    from contextstore.processors.trimming import OutputTrimmer

    class Unsaid:
        name = "unsaid"

        def config(self) -> dict[str, Any]:
            return {}

        def propose(self, view: Any) -> list[Any]:
            return []

    built_in = [MediaDegrader(), Distiller(), SecretMasker(), OutputTrimmer()]
    assert Pipeline(built_in).local and Pipeline([]).local
    assert not Pipeline([*built_in, Summarizer(lambda text, request: "short")]).local
    assert not Pipeline([*built_in, Unsaid()]).local
