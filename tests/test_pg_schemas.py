"""The PostgreSQL schema pool hands on only empty schemas shaped as migration made them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from contextstore import ContextStore
from tests.conftest import POSTGRES_URL, user
from tests.pg_schemas import SchemaPool, connect_args


@pytest.fixture
def pool() -> Iterator[SchemaPool]:
    if not POSTGRES_URL:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    made = SchemaPool(POSTGRES_URL)
    try:
        yield made
    finally:
        made.close()


def _schemas(prefix: str) -> set[str]:
    assert POSTGRES_URL
    engine = sa.create_engine(POSTGRES_URL)
    try:
        with engine.connect() as connection:
            return set(
                connection.execute(
                    sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE :p"),
                    {"p": f"{prefix}%"},
                ).scalars()
            )
    finally:
        engine.dispose()


def _store(pool: SchemaPool, schema: str) -> ContextStore:
    assert POSTGRES_URL
    return ContextStore.open(POSTGRES_URL, engine_kwargs=connect_args(schema))


def test_a_schema_given_back_unchanged_comes_back_empty_with_its_counters_restarted(
    pool: SchemaPool,
) -> None:
    schema = pool.take()
    with _store(pool, schema) as store:
        cid = store.create_conversation().id
        store.append(cid, [user("a"), user("b")])
        first = store.checkpoint(cid, "cp")
    pool.give_back(schema)
    assert pool.take() == schema
    with _store(pool, schema) as store:
        assert store.list_conversations() == []
        assert set(store.row_counts().values()) == {0}
        cid = store.create_conversation().id
        store.append(cid, [user("a"), user("b")])
        assert store.checkpoint(cid, "cp").id == first.id


@pytest.mark.parametrize(
    "change",
    [
        'ALTER TABLE "{s}".messages ADD COLUMN extra integer',
        'CREATE INDEX extra_ix ON "{s}".blocks (message_idx)',
        'DROP VIEW "{s}".audit_rollbacks',
        "UPDATE \"{s}\".alembic_version SET version_num = '0010'",
        'DROP TABLE "{s}".alembic_version',
    ],
    ids=["column", "index", "view", "revision", "revision table"],
)
def test_a_schema_whose_shape_changed_is_dropped_not_handed_on(
    pool: SchemaPool, change: str
) -> None:
    schema = pool.take()
    assert POSTGRES_URL
    engine = sa.create_engine(POSTGRES_URL)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(change.format(s=schema)))
    finally:
        engine.dispose()
    pool.give_back(schema)
    assert schema not in _schemas(schema)
    assert pool.take() != schema
