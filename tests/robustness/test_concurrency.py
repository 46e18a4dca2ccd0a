"""Concurrent writers and readers: nothing lost, nothing duplicated, no busy error, no torn view.

Writers append ``[assistant tool_use, user tool_result]`` pairs, each pair one
``append_many`` transaction; readers render all the while and would see an odd count or a
``result missing`` placeholder if a render ever split a transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from contextstore import ContextStore
from contextstore.core.errors import ConcurrentChangeError, InvalidInputError
from contextstore.devtools.concurrency import (
    TASK,
    ReaderReport,
    WriterReport,
    open_simultaneously,
    run_processes,
    run_threads,
)
from tests import conftest
from tests.conftest import POSTGRES_URL, open_backend, postgres_schema_store
from tests.pg_schemas import connect_args

PAIRS = 20


def _prepare(store: ContextStore, ids: list[str]) -> None:
    for conversation_id in ids:
        store.create_conversation(id=conversation_id)
        store.append(conversation_id, "user", TASK)


def _assert_clean(writers: list[WriterReport], readers: list[ReaderReport], expected: int) -> None:
    assert len(writers) == expected, "every writer reported"
    for report in writers:
        assert report.errors == [], f"{report.writer}: {report.errors}"
        assert len(report.indices) == PAIRS
        assert all(b == a + 1 for a, b in report.indices), "a pair's two messages are adjacent"
    assert readers, "readers ran"
    for reader in readers:
        assert reader.errors == []
        assert reader.problems == []
        assert reader.renders > 0


def _assert_histories(store: ContextStore, writers: list[WriterReport]) -> None:
    """Indices 0..n-1, each writer's pairs all present once, in the order written."""
    by_conversation: dict[str, list[WriterReport]] = {}
    for report in writers:
        by_conversation.setdefault(report.conversation_id, []).append(report)
    for conversation_id, reports in by_conversation.items():
        messages = store.messages(conversation_id)  # raises unless indices are 0..n-1
        assert len(messages) == 1 + 2 * PAIRS * len(reports)
        tags = [m["content"][0]["text"] for m in messages[1::2]]
        assert len(set(tags)) == len(tags), "no message duplicated"
        for report in reports:
            mine = [t for t in tags if t.split(":")[0] == report.writer]
            assert mine == [f"{report.writer}:{n}" for n in range(PAIRS)]
            for number, (first, _) in enumerate(report.indices):
                assert messages[first]["content"][0]["text"] == f"{report.writer}:{number}"
        store.check(conversation_id)


PLAN = [
    ("shared", "w0", PAIRS),
    ("shared", "w1", PAIRS),
    ("shared", "w2", PAIRS),
    ("solo-a", "w3", PAIRS),
    ("solo-b", "w4", PAIRS),
]
READERS = [["shared"], ["shared", "solo-a", "solo-b"]]


def _search_path(store: ContextStore) -> str:
    with store.database.read() as connection:
        return str(connection.execute(text("SHOW search_path")).scalar_one())


@pytest.fixture(params=["file", "postgres"])
def process_target(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ContextStore, str, Any]]:
    """A store plus the location and engine arguments other processes open it with."""
    if request.param == "file":
        path = tmp_path / "shared.db"
        with ContextStore.open(path) as store:
            yield store, str(path), None
        return
    if not POSTGRES_URL:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    store, cleanup = postgres_schema_store()
    try:
        kwargs = {"connect_args": {"options": f"-csearch_path={_search_path(store)}"}}
        yield store, POSTGRES_URL, kwargs
    finally:
        cleanup()


def test_five_writer_processes_and_two_readers_lose_and_tear_nothing(
    process_target: tuple[ContextStore, str, Any],
) -> None:
    store, location, kwargs = process_target
    _prepare(store, ["shared", "solo-a", "solo-b"])
    writers, readers = run_processes(location, PLAN, READERS, engine_kwargs=kwargs)
    _assert_clean(writers, readers, len(PLAN))
    _assert_histories(store, writers)


def test_renders_never_see_half_of_a_rollback(
    process_target: tuple[ContextStore, str, Any],
) -> None:
    """A writer appends a pair and rolls it back, over and over; every render is whole.

    A read made of several statements without one snapshot would see the message rows
    and then find their blocks deleted (a message with no content), or the reverse.
    """
    store, location, kwargs = process_target
    ids = ["churn-a", "churn-b"]
    _prepare(store, ids)
    for conversation_id in ids:
        store.checkpoint(conversation_id, "base")
    plan = [(conversation_id, f"r{n}", PAIRS) for n, conversation_id in enumerate(ids)]
    writers, readers = run_processes(
        location, plan, [ids, ids], engine_kwargs=kwargs, rollback_to="base"
    )
    _assert_clean(writers, readers, len(plan))
    assert sum(r.renders for r in readers) > 10
    for conversation_id in ids:
        assert store.messages(conversation_id) == [{"role": "user", "content": TASK}]
        assert len(store.checkpoints(conversation_id)) == 1


@pytest.mark.parametrize("backend", ["memory", "file", "postgres"])
def test_threads_sharing_one_store(backend: str, tmp_path: Path) -> None:
    store, cleanup = open_backend(backend, tmp_path)
    try:
        _prepare(store, ["shared", "solo-a", "solo-b"])
        writers, readers = run_threads(store, PLAN, READERS)
        _assert_clean(writers, readers, len(PLAN))
        _assert_histories(store, writers)
    finally:
        cleanup()


def test_processes_opening_a_new_database_at_once(tmp_path: Path) -> None:
    """Creating the file, switching to WAL and migrating all tolerate a race of openers."""
    path = tmp_path / "new" / "race.db"
    outcomes = open_simultaneously(str(path), 4)
    assert [kind for kind, _ in outcomes] == ["ok"] * 4, outcomes
    with ContextStore.open(path) as store:
        assert len(store.list_conversations()) == 4


@pytest.mark.skipif(not POSTGRES_URL, reason="set CONTEXTSTORE_TEST_POSTGRES_URL")
def test_two_writers_creating_one_conversation_id_is_a_race_to_retry_not_damage() -> None:
    """Two first imports of one Cline task at once on PostgreSQL: each looked, found no
    conversation with the task's id and created it; the second was exit 5 (integrity, whose
    advice is check and restore a backup). It is a concurrent change now (exit 7)."""
    pools = conftest._SCHEMAS
    assert pools is not None
    schema = pools.take()
    first = ContextStore.open(str(POSTGRES_URL), engine_kwargs=connect_args(schema))
    second = ContextStore.open(str(POSTGRES_URL), engine_kwargs=connect_args(schema))
    holding, release = threading.Event(), threading.Event()
    outcome: list[BaseException | None] = []

    def hold_a_creation() -> None:
        with first.transaction():
            first.create_conversation(id="1760000000000")
            holding.set()
            release.wait(60)

    def create_the_same() -> None:
        try:
            second.create_conversation(id="1760000000000")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    holder = threading.Thread(target=hold_a_creation)
    racer = threading.Thread(target=create_the_same)
    try:
        holder.start()
        assert holding.wait(60)
        racer.start()
        with first.database.engine.connect() as watcher:  # the racer waits on the index
            for _ in range(600):
                waiting = watcher.execute(
                    text("SELECT count(*) FROM pg_locks WHERE NOT granted")
                ).scalar()
                if waiting:
                    break
                threading.Event().wait(0.1)
        release.set()
        holder.join(60)
        racer.join(60)
        (error,) = outcome
        assert isinstance(error, ConcurrentChangeError) and error.exit_code == 7
        assert "Run the call again" in str(error)
        with pytest.raises(InvalidInputError, match="already exists"):
            second.create_conversation(id="1760000000000")
    finally:
        release.set()
        first.close()
        second.close()
        pools.give_back(schema)
