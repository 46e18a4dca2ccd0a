"""Bad input through every public method: a ContextStoreError, and not one byte written.

Hypothesis builds calls in which exactly one argument is malformed (the wrong type, a
bool where an int belongs, out of range, too long, NaN, an unknown id or label, a stale
target) and every other argument is valid, so every call must be refused: with a
:class:`ContextStoreError` subclass (never a ``TypeError``, a driver error or an
``OverflowError``) and with the SQLite file's dump unchanged. The explicit cases after it
pin each limit: accepted at ``n``, refused at ``n + 1``, on every backend.
"""

from __future__ import annotations

import inspect
import math
import sqlite3
import string
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextstore import ContentTooLargeError, ContextStore, ContextStoreError, InvalidInputError
from contextstore.core.rows import MessageRow
from contextstore.core.validate import (
    MAX_ID_LENGTH,
    MAX_INT32,
    MAX_LABEL_LENGTH,
    MAX_TITLE_LENGTH,
    MAX_TS,
)
from contextstore.store import MAX_MESSAGE_BYTES
from tests.conftest import (
    BACKENDS,
    assistant,
    open_backend,
    public_names,
    tool_result,
    tool_use,
    user,
)

CID = "victim"
FUTURE = 4_000_000_000_000
"""A ts in 2096: later than any row the tests write."""
MESSAGES = 5
"""The victim's message count; its deleted range is (2, 2)."""

# -- malformed values, by what the parameter expects -------------------------------------

not_text = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
"""Values of the wrong type for a string parameter (None is valid where it is optional)."""


def bad_text(limit: int) -> st.SearchStrategy[Any]:
    """Strings a text parameter of at most ``limit`` characters must refuse, or non-strings."""
    return st.one_of(
        not_text,
        st.just(""),
        st.text(min_size=limit + 1, max_size=limit + 40),
        st.text(max_size=8).map(lambda value: value + "\x00"),
        st.just("lone \ud800 surrogate"),
    )


def bad_int(minimum: int, maximum: int) -> st.SearchStrategy[Any]:
    """Values an int parameter in ``[minimum, maximum]`` must refuse."""
    return st.one_of(
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=6),
        st.lists(st.integers(), max_size=2),
        st.integers(max_value=minimum - 1, min_value=minimum - 2**70),
        st.integers(min_value=maximum + 1, max_value=maximum + 2**70),
    )


unknown_id = st.text(string.ascii_letters + string.digits, min_size=1, max_size=64).filter(
    lambda value: value != CID
)
bad_id = st.one_of(bad_text(MAX_ID_LENGTH), unknown_id)
bad_ts = bad_int(0, MAX_TS)
bad_count = bad_int(0, MAX_INT32)
bad_metadata = st.one_of(
    st.booleans(),
    st.integers(),
    st.text(min_size=1, max_size=4),
    st.lists(st.integers(), min_size=1, max_size=2),
    st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2),
    st.sampled_from(
        [
            {"k": math.nan},
            {"k": math.inf},
            {"k": -math.inf},
            {"k": [1, math.nan]},
            {"k": {"inner": math.inf}},
            {"k": b"bytes"},
            {"k": {1: "non-string key inside"}},
            {True: "bool key"},
            {None: "None key"},
        ]
    ),
)
bad_number = st.one_of(
    st.booleans(),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.5, -1, 1e16]),
    st.text(max_size=4),
)
bad_label_or_ts = st.one_of(
    st.booleans(),
    st.floats(),
    st.lists(st.integers(), max_size=2),
    st.integers(max_value=-1, min_value=-(2**70)),
    st.integers(min_value=MAX_TS + 1, max_value=2**70),
    st.text(string.ascii_letters, min_size=1, max_size=20).filter(lambda value: value != "cp"),
    bad_text(MAX_LABEL_LENGTH).filter(lambda value: not isinstance(value, int)),
)
bad_block = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=4),
    st.sampled_from(
        [
            {},
            {"type": "bogus", "text": "x"},
            {"type": "text"},
            {"type": "text", "text": 5},
            {"type": "text", "text": None},
            {"type": "tool_use", "id": "t", "name": "n", "input": 5},
            {"type": "tool_use", "id": "t", "name": "n", "input": {"x": math.nan}},
            {"type": "tool_use", "name": "n", "input": {}},
            {"type": "tool_result", "content": "no id"},
            {"type": "tool_result", "tool_use_id": 5, "content": "x"},
            {"type": "image", "source": "not a mapping"},
            {"text": "no type"},
        ]
    ),
)
bad_content = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.just([]),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.lists(bad_block, min_size=1, max_size=3),
)
bad_role = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(["", "system", "tool", "User", "model", "assistant "]),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=1),
)
bad_message = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=5),
    st.fixed_dictionaries({"role": bad_role, "content": st.just("x")}),
    st.fixed_dictionaries({"role": st.just("user"), "content": bad_content}),
    st.just({"content": "no role"}),
    st.just({"role": "user"}),
)

# -- valid values -------------------------------------------------------------------------

good_text = st.text(string.ascii_letters + " ", min_size=1, max_size=12)
good_role = st.sampled_from(["user", "assistant"])
good_content = st.one_of(good_text, st.just([{"type": "text", "text": "fine"}]))
good_message = st.fixed_dictionaries({"role": good_role, "content": good_content})
good_metadata = st.dictionaries(good_text, st.integers(-5, 5), max_size=2)
good_count = st.integers(0, 1_000)

Spec = dict[str, tuple[st.SearchStrategy[Any] | None, st.SearchStrategy[Any] | None]]
"""Per parameter: (valid values or None when the parameter may be left out, malformed values
or None when none is worth generating)."""

SPECS: dict[str, Spec] = {
    "append": {
        "conversation_id": (st.just(CID), bad_id),
        "role": (good_role, bad_role),
        "content": (good_content, bad_content),
        "meta": (None, bad_metadata),
        "ts": (None, st.one_of(bad_ts, st.integers(0, 10_000))),
    },
    "append_many": {
        "conversation_id": (st.just(CID), bad_id),
        "new_messages": (
            st.lists(good_message, min_size=1, max_size=2),
            st.one_of(
                st.none(),
                st.integers(),
                st.text(max_size=3),
                st.just([]),
                st.lists(bad_message, min_size=1, max_size=2),
                st.lists(good_message, min_size=1, max_size=2).flatmap(
                    lambda fine: bad_message.map(lambda bad: [*fine, bad])
                ),
            ),
        ),
        "ts": (None, st.one_of(bad_ts, st.integers(0, 10_000))),
    },
    "create_conversation": {
        "model_id": (None, bad_text(200)),
        "context_window": (None, bad_int(1, MAX_INT32)),
        "title": (None, bad_text(MAX_TITLE_LENGTH)),
        "metadata": (None, bad_metadata),
        "id": (None, st.one_of(bad_text(MAX_ID_LENGTH), st.just(CID))),
        "parent_id": (None, bad_id),
    },
    "create_subagent": {
        "parent_id": (st.just(CID), bad_id),
        "model_id": (None, bad_text(200)),
        "context_window": (None, bad_int(1, MAX_INT32)),
        "title": (None, bad_text(MAX_TITLE_LENGTH)),
    },
    "delete_conversation": {"conversation_id": (st.just(CID), bad_id)},
    "set_auto_condense": {
        "conversation_id": (st.just(CID), bad_id),
        "threshold": (
            st.floats(0.05, 1.0),
            st.one_of(bad_number, st.sampled_from([0, 0.0, 1.0001, 2, -0.1])),
        ),
    },
    "record_request": {
        "conversation_id": (st.just(CID), bad_id),
        "tokens_in": (None, bad_count),
        "tokens_out": (None, bad_count),
        "cache_writes": (None, bad_count),
        "cache_reads": (None, bad_count),
        "cost": (None, bad_number),
        "model_id": (None, bad_text(200)),
        "request_id": (None, st.one_of(bad_int(1, MAX_INT32), st.integers(1_000, MAX_INT32))),
        "failure": (None, bad_text(200)),
    },
    "checkpoint": {
        "conversation_id": (st.just(CID), bad_id),
        "label": (None, bad_text(MAX_LABEL_LENGTH)),
        "git_hash": (None, bad_text(64)),
        "note": (None, st.one_of(not_text, st.just("nul \x00 in a note"))),
    },
    "rollback": {
        "conversation_id": (st.just(CID), bad_id),
        "to": (st.just("cp"), bad_label_or_ts),
        "purge": (None, st.one_of(st.integers(), st.text(max_size=3), st.floats())),
        "dry_run": (None, st.one_of(st.integers(), st.text(max_size=3), st.floats())),
    },
    "restore": {
        "conversation_id": (st.just(CID), bad_id),
        "rollback_id": (st.just(1), st.one_of(bad_int(1, MAX_INT32), st.integers(1, 10**6))),
    },
    "set_deleted_range": {
        "conversation_id": (st.just(CID), bad_id),
        "end": (
            st.just(2),
            st.one_of(bad_int(1, MAX_INT32), st.just(1), st.integers(MESSAGES - 1, MAX_INT32)),
        ),
        "keep": (None, bad_text(16)),
        "reason": (None, not_text),
        "tokens_total": (None, bad_count),
        "summary": (None, not_text),
    },
    "add_context_update": {
        "conversation_id": (st.just(CID), bad_id),
        "message_idx": (st.just(3), st.one_of(bad_count, st.integers(MESSAGES, MAX_INT32))),
        "block_idx": (st.just(0), st.one_of(bad_count, st.integers(1, MAX_INT32))),
        "text": (good_text, not_text),
        "kind": (None, st.one_of(not_text, st.sampled_from(["", "bogus", "Manual"]))),
        "source": (None, bad_text(200)),
        "metadata": (None, bad_metadata),
        "mode": (None, st.one_of(not_text, st.sampled_from(["", "bogus", "tool_input"]))),
        "base_hash": (None, st.one_of(not_text, st.text(max_size=64))),
    },
    "render": {
        "conversation_id": (st.just(CID), bad_id),
        "as_of": (None, bad_ts),
        "format": (None, st.one_of(not_text, st.sampled_from(["", "Anthropic", "claude"]))),
    },
    "messages": {"conversation_id": (st.just(CID), bad_id), "as_of": (None, bad_ts)},
    "nodes": {
        "conversation_id": (st.just(CID), bad_id),
        "view": (None, st.one_of(not_text, st.sampled_from(["", "master", "Pristine"]))),
        "as_of": (None, bad_ts),
    },
    "deleted_range": {"conversation_id": (st.just(CID), bad_id), "as_of": (None, bad_ts)},
    "context_updates": {"conversation_id": (st.just(CID), bad_id), "as_of": (None, bad_ts)},
    "lineage_edges": {"conversation_id": (st.just(CID), bad_id), "as_of": (None, bad_ts)},
    "processor_runs": {"conversation_id": (st.just(CID), bad_id), "as_of": (None, bad_ts)},
    "run_processors": {"conversation_id": (st.just(CID), bad_id)},
    "requests": {"conversation_id": (st.just(CID), bad_id), "as_of": (None, bad_ts)},
    "get_conversation": {"conversation_id": (st.just(CID), bad_id)},
    "checkpoints": {"conversation_id": (st.just(CID), bad_id)},
    "check": {"conversation_id": (st.just(CID), bad_id)},
    # an unknown id counts zero rows (what a deleted conversation leaves)
    "row_counts": {"conversation_id": (None, bad_text(MAX_ID_LENGTH))},
    "fork": {
        "conversation_id": (st.just(CID), bad_id),
        "at": (None, bad_label_or_ts),
        "title": (None, bad_text(MAX_TITLE_LENGTH)),
    },
    "request_payload": {
        "conversation_id": (st.just(CID), bad_id),
        "request_id": (st.just(1), st.one_of(bad_int(1, MAX_INT32), st.integers(1_000, 10**6))),
    },
    "prepare_request": {
        "conversation_id": (st.just(CID), bad_id),
        "system": (None, st.one_of(st.integers(), st.booleans(), st.just({"text": "x"}))),
        "tools": (None, st.one_of(st.integers(), st.text(max_size=3), st.just([5]))),
        "format": (None, st.one_of(not_text, st.sampled_from(["", "claude"]))),
        "model": (None, bad_text(200)),
        "max_tokens": (None, bad_int(1, MAX_INT32)),
        "auto_condense": (None, st.one_of(bad_number, st.sampled_from([0, 1.5]))),
    },
    "audit": {"conversation_id": (st.just(CID), bad_id)},
    "timeline": {"conversation_id": (st.just(CID), bad_id)},
    "checkpoint_at": {
        "conversation_id": (st.just(CID), bad_id),
        "label": (st.just("cp"), bad_text(MAX_LABEL_LENGTH)),
    },
    "message_count": {"conversation_id": (st.just(CID), bad_id), "as_of": (None, bad_ts)},
    "viewed_messages": {"conversation_id": (st.just(CID), bad_id), "as_of": (None, bad_ts)},
    "search": {
        "text": (good_text, st.one_of(not_text, st.just(""))),
        "limit": (None, bad_int(1, MAX_INT32).filter(lambda v: not isinstance(v, int) or v < 1)),
        "conversation_id": (None, bad_id),
    },
    "query": {
        "sql": (
            st.just("SELECT count(*) FROM messages"),
            st.one_of(
                not_text,
                st.just(""),
                st.sampled_from(
                    [
                        "DELETE FROM messages",
                        "DROP TABLE blocks",
                        "UPDATE conversations SET title = 'x'",
                        "INSERT INTO checkpoints (conversation_id, ts) VALUES ('victim', 1)",
                        "SELECT 1; DELETE FROM messages",
                        "PRAGMA user_version = 5",
                        "PRAGMA synchronous = OFF",
                        "PRAGMA journal_mode = DELETE",
                        "CREATE TABLE evil (x)",
                        "VACUUM",
                        "SELECT * FROM no_such_table",
                    ]
                ),
            ),
        ),
    },
    "message_timestamps": {"conversation_id": (st.just(CID), bad_id)},
    "removed_source_records": {"conversation_id": (st.just(CID), bad_id)},
    "source_records": {
        "conversation_id": (st.just(CID), bad_id),
        "as_of": (None, bad_ts),
        "origin": (None, st.one_of(not_text, st.just(""))),
    },
    "set_conversation_metadata": {
        "conversation_id": (st.just(CID), bad_id),
        "metadata": (st.just({"k": 1}), bad_metadata),
    },
    "set_conversation_model": {
        "conversation_id": (st.just(CID), bad_id),
        "model_id": (st.just("gpt-4o"), bad_text(200)),
        "context_window": (st.just(128_000), bad_int(1, MAX_INT32)),
    },
    "discard_imported_rows": {
        "conversation_id": (st.just(CID), bad_id),
        "after": (
            st.just(0),
            st.one_of(bad_ts, st.integers(FUTURE, MAX_TS)),  # later than the clock
        ),
    },
    "import_timeline": {
        "conversation_id": (st.just(CID), bad_id),
        "rows": (
            st.just([]),
            st.one_of(
                st.none(),
                st.integers(),
                st.text(min_size=1, max_size=3),
                st.lists(st.integers(), min_size=1, max_size=2),
                st.just([MessageRow(0, user("earlier than the conversation"))]),
                st.just([MessageRow(FUTURE, {"role": "bogus", "content": "x"})]),
                st.just([MessageRow(FUTURE, user("a")), MessageRow(FUTURE, user("same ts"))]),
            ),
        ),
    },
    "truncate": {
        "conversation_id": (st.just(CID), bad_id),
        "keep": (None, st.one_of(not_text, st.sampled_from(["", "all", "Half", "third"]))),
        "summary": (None, not_text),
        # a falsy reason means "none given" and gets the default
        "reason": (None, st.one_of(st.integers(1, 9), st.just(True), st.just([1]), st.just(2.5))),
    },
}

NOT_FUZZED = {
    "open": "a classmethod that makes a store; its arguments are tested in test_durability.py",
    "close": "takes no argument",
    "list_conversations": "takes no argument",
    "transaction": "takes no argument (a context manager around other calls)",
    "snapshot": "takes no argument (a context manager around other calls)",
    "lineage": "its node arguments are tested in tests/store/test_lineage.py",
    "add_lineage": "its node arguments are tested in tests/store/test_lineage.py",
    "backup": "a file path and a flag; refusals (existing file, PostgreSQL) in test_damage.py",
    "recover": "a classmethod on two file paths; refusals and damaged files in test_damage.py",
}


def bad_call(method: str) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments for ``method`` with exactly one malformed value."""
    spec = SPECS[method]
    breakable = sorted(name for name, (_, bad) in spec.items() if bad is not None)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        broken = draw(st.sampled_from(breakable))
        kwargs: dict[str, Any] = {}
        for name, (good, bad) in spec.items():
            if name == broken:
                assert bad is not None
                kwargs[name] = draw(bad)
            elif good is not None:
                kwargs[name] = draw(good)
        return kwargs

    return build()


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
        assert len(store.messages(CID)) == MESSAGES
        yield store, path


def test_every_public_method_taking_arguments_is_fuzzed() -> None:
    """A new method fails here until it gets a spec above (or a reason not to)."""
    public = public_names(ContextStore)
    methods = {name for name in public if callable(getattr(ContextStore, name))}
    assert methods == set(SPECS) | set(NOT_FUZZED)
    for name, spec in SPECS.items():
        parameters = set(inspect.signature(getattr(ContextStore, name)).parameters) - {"self"}
        assert set(spec) <= parameters, name


@pytest.mark.parametrize("method", sorted(SPECS))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_call_with_one_malformed_argument_is_refused_and_writes_nothing(
    victim: tuple[ContextStore, Path], method: str, data: st.DataObject
) -> None:
    store, path = victim
    kwargs = data.draw(bad_call(method), label="kwargs")
    function: Callable[..., Any] = getattr(store, method)
    before = dump(path)
    with pytest.raises(ContextStoreError):
        function(**kwargs)
    assert dump(path) == before, f"{method} refused the call but changed the database"
    store.check(CID)


def test_the_victim_accepts_the_valid_arguments_the_fuzzer_pairs_with_bad_ones(
    tmp_path: Path,
) -> None:
    """Not vacuous: with nothing broken, one call of each method succeeds on a copy."""
    for method in sorted(SPECS):
        path = tmp_path / f"{method}.db"
        with ContextStore.open(path) as store:
            store.create_conversation(id=CID, context_window=8_192, title="victim")
            store.append(CID, [user("t"), assistant("a"), user("b"), assistant("c"), user("d")])
            store.checkpoint(CID, "cp")
            store.prepare_request(CID)
            store.set_deleted_range(CID, 2)
            if method == "restore":
                store.checkpoint(CID, "before")
                store.append(CID, "assistant", "rolled back")
                store.rollback(CID, "before")
            good = {
                name: _first(valid)
                for name, (valid, _) in SPECS[method].items()
                if valid is not None
            }
            getattr(store, method)(**good)


def _first(strategy: st.SearchStrategy[Any]) -> Any:
    """The simplest value of ``strategy`` (what hypothesis shrinks to), without randomness."""
    found: list[Any] = []

    @settings(max_examples=1, database=None, derandomize=True)
    @given(strategy)
    def take(value: Any) -> None:
        found.append(value)

    take()
    return found[0]


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
@pytest.mark.parametrize("backend", ["memory", "file", "postgres"])
def test_known_malformed_calls_are_refused_with_a_contextstore_error(
    backend: str, tmp_path: Path, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Each call here once escaped as a TypeError, OverflowError or driver error."""
    store, cleanup = open_backend(backend, tmp_path)
    try:
        store.create_conversation(id=CID)
        store.append(CID, [user("a"), assistant("b"), user("c"), assistant("d"), user("e")])
        before = store.row_counts()
        with pytest.raises(ContextStoreError):
            getattr(store, name)(*args, **kwargs)
        assert store.row_counts() == before
    finally:
        cleanup()


@pytest.mark.parametrize("backend", ["memory", "file", "postgres"])
def test_a_rollback_that_removes_no_message_works(backend: str, tmp_path: Path) -> None:
    """Rolling back to a checkpoint with no message after it (only a request, or nothing)."""
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


# -- explicit boundaries, on every backend ------------------------------------------------


def _victim(store: ContextStore) -> None:
    store.create_conversation(id=CID, context_window=8_192)
    store.append(CID, [user("a"), assistant("b"), user("c"), assistant("d"), user("e")])
    store.checkpoint(CID, "cp")
    store.prepare_request(CID)


def _refused(store: ContextStore, call: Callable[[], Any]) -> None:
    before = store.row_counts()
    with pytest.raises(ContextStoreError):
        call()
    assert store.row_counts() == before


TEXT_LIMITS: list[tuple[str, int, Callable[[ContextStore, str], Any]]] = [
    ("conversation id", MAX_ID_LENGTH, lambda s, v: s.create_conversation(id=v)),
    ("title", MAX_TITLE_LENGTH, lambda s, v: s.create_conversation(title=v)),
    ("model_id", 200, lambda s, v: s.create_conversation(model_id=v)),
    ("subagent title", MAX_TITLE_LENGTH, lambda s, v: s.create_subagent(CID, title=v)),
    ("subagent model_id", 200, lambda s, v: s.create_subagent(CID, model_id=v)),
    ("label", MAX_LABEL_LENGTH, lambda s, v: s.checkpoint(CID, v)),
    ("git_hash", 64, lambda s, v: s.checkpoint(CID, "x", git_hash=v)),
    ("request model_id", 200, lambda s, v: s.record_request(CID, model_id=v)),
    ("failure", 200, lambda s, v: s.record_request(CID, failure=v)),
    ("source", 200, lambda s, v: s.add_context_update(CID, 1, 0, "x", source=v)),
    ("keep", 16, lambda s, v: s.set_deleted_range(CID, 2, keep=v)),
    ("prepare model", 200, lambda s, v: s.prepare_request(CID, model=v)),
    ("fork title", MAX_TITLE_LENGTH, lambda s, v: s.fork(CID, title=v)),
]


@pytest.mark.parametrize("char", ["x", "\u00e9"], ids=["ascii", "two-byte"])
@pytest.mark.parametrize(
    ("name", "limit", "call"), TEXT_LIMITS, ids=[name for name, _, _ in TEXT_LIMITS]
)
def test_each_text_limit_is_accepted_at_n_and_refused_at_n_plus_one(
    store: ContextStore, name: str, limit: int, call: Callable[[ContextStore, str], Any], char: str
) -> None:
    """Limits count characters, not bytes: a two-byte character counts one."""
    _victim(store)
    call(store, char * limit)
    _refused(store, lambda: call(store, char * (limit + 1)))


def test_a_label_at_its_limit_reads_back_whole(store: ContextStore) -> None:
    _victim(store)
    label = "\u00e9" * MAX_LABEL_LENGTH
    store.checkpoint(CID, label)
    assert store.checkpoints(CID)[-1].label == label
    conv = store.create_conversation(id="i" * MAX_ID_LENGTH, title="t" * MAX_TITLE_LENGTH)
    assert store.get_conversation(conv.id).title == "t" * MAX_TITLE_LENGTH


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_message_size_limit_at_n_and_n_plus_one(backend: str, tmp_path: Path) -> None:
    """The size is the compact JSON of the message's blocks plus that of its other fields."""
    limit = 4_000
    overhead = len('[{"text":"","type":"text"}]') + len("{}")
    store, cleanup = open_backend(backend, tmp_path, max_message_bytes=limit)
    try:
        store.create_conversation(id=CID)
        at_limit = "y" * (limit - overhead)
        store.append(CID, "user", at_limit)
        _refused(store, lambda: store.append(CID, "user", at_limit + "y"))
        _refused(store, lambda: store.append(CID, [user("fine"), user(at_limit + "y")]))
        assert store.messages(CID) == [{"role": "user", "content": at_limit}]
    finally:
        cleanup()


BOOLS_FOR_INTS: list[tuple[str, Callable[[ContextStore], Any]]] = [
    ("context_window", lambda s: s.create_conversation(context_window=True)),
    ("subagent context_window", lambda s: s.create_subagent(CID, context_window=True)),
    ("tokens_in", lambda s: s.record_request(CID, tokens_in=True)),
    ("tokens_out", lambda s: s.record_request(CID, tokens_out=False)),
    ("cache_writes", lambda s: s.record_request(CID, cache_writes=True)),
    ("cache_reads", lambda s: s.record_request(CID, cache_reads=False)),
    ("cost", lambda s: s.record_request(CID, cost=True)),
    ("request_id", lambda s: s.record_request(CID, request_id=True, tokens_in=1)),
    ("end", lambda s: s.set_deleted_range(CID, True)),
    ("tokens_total", lambda s: s.set_deleted_range(CID, 2, tokens_total=True)),
    ("message_idx", lambda s: s.add_context_update(CID, True, 0, "x")),
    ("block_idx", lambda s: s.add_context_update(CID, 1, False, "x")),
    ("max_tokens", lambda s: s.prepare_request(CID, max_tokens=True)),
    ("auto_condense", lambda s: s.prepare_request(CID, auto_condense=True)),
    ("threshold", lambda s: s.set_auto_condense(CID, True)),
    ("payload request_id", lambda s: s.request_payload(CID, True)),
    ("render as_of", lambda s: s.render(CID, as_of=True)),
    ("messages as_of", lambda s: s.messages(CID, as_of=False)),
    ("deleted_range as_of", lambda s: s.deleted_range(CID, as_of=True)),
    ("context_updates as_of", lambda s: s.context_updates(CID, as_of=True)),
    ("requests as_of", lambda s: s.requests(CID, as_of=True)),
    ("rollback to", lambda s: s.rollback(CID, True)),
    ("fork at", lambda s: s.fork(CID, at=True)),
    ("append ts", lambda s: s.append(CID, "user", "x", ts=True)),
]


@pytest.mark.parametrize("call", [c for _, c in BOOLS_FOR_INTS], ids=[n for n, _ in BOOLS_FOR_INTS])
def test_a_bool_is_refused_where_an_int_is_expected(
    store: ContextStore, call: Callable[[ContextStore], Any]
) -> None:
    """``True == 1`` in Python: every one of these would be a valid call with 1 or 0."""
    _victim(store)
    _refused(store, lambda: call(store))


NAMED_IN_ERRORS: list[tuple[str, Callable[[ContextStore], Any]]] = [
    ("at must be an integer from 0", lambda s: s.fork(CID, at=-1)),
    ("threshold must be a fraction", lambda s: s.set_auto_condense(CID, 5)),
    ("auto_condense must be a fraction", lambda s: s.prepare_request(CID, auto_condense=5)),
    (
        "cost must be a number from 0 to 1e+15, got 1e+308",
        lambda s: s.record_request(CID, cost=1e308),
    ),
    # An integer no float can hold: math.isfinite raised OverflowError before the range test.
    ("cost must be a number from 0 to 1e+15, got 1", lambda s: s.record_request(CID, cost=10**400)),
    ("the rollback target (to) must be an integer from 0", lambda s: s.rollback(CID, -1)),
]


@pytest.mark.parametrize(
    ("start", "call"), NAMED_IN_ERRORS, ids=[start.split()[0] for start, _ in NAMED_IN_ERRORS]
)
def test_an_out_of_range_value_is_refused_naming_the_parameter_and_its_range(
    store: ContextStore, start: str, call: Callable[[ContextStore], Any]
) -> None:
    _victim(store)
    before = store.row_counts()
    with pytest.raises(InvalidInputError) as refused:
        call(store)
    assert str(refused.value).startswith(start)
    assert store.row_counts() == before


NON_STRING_KEYS: list[Any] = [
    {1: "a"},
    {None: "a"},
    {True: "a"},
    {(1, 2): "a"},
    {1.5: "a"},
    {"outer": {2: "nested"}},
    {"outer": [{"fine": 1}, {3: "in a list"}]},
    {"1": "a", 1: "b"},
]
NOT_FINITE: list[Any] = [
    {"x": math.nan},
    {"x": math.inf},
    {"x": -math.inf},
    {"x": [1.0, math.nan]},
    {"x": {"y": math.inf}},
]
METADATA_CALLS: list[tuple[str, Callable[[ContextStore, Any], Any]]] = [
    ("create_conversation", lambda s, m: s.create_conversation(metadata=m)),
    ("append meta", lambda s, m: s.append(CID, "user", "x", meta=m)),
    ("add_context_update", lambda s, m: s.add_context_update(CID, 1, 0, "x", metadata=m)),
]


@pytest.mark.parametrize("value", NON_STRING_KEYS + NOT_FINITE, ids=repr)
@pytest.mark.parametrize("call", [c for _, c in METADATA_CALLS], ids=[n for n, _ in METADATA_CALLS])
def test_metadata_needs_string_keys_and_finite_numbers(
    store: ContextStore, call: Callable[[ContextStore, Any], Any], value: Any
) -> None:
    _victim(store)
    _refused(store, lambda: call(store, value))


@pytest.mark.parametrize("call", [c for _, c in METADATA_CALLS], ids=[n for n, _ in METADATA_CALLS])
def test_valid_nested_metadata_is_accepted(
    store: ContextStore, call: Callable[[ContextStore, Any], Any]
) -> None:
    _victim(store)
    call(store, {"a": {"b": [1, 2.5, None, True, "\u00e9"]}, "c": []})
