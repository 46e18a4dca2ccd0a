"""A database server that cannot be reached, refuses the login or drops the connection is a
:class:`DatabaseUnavailableError`, never the driver's exception (README "Errors")."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest
import sqlalchemy as sa

from contextstore import ContextStore, DatabaseUnavailableError
from contextstore.storage.driver_errors import classify_database_error
from tests import conftest
from tests.conftest import POSTGRES_URL
from tests.pg_schemas import connect_args


def test_a_server_that_is_not_there_is_unavailable() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(DatabaseUnavailableError, match=r"check the URL .* server is running"):
        ContextStore.open("postgresql+psycopg://someone@127.0.0.1:1/x")


@pytest.mark.skipif(not POSTGRES_URL, reason="set CONTEXTSTORE_TEST_POSTGRES_URL")
@pytest.mark.parametrize("part", ["database", "username"])
def test_a_missing_database_or_role_is_unavailable(part: str) -> None:
    url = sa.make_url(str(POSTGRES_URL))
    wrong = url.set(**{part: f"nobody_{uuid.uuid4().hex[:8]}"})
    with pytest.raises(DatabaseUnavailableError, match="does not exist"):
        ContextStore.open(wrong.render_as_string(hide_password=False))


@pytest.mark.parametrize(
    ("error", "dropped"),
    [
        ("AdminShutdown:an administrator's words", True),  # by its SQLSTATE, 57P01
        ("OperationalError:consuming input failed: SERVER CLOSED THE CONNECTION", True),
        ("OperationalError:the connection is lost", True),
        ("OperationalError:connection failed: Connection refused", False),
        ('InvalidCatalogName:database "x" does not exist', False),
    ],
)
def test_a_connection_the_server_ended_is_told_from_one_it_never_opened(
    error: str, dropped: bool
) -> None:
    psycopg = pytest.importorskip("psycopg")
    name, text = error.split(":", 1)
    kind = getattr(psycopg.errors, name, None) or getattr(psycopg, name)
    found = classify_database_error(kind(text))
    assert isinstance(found, DatabaseUnavailableError)
    assert ("closed the connection" in str(found)) == dropped
    assert ("check the URL" in str(found)) == (not dropped)


class _Dropping(NamedTuple):
    """A PostgreSQL store whose connections a test can have the server drop."""

    store: ContextStore
    drop_all: Callable[[], int]
    """Terminate every connection the store holds, as a server restart would; returns how
    many there were."""


@pytest.fixture
def dropping() -> Iterator[_Dropping]:
    if not POSTGRES_URL:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL")
    pools = conftest._SCHEMAS
    assert pools is not None
    schema = pools.take()
    name = f"contextstore-{uuid.uuid4().hex[:12]}"
    kwargs = connect_args(schema)
    kwargs["connect_args"]["application_name"] = name
    store = ContextStore.open(str(POSTGRES_URL), engine_kwargs=kwargs)
    admin = sa.create_engine(str(POSTGRES_URL))

    def drop_all() -> int:
        with admin.begin() as connection:
            return int(
                connection.execute(
                    sa.text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = :name"
                    ),
                    {"name": name},
                ).scalar()
                or 0
            )

    try:
        yield _Dropping(store, drop_all)
    finally:
        admin.dispose()
        store.close()
        pools.give_back(schema)


def test_a_connection_the_server_drops_is_unavailable_once_then_replaced(
    dropping: _Dropping,
) -> None:
    store = dropping.store
    conv = store.create_conversation()
    store.append(conv.id, "user", "kept")
    assert dropping.drop_all() == 1
    with pytest.raises(DatabaseUnavailableError, match="terminat"):
        store.messages(conv.id)
    assert [m["content"] for m in store.messages(conv.id)] == ["kept"]


class _Worker:
    """A thread of its own that runs the calls it is given, one at a time, so that a test
    knows which thread (and so which held connection) runs each."""

    def __init__(self) -> None:
        self._calls: queue.Queue[Callable[[], Any] | None] = queue.Queue()
        self._results: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                self._results.put((call(), None))
            except BaseException as exc:
                self._results.put((None, exc))

    def run(self, call: Callable[[], Any]) -> Any:
        self._calls.put(call)
        result, error = self._results.get(timeout=60)
        if error is not None:
            raise error
        return result

    def stop(self) -> None:
        self._calls.put(None)
        self._thread.join(timeout=60)


def test_connections_the_server_drops_at_once_fail_one_call_not_one_per_thread(
    dropping: _Dropping,
) -> None:
    store = dropping.store
    workers = [_Worker() for _ in range(3)]
    try:
        conv = store.create_conversation()
        store.append(conv.id, "user", "kept")
        for worker in workers:  # each thread holds a connection of its own
            assert len(worker.run(lambda: store.messages(conv.id))) == 1
        assert dropping.drop_all() == 4  # the three workers' and the test thread's
        first, *others = workers
        with pytest.raises(DatabaseUnavailableError, match="closed the connection") as refused:
            first.run(lambda: store.messages(conv.id))
        assert "terminat" in str(refused.value) and "retry" in str(refused.value)
        for worker in others:
            assert len(worker.run(lambda: store.messages(conv.id))) == 1
        assert store.append(conv.id, "assistant", "after").index == 1  # the test's thread
    finally:
        for worker in workers:
            worker.stop()
