"""Shared fixtures: stores on every backend, and factories for realistic messages.

Every store test runs on an in-memory SQLite database, a SQLite file, and PostgreSQL when
``CONTEXTSTORE_TEST_POSTGRES_URL`` names a server (each test in an empty schema of its own,
emptied or dropped afterwards: see ``tests/pg_schemas.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from contextstore import ContextStore
from contextstore.storage.sql import Statement
from tests.pg_schemas import SchemaPool, connect_args

# CI runs the property tests with fixed examples, so a submission's result is repeatable;
# locally they explore new examples on every run.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

POSTGRES_URL = os.environ.get("CONTEXTSTORE_TEST_POSTGRES_URL")
BACKENDS = ["memory", "file", "postgres"]


MUTATION_SCOPES: dict[str, tuple[str, ...]] = {
    "core": ("tests/core/", "tests/processors/"),
    "storage": ("tests/store/", "tests/robustness/test_bad_input.py"),
    "facade": (
        "tests/store/",
        "tests/robustness/test_bad_input.py",
        "tests/robustness/test_security.py",
    ),
    "all": (
        "tests/core/",
        "tests/processors/",
        "tests/store/",
        "tests/interop/test_cline.py",
        "tests/interop/test_gemini.py",
        "tests/interop/test_cline_real.py",
        "tests/interop/test_gemini_real.py",
        "tests/interop/test_nodes_real.py",
        "tests/robustness/test_bad_input.py",
        "tests/robustness/test_security.py",
        "tests/robustness/test_damage.py",
        "tests/robustness/test_limits.py",
    ),
}
"""The tests a mutation run of each package uses (``CONTEXTSTORE_MUTATION_SCOPE``; see the
README's Development section): the ones that exercise that package directly and fast;
``all`` is every package's tests together (one statistics run for a sample drawn across the
packages), without those that run the library in a child process, where mutmut's switch does
not reach."""


def public_names(cls: type) -> set[str]:
    """The public attribute names of ``cls``, without the copies of its methods a mutation
    run adds (``xǁClassǁmethod__mutmut_3`` and the like)."""
    return {name for name in dir(cls) if not name.startswith("_") and "__mutmut" not in name}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``CONTEXTSTORE_MUTATION_SCOPE=<package>``, keep only that package's tests (those
    run on every backend: on the in-memory one)."""
    scope = os.environ.get("CONTEXTSTORE_MUTATION_SCOPE")
    if not scope:
        return
    if scope not in MUTATION_SCOPES:
        raise pytest.UsageError(
            f"CONTEXTSTORE_MUTATION_SCOPE={scope!r} is unknown; use one of "
            f"{', '.join(MUTATION_SCOPES)}."
        )
    root = config.rootpath
    kept, dropped = [], []
    for item in items:
        relative = item.path.relative_to(root).as_posix()
        in_scope = relative.startswith(MUTATION_SCOPES[scope])
        # A test written for every backend runs on the in-memory one only: the SQLite file's
        # fsyncs would make each mutant minutes long; the file's own rules have file_store
        # tests, which stay.
        params = getattr(getattr(item, "callspec", None), "params", {})
        (kept if in_scope and params.get("store") != "file" else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(autouse=True)
def _statements_built_per_test_under_mutation() -> None:
    """Under a mutation run, each test builds the SQL statements afresh: a statement built
    once per process would keep the first test's (unmutated) form, and mutmut would credit
    only that test with running the code that builds it."""
    if os.environ.get("CONTEXTSTORE_MUTATION_SCOPE"):
        Statement.forget_compiled()


@pytest.fixture(autouse=True)
def _isolated_default_location(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test ever touches the user's real default database."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.delenv("CONTEXTSTORE_DB", raising=False)


_SCHEMAS = SchemaPool(POSTGRES_URL) if POSTGRES_URL else None


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drop the PostgreSQL schemas this process made."""
    if _SCHEMAS is not None:
        _SCHEMAS.close()


@contextmanager
def new_postgres_schema() -> Iterator[str]:
    """The name of a new, empty PostgreSQL schema (no tables), dropped afterwards; skips
    the test when no server is configured."""
    if _SCHEMAS is None:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    schema = _SCHEMAS.create()
    try:
        yield schema
    finally:
        _SCHEMAS.drop(schema)


def postgres_schema_store(**kwargs: Any) -> tuple[ContextStore, Any]:
    """Open a store in a new, empty PostgreSQL schema (its open migrates it); returns it and
    a cleanup that drops the schema. For tests about migration or a first open."""
    assert _SCHEMAS is not None
    schema = _SCHEMAS.create()
    store = ContextStore.open(POSTGRES_URL, engine_kwargs=connect_args(schema), **kwargs)

    def cleanup() -> None:
        store.close()
        _SCHEMAS.drop(schema)

    return store, cleanup


def pooled_postgres_store(**kwargs: Any) -> tuple[ContextStore, Any]:
    """Open a store in an empty PostgreSQL schema at the newest revision, reused from an
    earlier test when one was given back unchanged (see ``tests/pg_schemas.py``); returns
    it and a cleanup that empties the schema for the next test."""
    assert _SCHEMAS is not None
    schema = _SCHEMAS.take()
    try:
        store = ContextStore.open(POSTGRES_URL, engine_kwargs=connect_args(schema), **kwargs)
    except BaseException:
        _SCHEMAS.give_back(schema)
        raise

    def cleanup() -> None:
        store.close()
        _SCHEMAS.give_back(schema)

    return store, cleanup


def open_backend(backend: str, tmp_path: Path, **kwargs: Any) -> tuple[ContextStore, Any]:
    """A fresh store on ``backend`` and its cleanup."""
    if backend == "memory":
        store = ContextStore.open(":memory:", **kwargs)
        return store, store.close
    if backend == "file":
        store = ContextStore.open(tmp_path / "store.db", **kwargs)
        return store, store.close
    if not POSTGRES_URL:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    return pooled_postgres_store(**kwargs)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ContextStore]:
    """A fresh, empty store on each backend."""
    opened, cleanup = open_backend(request.param, tmp_path)
    try:
        yield opened
    finally:
        cleanup()


StoreFactory = Callable[[], AbstractContextManager[ContextStore]]


@pytest.fixture(scope="session")
def _shared_postgres_store() -> Iterator[ContextStore | None]:
    """One PostgreSQL schema for the whole session, for property tests (None without a server)."""
    if not POSTGRES_URL:
        yield None
        return
    opened, cleanup = postgres_schema_store()
    try:
        yield opened
    finally:
        cleanup()


def _emptied(store: ContextStore) -> ContextStore:
    """``store`` with every conversation deleted (their rows cascade), through the public API."""
    for conversation in store.list_conversations():
        store.delete_conversation(conversation.id)
    assert store.row_counts()["conversations"] == 0
    return store


@pytest.fixture(scope="module", params=["memory", "postgres"])
def fresh_store(
    request: pytest.FixtureRequest, _shared_postgres_store: ContextStore | None
) -> StoreFactory:
    """For hypothesis tests, which cannot take a function-scoped store: call it in each
    example, ``with fresh_store() as store:``, to get an empty store on this backend (a new
    in-memory database, or the session's PostgreSQL schema emptied)."""
    if request.param == "memory":
        return lambda: ContextStore.open(":memory:")
    shared = _shared_postgres_store
    if shared is None:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")

    @contextmanager
    def emptied() -> Iterator[ContextStore]:
        yield _emptied(shared)

    return emptied


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[ContextStore]:
    """A fresh, empty store on PostgreSQL (skipped without a server), for behaviour only
    PostgreSQL has: round trips, pipelined writes."""
    opened, cleanup = open_backend("postgres", tmp_path)
    try:
        yield opened
    finally:
        cleanup()


@pytest.fixture
def memory_store() -> Iterator[ContextStore]:
    """A fresh in-memory store (for tests about pure behaviour on top of the store)."""
    with ContextStore.open(":memory:") as opened:
        yield opened


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[ContextStore]:
    """A fresh store in a SQLite file."""
    with ContextStore.open(tmp_path / "agent.db") as opened:
        yield opened


# -- message factories -------------------------------------------------------------------


def text(value: str) -> dict[str, Any]:
    """A text block."""
    return {"type": "text", "text": value}


def user(*blocks: Any) -> dict[str, Any]:
    """A user message from blocks (strings become text blocks)."""
    return {"role": "user", "content": [text(b) if isinstance(b, str) else b for b in blocks]}


def assistant(*blocks: Any) -> dict[str, Any]:
    """An assistant message from blocks (strings become text blocks)."""
    return {"role": "assistant", "content": [text(b) if isinstance(b, str) else b for b in blocks]}


def tool_use(tool_id: str, name: str = "read_file", **arguments: Any) -> dict[str, Any]:
    """An assistant tool call."""
    return {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}


def tool_result(tool_id: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    """A tool result answering ``tool_id``."""
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, **extra}


def file_read(tool_id: str, path: str, body: str) -> dict[str, Any]:
    """A native read_file result, as Cline writes it."""
    return tool_result(tool_id, [text(f"[read_file for '{path}'] Result:\n{body}")])


def session(turns: int) -> list[dict[str, Any]]:
    """A task followed by ``turns`` tool-call/result pairs: 1 + 2 * turns messages."""
    messages: list[dict[str, Any]] = [user("<task>fix the bug</task>")]
    for i in range(turns):
        messages.append(assistant(f"step {i}", tool_use(f"t{i}", path=f"f{i}.py")))
        messages.append(user(tool_result(f"t{i}", f"contents of f{i}.py")))
    return messages


def duplicate_reads_saving(percent: int, total: int = 10_000) -> list[dict[str, Any]]:
    """A history whose file-read de-duplication saves exactly ``percent`` % of its characters.

    Built on Cline's metric, counted by hand here: every text block counts its length (a
    tool result its first text item), tool calls count nothing. Message 2 reads ``a.py``
    and message 4 reads it again, so de-duplication rewrites message 2 to the duplicate
    notice and saves the body's length minus the notice's. Message 0 pads the history to
    ``total`` characters; the turns after message 4 leave a truncation room to progress.
    """
    from contextstore.core.notices import DUPLICATE_FILE_READ_NOTICE

    saved = total * percent // 100
    assert saved * 100 == total * percent, "pick a total that makes the saving whole"
    body = "b" * (saved + len(DUPLICATE_FILE_READ_NOTICE))
    read = f"[read_file for 'a.py'] Result:\n{body}"
    tail = [assistant("ok"), user("next"), assistant("fine"), user("more"), assistant("yes")]
    counted = 2 * len(read) + sum(len(m["content"][0]["text"]) for m in tail)
    padding = total - counted - len("<task></task>")
    assert padding >= 0, "the total is too small for this saving"
    return [
        user("<task>" + "p" * padding + "</task>"),
        assistant(tool_use("r0", path="a.py")),
        user(tool_result("r0", [text(read)])),
        assistant(tool_use("r1", path="a.py")),
        user(tool_result("r1", [text(read)])),
        *tail,
    ]
