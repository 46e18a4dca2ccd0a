"""A PostgreSQL writer that meets a conversation another transaction holds gives up after
its bounded retries (DatabaseBusyError, exit 7), as a SQLite writer does: it waited for as
long as the other transaction stayed open."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from contextstore import ContextStore, DatabaseBusyError
from contextstore.interop import import_cline
from contextstore.storage import database, engine
from tests import conftest
from tests.cli.conftest import run
from tests.conftest import POSTGRES_URL, session
from tests.interop.cline_factory import story
from tests.pg_schemas import connect_args

HOLDER_GIVES_UP = "20s"
"""How long the holding connection may sit idle in its transaction before the server ends
it: without lock_timeout the writer waits that long and then succeeds (the test fails)
instead of waiting forever."""


@pytest.fixture
def schema(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated schema, with short lock waits and few attempts (read as connections open)."""
    pools = conftest._SCHEMAS
    if pools is None:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    monkeypatch.setattr(engine, "LOCK_TIMEOUT_MS", 100)
    monkeypatch.setattr(database, "WRITE_ATTEMPTS", 3)
    taken = pools.take()
    yield taken
    pools.give_back(taken)


def _store(schema: str) -> ContextStore:
    return ContextStore.open(str(POSTGRES_URL), engine_kwargs=connect_args(schema))


@contextmanager
def conversation_held(schema: str, cid: str) -> Iterator[None]:
    """Another program's transaction holding the conversation's row (SELECT ... FOR UPDATE)."""
    conninfo = str(POSTGRES_URL).replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(conninfo, options=f"-csearch_path={schema}") as holder:
        holder.execute(f"SET idle_in_transaction_session_timeout = '{HOLDER_GIVES_UP}'")
        holder.execute("SELECT id FROM conversations WHERE id = %s FOR UPDATE", (cid,))
        yield
        holder.rollback()


def test_a_writer_gives_up_while_another_transaction_holds_the_conversation(schema: str) -> None:
    with _store(schema) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "hi")
        with conversation_held(schema, cid):
            with pytest.raises(DatabaseBusyError, match="locked by other writers"):
                store.checkpoint(cid, label="waited")
            with pytest.raises(DatabaseBusyError):
                store.append(cid, "assistant", "waited")
        assert store.checkpoints(cid) == [] and len(store.messages(cid)) == 1
        assert store.checkpoint(cid, label="after").label == "after"


def test_a_writer_gives_up_while_another_store_s_transaction_is_open(schema: str) -> None:
    """The tester's case: process A appends inside ``store.transaction()`` and sleeps."""
    with _store(schema) as holder, _store(schema) as waiter:
        cid = holder.create_conversation().id
        holder.append(cid, "user", "hi")
        with holder.transaction():
            holder.append(cid, "assistant", "held")
            with pytest.raises(DatabaseBusyError):
                waiter.checkpoint(cid, label="waited")
        assert waiter.checkpoints(cid) == [] and len(waiter.messages(cid)) == 2


def test_a_busy_retry_never_calls_the_summarizer_again(schema: str) -> None:
    with _store(schema) as store:
        cid = store.create_conversation().id
        store.append(cid, session(6))
        calls: list[int] = []

        def summarize(hidden: list[dict[str, Any]]) -> str:
            calls.append(len(hidden))
            return "summary"

        with conversation_held(schema, cid), pytest.raises(DatabaseBusyError):
            store.truncate(cid, keep="half", summarizer=summarize)
        assert len(calls) == 1
        assert store.deleted_range(cid) is None


def test_the_checkpoint_command_exits_7_while_the_conversation_is_held(schema: str) -> None:
    url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    with _store(schema) as store:
        cid = store.create_conversation().id
        with conversation_held(schema, cid):
            got = run("--db", url, "checkpoint", cid, "--label", "waited")
        assert got.code == 7 and got.err.count("\n") == 1, got.err
        assert "locked by other writers" in got.err
        assert store.checkpoints(cid) == []


def test_the_lock_timeout_is_set_unless_the_url_gives_one(schema: str) -> None:
    with _store(schema) as store:
        assert store.query("SHOW lock_timeout").rows == [("100ms",)]
    given = {"connect_args": {"options": f"-csearch_path={schema} -clock_timeout=1234"}}
    with ContextStore.open(str(POSTGRES_URL), engine_kwargs=given) as store:
        assert store.query("SHOW lock_timeout").rows == [("1234ms",)]


def test_an_import_that_meets_a_held_conversation_says_it_was_not_retried(
    schema: str, tmp_path: Path
) -> None:
    """Two imports of one Cline folder at once: the second, inside its one transaction,
    waits on a conversation the first is writing. It is not retried (the transaction cannot
    be run again), yet its error said it stayed locked "for 8 attempts"; it now says what
    happened, and that nothing of the import was kept."""
    folder = tmp_path / "1760000000000"
    story(3).write(folder)
    with _store(schema) as store:
        import_cline(store, folder)
        story(5).write(folder)  # the agent went on
        held = conversation_held(schema, "1760000000000")
        with held, pytest.raises(DatabaseBusyError) as raised:
            import_cline(store, folder)
        message = str(raised.value)
        assert "attempts" not in message, message
        assert "not tried again" in message and "nothing it wrote was kept" in message
        assert len(store.messages("1760000000000")) == 7
        assert [item.status for item in import_cline(store, folder).items] == ["updated"]
        assert len(store.messages("1760000000000")) == 11
