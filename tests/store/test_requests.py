"""Request rows: a request is found only in its own conversation, usage fills in only what
is given, ``as_of`` includes the request stamped at it, and a refused call changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from contextstore import ContextStore, CorruptRowError, RequestNotFoundError
from contextstore.storage import tables
from tests.conftest import session


def test_an_unknown_request_is_refused_saying_what_to_use(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    before = store.requests(conv.id)
    with pytest.raises(RequestNotFoundError) as raised:
        store.record_request(conv.id, request_id=999, tokens_in=5)
    assert str(raised.value) == (
        f"conversation {conv.id!r} has no request 999; use the request_id returned by "
        "prepare_request."
    )
    assert store.requests(conv.id) == before
    with pytest.raises(RequestNotFoundError, match="has no request 999"):
        store.request_payload(conv.id, 999)


def test_a_request_belongs_to_its_conversation_only(store: ContextStore) -> None:
    first = store.create_conversation()
    other = store.create_conversation()
    for conv in (first, other):
        store.append(conv.id, "user", "task")
    prepared = store.prepare_request(first.id)
    assert prepared.request_id is not None
    with pytest.raises(RequestNotFoundError, match=f"conversation {other.id!r} has no request"):
        store.record_request(other.id, request_id=prepared.request_id, tokens_in=1)
    with pytest.raises(RequestNotFoundError):
        store.request_payload(other.id, prepared.request_id)
    assert store.requests(other.id) == []
    (row,) = store.requests(first.id)
    assert row.tokens_in is None


def test_a_request_recorded_without_preparing_cannot_be_rebuilt(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    recorded = store.record_request(conv.id, tokens_in=10, tokens_out=2, model_id="m")
    assert (recorded.tokens_in, recorded.tokens_out, recorded.model_id) == (10, 2, "m")
    assert recorded.payload_sha256 is None
    with pytest.raises(RequestNotFoundError, match="recorded without a prepared payload"):
        store.request_payload(conv.id, recorded.id)


def test_usage_fills_in_only_the_values_given(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    prepared = store.prepare_request(conv.id, model="first-model")
    assert prepared.request_id is not None
    store.record_request(conv.id, request_id=prepared.request_id, tokens_in=100, cache_reads=7)
    record = store.record_request(
        conv.id, request_id=prepared.request_id, tokens_out=20, cost=0.5, failure="timeout"
    )
    assert (record.tokens_in, record.tokens_out, record.cache_reads, record.cache_writes) == (
        100,
        20,
        7,
        None,
    )
    assert (record.cost, record.failure, record.total_tokens) == (0.5, "timeout", 127)
    assert record.payload_sha256 is not None
    renamed = store.record_request(conv.id, request_id=prepared.request_id, model_id="second")
    assert renamed.model_id == "second" and renamed.tokens_in == 100
    assert store.requests(conv.id) == [renamed]


def test_requests_as_of_include_the_one_stamped_at_that_moment(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    first = store.record_request(conv.id, tokens_in=1)
    store.append(conv.id, "assistant", "done")
    second = store.record_request(conv.id, tokens_in=2)
    assert first.ts < second.ts
    assert store.requests(conv.id, as_of=first.ts) == [first]
    assert store.requests(conv.id, as_of=first.ts - 1) == []
    assert store.requests(conv.id, as_of=second.ts) == [first, second]
    assert store.requests(conv.id) == [first, second]


def _damage(store: ContextStore, table: Any, **values: Any) -> None:
    """Overwrite every row of ``table`` the way a damaged database would hold them."""
    with store.database.engine.begin() as connection:
        connection.execute(sa.update(table).values(**values))


def test_damaged_request_options_are_a_corrupt_row_naming_the_request(
    store: ContextStore,
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    prepared = store.prepare_request(conv.id)
    assert prepared.request_id is not None
    _damage(store, tables.request_options, data=[1, 2])
    with pytest.raises(CorruptRowError) as raised:
        store.request_payload(conv.id, prepared.request_id)
    assert str(raised.value) == (
        f"options of request {prepared.request_id} does not hold a JSON object; the row is damaged."
    )


def test_damaged_request_details_are_a_corrupt_row_naming_the_request(
    store: ContextStore,
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, "user", "task")
    recorded = store.record_request(conv.id, tokens_in=1)
    _damage(store, tables.api_requests, details=["not", "an", "object"])
    with pytest.raises(CorruptRowError) as raised:
        store.requests(conv.id)
    assert str(raised.value) == f"request {recorded.id} details is not a JSON object."


def test_the_newest_request_s_whole_usage_decides_truncation(store: ContextStore) -> None:
    """All four counts are summed; a newest request with none recorded decides nothing."""
    conv = store.create_conversation(context_window=64_000)
    store.append(conv.id, session(10))
    store.record_request(conv.id, tokens_in=36_000, tokens_out=997, cache_writes=1, cache_reads=1)
    assert store.prepare_request(conv.id).decision.action == "none"  # 36,999
    store.record_request(conv.id, tokens_in=36_000, tokens_out=998, cache_writes=1, cache_reads=1)
    prepared = store.prepare_request(conv.id)  # 37,000: the maximum for a 64k window
    assert prepared.decision.action == "truncate"
    assert prepared.decision.tokens_total == 37_000
    # the request just prepared has no usage yet: the next prepare decides nothing
    assert store.prepare_request(conv.id).decision.action == "none"
