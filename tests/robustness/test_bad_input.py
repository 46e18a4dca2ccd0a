"""Bad input through every public method: a ContextStoreError, and not one byte written.

Hypothesis generates malformed messages, blocks, ids, labels, timestamps, ``as_of``
values, ranges and update targets. The contract: a call either succeeds or raises a
:class:`ContextStoreError` subclass (never a ``TypeError``, a driver error or an
``OverflowError``), and a refused call leaves the SQLite file's dump identical.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextstore import ContentTooLargeError, ContextStore, ContextStoreError
from contextstore.store import MAX_MESSAGE_BYTES
from tests.conftest import assistant, tool_result, tool_use, user

CID = "victim"

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.text(min_size=60, max_size=400),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.sampled_from(["", "\x00", "cp", CID, "text", "user", "half", "-1", "2**63", "\ud7ff"]),
)
ints = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([-1, 0, 1, 2, 3, 2**31, 2**63, -(2**63)]),
    junk,
)
ids = st.one_of(st.just(CID), junk)
block_types = st.sampled_from(
    ["text", "tool_use", "tool_result", "image", "document", "thinking", "bogus", ""]
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
blocks = st.one_of(
    junk,
    st.fixed_dictionaries(
        {"type": block_types},
        optional={
            "text": junk,
            "id": junk,
            "name": junk,
            "input": json_values,
            "tool_use_id": junk,
            "content": st.one_of(junk, st.lists(json_values, max_size=2)),
            "source": json_values,
            "thinking": junk,
        },
    ),
)
contents = st.one_of(junk, st.lists(blocks, max_size=3))
messages = st.one_of(
    junk,
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.one_of(st.sampled_from(["user", "assistant"]), junk),
            "content": contents,
        },
    ),
)


def _kwargs(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


Call = tuple[str, tuple[Any, ...], dict[str, Any]]

CALLS: dict[str, st.SearchStrategy[Call]] = {
    "append": st.tuples(
        st.just("append"),
        st.tuples(ids, st.one_of(st.sampled_from(["user", "assistant"]), junk), contents),
        _kwargs(meta=st.one_of(junk, st.dictionaries(st.text(max_size=4), json_values)), ts=ints),
    ),
    "append_many": st.tuples(
        st.just("append_many"),
        st.tuples(ids, st.one_of(junk, st.lists(messages, max_size=3))),
        _kwargs(ts=ints),
    ),
    "create_conversation": st.tuples(
        st.just("create_conversation"),
        st.just(()),
        _kwargs(
            model_id=junk, context_window=ints, title=junk, metadata=junk, id=ids, parent_id=ids
        ),
    ),
    "record_request": st.tuples(
        st.just("record_request"),
        st.tuples(ids),
        _kwargs(
            tokens_in=ints,
            tokens_out=ints,
            cache_writes=ints,
            cache_reads=ints,
            cost=junk,
            model_id=junk,
            request_id=ints,
        ),
    ),
    "checkpoint": st.tuples(
        st.just("checkpoint"), st.tuples(ids, junk), _kwargs(git_hash=junk, note=junk)
    ),
    "rollback": st.tuples(st.just("rollback"), st.tuples(ids, ints), _kwargs(purge=junk)),
    "set_deleted_range": st.tuples(
        st.just("set_deleted_range"),
        st.tuples(ids, ints),
        _kwargs(keep=junk, reason=junk, tokens_total=ints, summary=junk),
    ),
    "add_context_update": st.tuples(
        st.just("add_context_update"),
        st.tuples(ids, ints, ints, junk),
        _kwargs(kind=junk, source=junk, metadata=junk, mode=junk, base_hash=junk),
    ),
    "render": st.tuples(st.just("render"), st.tuples(ids), _kwargs(as_of=ints, format=junk)),
    "messages": st.tuples(st.just("messages"), st.tuples(ids), _kwargs(as_of=ints)),
    "deleted_range": st.tuples(st.just("deleted_range"), st.tuples(ids), _kwargs(as_of=ints)),
    "context_updates": st.tuples(st.just("context_updates"), st.tuples(ids), _kwargs(as_of=ints)),
    "requests": st.tuples(st.just("requests"), st.tuples(ids), _kwargs(as_of=ints)),
    "get_conversation": st.tuples(st.just("get_conversation"), st.tuples(ids), st.just({})),
    "checkpoints": st.tuples(st.just("checkpoints"), st.tuples(ids), st.just({})),
    "check": st.tuples(st.just("check"), st.tuples(ids), st.just({})),
    "row_counts": st.tuples(st.just("row_counts"), st.tuples(ids), st.just({})),
    "fork": st.tuples(st.just("fork"), st.tuples(ids), _kwargs(at=ints, title=junk)),
    "request_payload": st.tuples(st.just("request_payload"), st.tuples(ids, ints), st.just({})),
    "prepare_request": st.tuples(
        st.just("prepare_request"),
        st.tuples(ids),
        _kwargs(system=junk, tools=junk, format=junk, model=junk, max_tokens=ints),
    ),
    "truncate": st.tuples(
        st.just("truncate"), st.tuples(ids), _kwargs(keep=junk, summary=junk, reason=junk)
    ),
}


def dump(path: Path) -> list[str]:
    """The whole database as SQL text (schema and rows), read from the file."""
    connection = sqlite3.connect(path)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ContextStore, Path]]:
    """A file store holding one conversation with pairs, a checkpoint, a range, an update."""
    path = tmp_path_factory.mktemp("bad") / "victim.db"
    with ContextStore.open(path) as store:
        store.create_conversation(id=CID, context_window=8_192, title="victim")
        store.append(
            CID,
            [
                user("<task>t</task>"),
                assistant("a", tool_use("t1", path="a.py")),
                user(tool_result("t1", "body")),
                assistant("b"),
                user("c"),
            ],
        )
        store.checkpoint(CID, "cp")
        store.record_request(CID, tokens_in=100, tokens_out=10)
        store.set_deleted_range(CID, 2)
        store.add_context_update(CID, 3, 0, "rewritten")
        yield store, path


OUTCOMES: dict[str, list[str]] = {}


@pytest.mark.parametrize("method", sorted(CALLS))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_malformed_calls_raise_only_contextstore_errors_and_write_nothing(
    victim: tuple[ContextStore, Path], method: str, data: st.DataObject
) -> None:
    store, path = victim
    name, args, kwargs = data.draw(CALLS[method])
    function: Callable[..., Any] = getattr(store, name)
    before = dump(path)
    try:
        function(*args, **kwargs)
    except ContextStoreError:
        assert dump(path) == before, f"{name} refused the call but changed the database"
        OUTCOMES.setdefault(method, []).append("refused")
    else:
        OUTCOMES.setdefault(method, []).append("accepted")
    store.check(CID)


def test_the_fuzzing_above_mostly_refused(victim: tuple[ContextStore, Path]) -> None:
    """Not vacuous: the generated calls were overwhelmingly refused, for every method."""
    if len(OUTCOMES) < len(CALLS):
        pytest.skip("run with the fuzz tests above (whole module) to check their outcomes")
    for method, outcomes in OUTCOMES.items():
        assert outcomes.count("refused") > 0, method


def test_an_oversized_message_is_refused_clearly_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "limit.db"
    with ContextStore.open(path, max_message_bytes=1_000) as store:
        assert store.max_message_bytes == 1_000
        store.create_conversation(id=CID)
        store.append(CID, "user", "small")
        before = dump(path)
        with pytest.raises(ContentTooLargeError, match="over the limit of 1,000"):
            store.append(CID, "user", "x" * 2_000)
        with pytest.raises(ContentTooLargeError):
            store.append_many(CID, [user("fine"), assistant("y" * 2_000)])
        assert dump(path) == before
        assert len(store.messages(CID)) == 1


def test_the_default_limit_is_documented_and_enforced(tmp_path: Path) -> None:
    assert MAX_MESSAGE_BYTES == 32 * 1024 * 1024
    assert "max_message_bytes" in (ContextStore.open.__doc__ or "")
    with ContextStore.open(tmp_path / "big.db") as store:
        assert store.max_message_bytes == MAX_MESSAGE_BYTES
        store.create_conversation(id=CID)
        with pytest.raises(ContentTooLargeError, match="33,554,4"):
            store.append(CID, "user", [{"type": "text", "text": "z" * (MAX_MESSAGE_BYTES + 1)}])
        assert store.messages(CID) == []


BIG = 2**63
KNOWN_BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("get_conversation", ([],), {}),
    ("render", ({"id": CID},), {}),
    ("checkpoint", (7,), {}),
    ("append", (CID, "user", "x"), {"meta": True}),
    ("append", (CID, {"role": "user"}, None), {}),
    ("append", (CID, ["user"], "x"), {}),
    ("create_conversation", (), {"metadata": 5}),
    ("create_conversation", (), {"metadata": "ab"}),
    ("render", (CID,), {"as_of": BIG}),
    ("messages", (CID,), {"as_of": BIG}),
    ("deleted_range", (CID,), {"as_of": BIG}),
    ("context_updates", (CID,), {"as_of": BIG}),
    ("requests", (CID,), {"as_of": True}),
    ("requests", (CID,), {"as_of": "soon"}),
    ("requests", (CID,), {"as_of": BIG}),
    ("request_payload", (CID, BIG), {}),
    ("fork", (CID,), {"title": {"not": "a title"}}),
    ("prepare_request", (CID,), {"tools": 5}),
    ("record_request", (CID,), {"tokens_in": BIG}),
    ("record_request", (CID,), {"tokens_in": 2**31}),
    ("set_deleted_range", (CID, 3), {"tokens_total": BIG}),
    ("add_context_update", (CID, BIG, 0, "x"), {}),
    ("append", (CID, "user", "x"), {"ts": BIG}),
    ("rollback", (CID, BIG), {}),
]


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    KNOWN_BAD_CALLS,
    ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(KNOWN_BAD_CALLS)],
)
@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_known_malformed_calls_are_refused_with_a_contextstore_error(
    backend: str, tmp_path: Path, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Each call here once escaped as a TypeError, OverflowError or driver error."""
    from tests.conftest import open_backend

    store, cleanup = open_backend(backend, tmp_path)
    try:
        store.create_conversation(id=CID)
        store.append(CID, [user("a"), assistant("b"), user("c"), assistant("d"), user("e")])
        before = store.row_counts()
        try:
            getattr(store, name)(*args, **kwargs)
        except ContextStoreError:
            assert store.row_counts() == before
        assert store.row_counts()["rollbacks"] == before["rollbacks"]
    finally:
        cleanup()


@pytest.mark.parametrize("backend", ["memory", "file", "postgres"])
def test_a_rollback_that_removes_no_message_works(backend: str, tmp_path: Path) -> None:
    """Rolling back to a checkpoint with no message after it (only a request, or nothing)."""
    from tests.conftest import open_backend

    store, cleanup = open_backend(backend, tmp_path)
    try:
        store.create_conversation(id=CID)
        store.append(CID, "user", "a")
        store.checkpoint(CID, "cp")
        store.record_request(CID, tokens_in=5)
        report = store.rollback(CID, "cp")
        assert report.removed["api_requests"] == 1
        assert report.removed["messages"] == 0
        assert len(store.messages(CID)) == 1
    finally:
        cleanup()
