"""The caller's hooks run before the write transaction, once, and on a conversation that is
still the one they read: a plan whose conversation changed is made again, a bounded number
of times, and a busy database retries the write alone."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from contextstore import ConcurrentChangeError, ContextStore, DatabaseBusyError
from contextstore.facade import base
from contextstore.processors.pipeline import Pipeline
from tests.conftest import session


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
