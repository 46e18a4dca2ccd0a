"""Any input through every public method: a result or a ContextStoreError, the same on SQLite
and PostgreSQL, and a refused call leaves every row as it was.

Unlike ``test_bad_input.py`` (one malformed argument, the others valid), each argument here
is drawn from valid values and from hostile ones: arbitrary JSON-ish values, lone surrogates,
NUL, NaN and Infinity, integers of 5,000 digits, bytes and sets, values nested 10,000 deep,
texts over the byte limits, wrong types. The methods are listed from ``ContextStore`` itself,
so a new method is fuzzed without a change here. The same call runs on an in-memory SQLite
store and on a PostgreSQL one holding the same rows; both must answer with the same outcome.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from contextstore import ContextStore, ContextStoreError
from contextstore.core.validate import MAX_JSON_DEPTH, MAX_TEXT_BYTES
from contextstore.storage.tables import metadata as schema
from tests.conftest import (
    POSTGRES_URL,
    assistant,
    postgres_schema_store,
    tool_result,
    tool_use,
    user,
)

CID = "victim"
MESSAGE_LIMIT = 64 * 1024
"""The victims' ``max_message_bytes``: a message over it is cheap to build."""
SKIPPED = {
    "open": "a classmethod making a store (its arguments: tests/store/test_durability.py)",
    "close": "ends the store the other examples use",
    "transaction": "a context manager around other calls, no input of its own",
    "query": "runs the caller's SQL, whose dialect differs between the backends (its hostile "
    "inputs are in test_query_refuses_hostile_text_alike)",
}

SQLITE_ONLY = {"backup": "copies a SQLite file; a PostgreSQL store refuses every call (pg_dump)"}
"""Methods whose outcome is compared among the SQLite stores only; elsewhere each call must
be refused with InvalidInputError."""


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for n in range(depth):
        value = [value] if n % 2 else {"k": value}
    return value


def _hostile_scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.sampled_from(
            [
                "\ud800",
                "lone \udfff surrogate",
                "nul \x00 inside",
                "",
                "cp",
                "user",
                math.nan,
                math.inf,
                -math.inf,
                b"bytes",
                {1, 2},
                frozenset({"a"}),
                object(),
            ]
        ),
    )


json_ish = st.recursive(
    _hostile_scalars(),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.sampled_from(["\ud800", "a\x00"])), inner, max_size=3
        ),
    ),
    max_leaves=8,
)
SPECIAL: dict[str, Callable[[], Any]] = {
    "int of 5,000 digits": lambda: 10**5000,
    "nested 10,000 deep": lambda: _deep(10_000),
    "nested one level too deep": lambda: _deep(MAX_JSON_DEPTH + 1),
    "meta nested 10,000 deep": lambda: {"meta": _deep(10_000)},
    "text one byte over MAX_TEXT_BYTES": lambda: "x" * (MAX_TEXT_BYTES + 1),
    "two-byte text over MAX_TEXT_BYTES": lambda: "\u00e9" * (MAX_TEXT_BYTES // 2 + 1),
    "message over the limit": lambda: [{"type": "text", "text": "y" * (MESSAGE_LIMIT + 1)}],
    "huge int in tool input": lambda: [
        {"type": "tool_use", "id": "t", "name": "n", "input": {"a": 10**5000}}
    ],
    "deep tool input": lambda: [
        {"type": "tool_use", "id": "t", "name": "n", "input": {"a": _deep(10_000)}}
    ],
    "set in a block": lambda: [{"type": "text", "text": "x", "extra": {1, 2}}],
    "bytes in a block": lambda: [{"type": "text", "text": "x", "extra": b"raw"}],
    "NaN in a block": lambda: [{"type": "text", "text": "x", "extra": math.nan}],
    "surrogate in a block": lambda: [{"type": "text", "text": "\ud800"}],
    "surrogate in a message field": lambda: [{"role": "user", "content": "x", "m": "\ud800"}],
    "deep message field": lambda: [{"role": "user", "content": "x", "m": _deep(10_000)}],
    "NUL in tool input": lambda: [
        {"type": "tool_use", "id": "t", "name": "n", "input": {"a": "\x00"}}
    ],
}
"""Values too big or too deep to print, drawn by name and built at call time."""


class Special:
    """A :data:`SPECIAL` value, shown by its name (hypothesis prints what it drew)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


hostile = st.one_of(json_ish, st.sampled_from(sorted(SPECIAL)).map(Special))
"""Values no parameter should accept as they are (some are valid for a few parameters)."""

GOOD: dict[str, Any] = {
    "conversation_id": CID,
    "parent_id": CID,
    "role": "user",
    "content": "hello",
    "new_messages": [{"role": "user", "content": "more"}],
    "message_idx": 3,
    "block_idx": 0,
    "text": "fine",
    "end": 2,
    "to": "cp",
    "at": "cp",
    "label": "cp",
    "request_id": "<the victim's first request id>",
    "rollback_id": "<the victim's newest rollback id>",
    "rows": [],
    "metadata": {"k": 1},
    "after": 0,
}
"""A valid value for each required parameter (others may be left out). Row ids are looked up
in each store: after a rollback and deleted rows the backends may number rows differently."""
ROW_IDS = {"request_id": ("api_requests", sa.func.min), "rollback_id": ("rollbacks", sa.func.max)}


def _row_id(store: ContextStore, parameter: str) -> int:
    table_name, pick = ROW_IDS[parameter]
    table = schema.tables[table_name]
    query = sa.select(pick(table.c.id)).where(table.c.conversation_id == CID)
    with store.database.engine.connect() as connection:
        found = connection.execute(query).scalar()
    return 1 if found is None else int(found)


def _victim(store: ContextStore) -> None:
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
    store.prepare_request(CID, system="system prompt")
    store.set_deleted_range(CID, 2)
    store.add_context_update(CID, 3, 0, "rewritten")


def public_methods() -> list[str]:
    """Every public method of ContextStore, from the class itself, minus :data:`SKIPPED`."""
    names = [
        name
        for name, member in inspect.getmembers(ContextStore)
        if not name.startswith("_") and callable(member) and not inspect.isclass(member)
    ]
    return sorted(set(names) - set(SKIPPED))


def dump(store: ContextStore) -> list[list[str]]:
    """Every row of every table, sorted, as text."""
    rows = []
    with store.database.engine.connect() as connection:
        for table in schema.sorted_tables:
            found = connection.execute(sa.select(table)).all()
            rows.append(sorted(repr(tuple(row)) for row in found))
    return rows


@pytest.fixture(scope="module")
def victims() -> Iterator[list[ContextStore]]:
    """The same rows in an in-memory SQLite store and, with a server, a PostgreSQL one."""
    memory = ContextStore.open(":memory:", max_message_bytes=MESSAGE_LIMIT)
    stores, cleanups = [memory], [memory.close]
    if POSTGRES_URL:
        postgres, cleanup = postgres_schema_store(max_message_bytes=MESSAGE_LIMIT)
        stores.append(postgres)
        cleanups.append(cleanup)
    for store in stores:
        _victim(store)
    try:
        yield stores
    finally:
        for cleanup in cleanups:
            cleanup()


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A method and keyword arguments, each valid, left out, or hostile."""
    method = draw(st.sampled_from(public_methods()))
    kwargs: dict[str, Any] = {}
    for name, parameter in inspect.signature(getattr(ContextStore, method)).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        required = parameter.default is inspect.Parameter.empty
        choice = draw(
            st.sampled_from(["good", "hostile", "hostile"] + ([] if required else ["omit"]))
        )
        if choice == "omit" or (choice == "good" and name not in GOOD and not required):
            continue
        if choice == "good" and name in GOOD:
            kwargs[name] = GOOD[name]
        else:
            kwargs[name] = draw(hostile)
    return method, kwargs


def outcome(call: Callable[[], Any]) -> str:
    """``"ok"``, or the name of the ContextStoreError raised; anything else fails the test."""
    try:
        call()
    except ContextStoreError as exc:
        return type(exc).__name__
    return "ok"


@contextlib.contextmanager
def _inside(folder: str) -> Iterator[None]:
    """``contextlib.chdir`` (Python 3.11 and later) for every supported Python."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _restore(stores: list[ContextStore]) -> None:
    """Put the victim back where a call deleted it (on every backend alike)."""
    for store in stores:
        if CID not in {c.id for c in store.list_conversations()}:
            _victim(store)


@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(call=calls())
@example(call=("backup", {"destination": "relative-backup.db"}))
def test_any_input_gets_a_result_or_a_contextstore_error_alike_on_every_backend(
    victims: list[ContextStore], call: tuple[str, dict[str, Any]]
) -> None:
    method, drawn = call
    kwargs = {name: SPECIAL[v.name]() if isinstance(v, Special) else v for name, v in drawn.items()}
    outcomes = []
    for store in victims:
        before = dump(store)
        per_store = dict(kwargs)
        for name in ROW_IDS.keys() & per_store.keys():
            if per_store[name] == GOOD[name]:
                per_store[name] = _row_id(store, name)
        # A relative path drawn (a backup's destination) lands in a new folder per store:
        # a file the first store wrote would otherwise make the second refuse to overwrite
        # it, and the checkout would collect them.
        with tempfile.TemporaryDirectory() as here, _inside(here):
            result = outcome(lambda store=store, a=per_store: getattr(store, method)(**a))
        if result != "ok":
            assert dump(store) == before, f"{method} was refused ({result}) but changed rows"
        if method in SQLITE_ONLY and not store.database.is_sqlite:
            assert result == "InvalidInputError", f"{method} on PostgreSQL gave {result}"
        else:
            outcomes.append(result)
    event(f"{method}: {outcomes[0]}")
    assert len(set(outcomes)) == 1, f"{method}{drawn!r:.300}: backends differ: {outcomes}"
    _restore(victims)


def test_the_fuzzer_reaches_every_public_method() -> None:
    """Not vacuous: the list comes from the class, and the known methods are in it."""
    methods = public_methods()
    for name in ("append", "checkpoint", "set_deleted_range", "add_context_update", "render"):
        assert name in methods
    assert len(methods) >= 35
