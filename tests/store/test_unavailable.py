"""A database server that cannot be reached, refuses the login or drops the connection is a
:class:`DatabaseUnavailableError`, never the driver's exception (README "Errors")."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from contextstore import ContextStore, DatabaseUnavailableError
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


@pytest.mark.skipif(not POSTGRES_URL, reason="set CONTEXTSTORE_TEST_POSTGRES_URL")
def test_a_connection_the_server_drops_is_unavailable_once_then_replaced() -> None:
    pools = conftest._SCHEMAS
    assert pools is not None
    schema = pools.take()
    name = f"contextstore-{uuid.uuid4().hex[:12]}"
    kwargs = connect_args(schema)
    kwargs["connect_args"]["application_name"] = name
    store = ContextStore.open(str(POSTGRES_URL), engine_kwargs=kwargs)
    admin = sa.create_engine(str(POSTGRES_URL))
    try:
        conv = store.create_conversation()
        store.append(conv.id, "user", "kept")
        with admin.begin() as connection:
            killed = connection.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = :name"
                ),
                {"name": name},
            ).scalar()
        assert killed == 1
        with pytest.raises(DatabaseUnavailableError, match="terminat"):
            store.messages(conv.id)
        assert [m["content"] for m in store.messages(conv.id)] == ["kept"]
    finally:
        admin.dispose()
        store.close()
        pools.give_back(schema)
