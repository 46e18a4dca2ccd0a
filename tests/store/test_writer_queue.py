"""Writers of one SQLite file queue on a lock file beside it (contextstore/storage/
writer_queue.py): a write waits its turn with short polls instead of SQLite's busy sleeps,
and a turn that does not come within the bound leaves the write to SQLite's own locking."""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.storage import writer_queue
from tests.conftest import assistant, user

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
