"""Writers of one SQLite file queue on a lock file beside it (contextstore/storage/
writer_queue.py): a write waits its turn with short polls instead of SQLite's busy sleeps,
and a turn that does not come within the bound leaves the write to SQLite's own locking."""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.nodes import typed_nodes
from contextstore.facade import nodes as facade_nodes
from contextstore.storage import writer_queue
from tests.conftest import assistant, file_read, tool_use, user

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock is POSIX")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "agent.db"


@pytest.fixture
def holder(path: Path) -> Iterator[int]:
    """Another writer's hold on the queue (its own open file, as another process has)."""
    fd = os.open(f"{path}{writer_queue.LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    yield fd
    os.close(fd)


def test_a_file_stores_writes_queue_on_a_private_lock_file(path: Path) -> None:
    with ContextStore.open(path) as store:
        store.append(store.create_conversation().id, [user("hi")])
    lock = Path(f"{path}{writer_queue.LOCK_SUFFIX}")
    assert lock.is_file() and stat.S_IMODE(lock.stat().st_mode) == 0o600


def test_read_only_and_in_memory_stores_have_no_queue(path: Path) -> None:
    ContextStore.open(path).close()
    Path(f"{path}{writer_queue.LOCK_SUFFIX}").unlink(missing_ok=True)
    with ContextStore.open(path, read_only=True) as store:
        store.list_conversations()
    assert not Path(f"{path}{writer_queue.LOCK_SUFFIX}").exists()
    with ContextStore.open(":memory:") as memory:
        assert memory._db.writer_queue is None


def test_a_write_waits_for_the_holder_then_runs(
    path: Path, holder: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    polls: list[float] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 3:
            fcntl.flock(holder, fcntl.LOCK_UN)  # the other writer commits

    monkeypatch.setattr(writer_queue.time, "sleep", sleep)
    with ContextStore.open(path) as store:
        polls.clear()
        cid = store.create_conversation().id
        assert len(polls) == 3
        assert polls == sorted(polls) and polls[0] == writer_queue.FIRST_POLL
        store.append(cid, [user("hi"), assistant("hello")])
        assert len(polls) == 3  # the queue was free from then on
        assert len(store.render(cid)) == 2


def test_polls_grow_to_their_bound(
    path: Path, holder: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    polls: list[float] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 40:
            fcntl.flock(holder, fcntl.LOCK_UN)

    monkeypatch.setattr(writer_queue.time, "sleep", sleep)
    with ContextStore.open(path) as store:
        polls.clear()
        store.create_conversation()
    assert max(polls) == writer_queue.LAST_POLL and polls[-1] == writer_queue.LAST_POLL


def test_a_turn_that_never_comes_leaves_the_write_to_sqlite(
    path: Path, holder: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder that keeps the queue (another store of this thread inside a transaction,
    say) without holding SQLite's lock does not stop the write."""
    monkeypatch.setattr(writer_queue, "MAX_WAIT", 0.0)
    with ContextStore.open(path) as store:
        cid = store.create_conversation().id
        store.append(cid, [user("hi")])
        assert len(store.render(cid)) == 1


def test_no_lock_file_means_no_queue(path: Path) -> None:
    Path(f"{path}{writer_queue.LOCK_SUFFIX}").mkdir()  # cannot be opened as a file
    with ContextStore.open(path) as store:
        cid = store.create_conversation().id
        store.append(cid, [user("hi")])
        assert len(store.render(cid)) == 1


@pytest.fixture
def typing_in_turn(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each typing of appended blocks, whether it ran during the writer's turn."""
    held: list[bool] = [False]
    seen: list[bool] = []
    turn = writer_queue.WriterQueue.turn

    @contextmanager
    def watched_turn(self: writer_queue.WriterQueue) -> Iterator[None]:
        with turn(self):
            held[0] = True
            try:
                yield
            finally:
                held[0] = False

    def watched_typing(*args: Any, **kwargs: Any) -> Any:
        seen.append(held[0])
        return typed_nodes(*args, **kwargs)

    monkeypatch.setattr(writer_queue.WriterQueue, "turn", watched_turn)
    monkeypatch.setattr(facade_nodes, "typed_nodes", watched_typing)
    return seen


def test_an_append_types_its_blocks_before_its_turn(path: Path, typing_in_turn: list[bool]) -> None:
    with ContextStore.open(path) as store:
        cid = store.create_conversation().id
        store.append_many(
            cid, [assistant(tool_use("t1", path="a.py")), user(file_read("t1", "a.py", "x"))]
        )
        store.append(cid, "user", [file_read("t1", "a.py", "x")])  # the call is remembered
        store.append(cid, "assistant", "done")
        kinds = [n.node_type for n in store.nodes(cid)]
    assert typing_in_turn == [False, False, False]
    assert kinds == ["tool_call", "file_content", "file_content", "assistant_text"]


def test_a_result_whose_call_only_the_file_knows_is_typed_in_the_turn(
    path: Path, typing_in_turn: list[bool]
) -> None:
    with ContextStore.open(path) as first:
        cid = first.create_conversation().id
        first.append(cid, "assistant", [tool_use("t1", path="a.py")])
    with ContextStore.open(path) as second:
        appended = second.append(cid, "user", [file_read("t1", "a.py", "print(1)")])
        kinds = [(n.node_type, n.path) for n in second.nodes(cid)]
    assert typing_in_turn == [False, True]
    assert appended.index == 1
    assert kinds == [("tool_call", "a.py"), ("file_content", "a.py")]
