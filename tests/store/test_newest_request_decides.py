"""Only the newest request's usage decides the next prepare, as in Cline (its
``previousApiReqIndex`` is the last ``api_req_started``, whose missing tokens count 0): a
request recorded without usage, prepared or not, decides nothing, and the usage recorded
before it does not truncate (a second time) after it. The README says so."""

from __future__ import annotations

from contextstore import ContextStore


def _over_the_maximum(store: ContextStore) -> str:
    """A conversation whose last request used more than a 64,000 window's maximum (37,000)."""
    cid = store.create_conversation(context_window=64_000).id
    for i in range(10):
        store.append(cid, "user" if i % 2 == 0 else "assistant", f"message {i}")
    store.record_request(cid, tokens_in=50_000, tokens_out=1_000)
    return cid


def test_the_newest_requests_usage_decides() -> None:
    with ContextStore.open(":memory:") as store:
        cid = _over_the_maximum(store)
        decided = store.prepare_request(cid)
        assert decided.decision.tokens_total == 51_000 and decided.truncated


def test_a_request_recorded_without_usage_decides_nothing() -> None:
    with ContextStore.open(":memory:") as store:
        cid = _over_the_maximum(store)
        empty = store.record_request(cid)
        assert (empty.tokens_in, empty.tokens_out, empty.cache_writes, empty.cache_reads) == (
            None,
            None,
            None,
            None,
        )
        decided = store.prepare_request(cid)
        assert decided.decision.tokens_total is None and not decided.truncated
        # its usage, recorded on the prepared row, decides the prepare after it
        store.record_request(cid, request_id=decided.request_id, tokens_in=60_000)
        assert store.prepare_request(cid).decision.tokens_total == 60_000
