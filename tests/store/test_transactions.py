"""Several calls as one transaction, and rows stamped with a caller's own clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextstore import (
    ContextStore,
    ConversationNotFoundError,
    IntegrityViolationError,
    InvalidInputError,
    ReadOnlyError,
    StorageFullError,
    TimelineError,
)
from contextstore.storage.driver_errors import classify_database_error, translated_errors
from tests.conftest import assistant, session, user


def test_calls_inside_a_transaction_land_together(store: ContextStore) -> None:
    conv = store.create_conversation()
    with store.transaction():
        store.append(conv.id, "user", "task")
        store.record_request(conv.id, tokens_in=10, tokens_out=2)
        store.checkpoint(conv.id, "inside")
        # calls inside see each other's rows
        assert len(store.messages(conv.id)) == 1
        assert store.render(conv.id) == [{"role": "user", "content": "task"}]
    assert len(store.messages(conv.id)) == 1
    assert [r.tokens_in for r in store.requests(conv.id)] == [10]
    assert [c.label for c in store.checkpoints(conv.id)] == ["inside"]


def test_an_exception_leaving_the_block_undoes_every_call(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "kept")
    before = store.row_counts(conv.id)
    last = store.get_conversation(conv.id).last_ts
    with pytest.raises(KeyError), store.transaction():
        store.append(conv.id, "assistant", "lost")
        store.checkpoint(conv.id, "lost")
        raise KeyError("the caller gave up")
    assert store.row_counts(conv.id) == before
    assert store.get_conversation(conv.id).last_ts == last
    assert store.render(conv.id) == [{"role": "user", "content": "kept"}]


def test_a_refused_call_inside_leaves_nothing_of_itself_and_the_rest_commits(
    store: ContextStore,
) -> None:
    conv = store.create_conversation()
    with store.transaction():
        store.append(conv.id, "user", "first")
        with pytest.raises(InvalidInputError):
            # refused after its clock tick was taken: the savepoint undoes the tick too
            store.set_deleted_range(conv.id, 5)
        with pytest.raises(ConversationNotFoundError):
            store.append("nope", "user", "x")
        store.append(conv.id, "assistant", "second")
    messages = store.messages(conv.id)
    assert [m["content"] for m in messages] == ["first", "second"]
    assert store.deleted_range(conv.id) is None


def test_renders_inside_a_transaction_are_not_cached(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "kept")
    with pytest.raises(RuntimeError), store.transaction():
        store.append(conv.id, "assistant", "never committed")
        assert len(store.render(conv.id)) == 2
        raise RuntimeError
    # the same newest ts could come back after the rollback; the view must be recomputed
    assert store.render(conv.id) == [{"role": "user", "content": "kept"}]


def test_nested_transactions_join_the_outer_one(store: ContextStore) -> None:
    conv = store.create_conversation()
    with pytest.raises(RuntimeError), store.transaction():
        with store.transaction():
            store.append(conv.id, "user", "inner")
        raise RuntimeError
    assert store.messages(conv.id) == []


def test_a_read_only_store_refuses_a_transaction(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    ContextStore.open(path).close()
    with (
        ContextStore.open(path, read_only=True) as store,
        pytest.raises(ReadOnlyError),
        store.transaction(),
    ):
        pass


def test_rows_can_carry_the_callers_clock(store: ContextStore) -> None:
    conv = store.create_conversation(created_ts=1_700_000_000_000)
    assert conv.created_ts == conv.last_ts == 1_700_000_000_000
    first = store.append(conv.id, "user", "task", ts=1_700_000_000_100)
    store.append(conv.id, "assistant", "reply", ts=1_700_000_000_200)
    request = store.record_request(conv.id, tokens_in=5, ts=1_700_000_000_300)
    checkpoint = store.checkpoint(conv.id, "cp", git_hash="abc123", ts=1_700_000_000_400)
    update_ts = store.add_context_update(conv.id, 1, 0, "rewritten", ts=1_700_000_000_500)
    store.append(conv.id, [user("more"), assistant("again")], ts=1_700_000_000_600)
    range_ts = store.set_deleted_range(conv.id, 2, ts=1_700_000_000_700)
    assert (first.ts, request.ts, checkpoint.ts, update_ts, range_ts) == (
        1_700_000_000_100,
        1_700_000_000_300,
        1_700_000_000_400,
        1_700_000_000_500,
        1_700_000_000_700,
    )
    assert store.deleted_range(conv.id, as_of=1_700_000_000_699) is None
    assert store.deleted_range(conv.id, as_of=1_700_000_000_700) == (2, 2)
    assert store.render(conv.id, as_of=1_700_000_000_499)[1]["content"] == "reply"
    assert store.render(conv.id, as_of=1_700_000_000_500)[1]["content"] == "rewritten"


@pytest.mark.parametrize(
    "write",
    [
        lambda s, c, ts: s.record_request(c, tokens_in=1, ts=ts),
        lambda s, c, ts: s.checkpoint(c, "x", ts=ts),
        lambda s, c, ts: s.add_context_update(c, 0, 0, "y", ts=ts),
        lambda s, c, ts: s.append(c, "assistant", "z", ts=ts),
    ],
    ids=["record_request", "checkpoint", "add_context_update", "append"],
)
def test_a_ts_not_after_the_last_one_is_refused_and_changes_nothing(
    store: ContextStore, write: object
) -> None:
    conv = store.create_conversation(created_ts=1_000)
    last = store.append(conv.id, "user", "task", ts=2_000).ts
    before = store.row_counts(conv.id)
    for stale in (last, last - 1):
        with pytest.raises(TimelineError):
            write(store, conv.id, stale)  # type: ignore[operator]
    assert store.row_counts(conv.id) == before
    assert store.get_conversation(conv.id).last_ts == last


def test_ts_with_a_prepared_request_id_is_refused(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    prepared = store.prepare_request(conv.id)
    with pytest.raises(InvalidInputError, match="request_id"):
        store.record_request(conv.id, request_id=prepared.request_id, tokens_in=1, ts=2**40)


@pytest.mark.parametrize("created_ts", [-1, 2**53 + 1, True, "0", 1.5])
def test_a_malformed_created_ts_is_refused(store: ContextStore, created_ts: object) -> None:
    with pytest.raises(InvalidInputError):
        store.create_conversation(created_ts=created_ts)  # type: ignore[arg-type]
    assert store.list_conversations() == []


def test_a_transaction_holds_a_whole_import_sized_batch(store: ContextStore) -> None:
    conv = store.create_conversation(created_ts=10)
    with store.transaction():
        for i, message in enumerate(session(50)):
            store.append(conv.id, [message], ts=100 + i)
    assert len(store.messages(conv.id)) == 101
    assert [m["role"] for m in store.messages(conv.id, as_of=101)] == ["user", "assistant"]


def test_postgresql_constraint_violations_are_integrity_errors() -> None:
    """Any SQLSTATE of class 23 (integrity constraint violation) is IntegrityViolationError;
    others are not."""
    psycopg = pytest.importorskip("psycopg")
    for failure in (
        psycopg.errors.UniqueViolation("duplicate key"),
        psycopg.errors.ForeignKeyViolation("no such conversation"),
    ):
        with pytest.raises(IntegrityViolationError, match="rolled back"), translated_errors():
            raise failure
    with pytest.raises(psycopg.errors.UndefinedTable), translated_errors():
        raise psycopg.errors.UndefinedTable("x")


def test_a_driver_error_without_a_message_is_named_by_its_class() -> None:
    psycopg = pytest.importorskip("psycopg")
    full = classify_database_error(psycopg.errors.DiskFull(""))
    assert isinstance(full, StorageFullError) and "(DiskFull)" in str(full)
