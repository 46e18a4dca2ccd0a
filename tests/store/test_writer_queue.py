"""Writers of one SQLite file queue on a lock file beside it (contextstore/storage/
writer_queue.py): a free turn is taken at once; a writer that finds it held sleeps in the
kernel (a helper thread's blocking ``flock``) until the holder lets go or dies, and a turn
that does not come within the bound leaves the write to SQLite's own locking.

No test here measures speed: waits for another thread or process are bounded by
:data:`HUNG` only so that a broken queue fails the test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection

from contextstore import ContextStore
from contextstore.core import store_files
from contextstore.core.nodes import typed_nodes
from contextstore.facade import nodes as facade_nodes
from contextstore.storage import database, writer_queue
from contextstore.storage.engine import resolve_target
from tests.conftest import assistant, file_read, tool_use, user

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock is POSIX")

HUNG = 60.0
POLL = 0.001
POLLS = int(HUNG / POLL)
"""Polls of a condition before a test gives up (at least :data:`HUNG` seconds of sleeps)."""
"""Seconds after which a wait in a test is taken to have hung (a deadline, not a measure)."""

NEVER = 3_600.0
"""A queue bound no test reaches: a wait that ends did so because the lock came."""


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "agent.db"


def lock_path(path: Path) -> str:
    return f"{path}{store_files.WRITER_SUFFIX}"


@contextmanager
def held(path: Path) -> Iterator[Callable[[], None]]:
    """Another writer's hold on the queue (its own open file, as another process has);
    yields a function that lets go early."""
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    for _ in range(POLLS):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(POLL)
    else:
        raise AssertionError("the queue was never let go")
    try:
        yield lambda: fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def lock_is_free(path: Path) -> bool:
    """Whether nobody holds the queue (taken and let go at once when free)."""
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


class Flock:
    """Stands in for ``fcntl`` in the queue's module: records each ``flock`` operation,
    and tells when a blocking ``LOCK_EX`` (the helper's wait in the kernel) begins."""

    LOCK_EX, LOCK_NB, LOCK_UN = fcntl.LOCK_EX, fcntl.LOCK_NB, fcntl.LOCK_UN

    def __init__(self) -> None:
        self.operations: list[int] = []
        self.blocking = threading.Event()
        self.after_blocking: Callable[[], None] = lambda: None

    def flock(self, fd: int, operation: int) -> None:
        self.operations.append(operation)
        if operation == fcntl.LOCK_EX:
            self.blocking.set()
            fcntl.flock(fd, operation)
            self.after_blocking()
            return
        fcntl.flock(fd, operation)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Flock:
    recorder = Flock()
    monkeypatch.setattr(writer_queue, "fcntl", recorder)
    return recorder


@pytest.fixture
def commits_held(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each commit, whether the queue's lock was held while it ran."""
    seen: list[bool] = []
    commit = database._commit

    def watched(connection: Connection) -> None:
        seen.append(not lock_is_free(path))
        commit(connection)

    monkeypatch.setattr(database, "_commit", watched)
    return seen


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """``work`` started on a thread of its own; the list receives its result or error."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as exc:  # reported to the test through ``out``
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def finished(thread: threading.Thread, out: list[Any]) -> Any:
    thread.join(HUNG)
    assert not thread.is_alive(), "the write hung"
    assert len(out) == 1 and not isinstance(out[0], BaseException), out
    return out[0]


def settle(queue: writer_queue.WriterQueue) -> None:
    """Wait until the queue's helper has no wait left in the kernel."""
    for _ in range(POLLS):
        if queue._helper is None or queue._helper.idle():
            return
        time.sleep(POLL)
    raise AssertionError("the helper never came back from the kernel")


def queue_of(store: ContextStore) -> writer_queue.WriterQueue:
    queue = store._db.writer_queue
    assert queue is not None
    return queue


def on_helper_wait(monkeypatch: pytest.MonkeyPatch, signal_wait: Callable[[], object]) -> None:
    """Call ``signal_wait`` each time a writer hands its wait to its store's helper."""
    wait = writer_queue._Helper.wait

    def watched(helper: writer_queue._Helper, timeout: float) -> bool:
        signal_wait()
        return wait(helper, timeout)

    monkeypatch.setattr(writer_queue._Helper, "wait", watched)


def test_a_file_stores_writes_queue_on_a_private_lock_file(path: Path) -> None:
    with ContextStore.open(path) as store:
        store.append(store.create_conversation().id, [user("hi")])
    lock = Path(lock_path(path))
    assert lock.is_file() and stat.S_IMODE(lock.stat().st_mode) == 0o600


def test_read_only_and_in_memory_stores_have_no_queue(path: Path) -> None:
    ContextStore.open(path).close()
    Path(lock_path(path)).unlink(missing_ok=True)
    with ContextStore.open(path, read_only=True) as store:
        store.list_conversations()
    assert not Path(lock_path(path)).exists()
    with ContextStore.open(":memory:") as memory:
        assert memory._db.writer_queue is None
    for query in ("mode=ro", "immutable=1", "mode=RO&cache=private"):
        uri = resolve_target(f"sqlite:///file:{path}?{query}&uri=true", path)
        assert writer_queue.writer_queue(uri, read_only=False) is None, query


def test_a_store_opened_by_file_uri_queues_on_the_file_it_names(tmp_path: Path) -> None:
    path = tmp_path / "by uri.db"
    url = f"sqlite:///file:{str(path).replace(' ', '%20')}?mode=rwc&uri=true"
    with ContextStore.open(url) as store:
        assert store._db.writer_queue is not None
        store.append(store.create_conversation().id, [user("hi")])
    assert Path(lock_path(path)).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["by uri.db", "by uri.db-writer"]


def test_no_lock_file_means_no_queue(path: Path) -> None:
    Path(lock_path(path)).mkdir()  # cannot be opened as a file
    with ContextStore.open(path) as store:
        cid = store.create_conversation().id
        store.append(cid, [user("hi")])
        assert len(store.render(cid)) == 1


def test_a_free_turn_is_taken_at_once_without_a_helper(
    path: Path, calls: Flock, commits_held: list[bool]
) -> None:
    with ContextStore.open(path) as store:
        calls.operations.clear()
        store.create_conversation()
        assert calls.operations == [fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_UN]
        assert queue_of(store)._helper is None
    assert commits_held[-1] is True


def test_a_waiter_sleeps_in_the_kernel_until_the_holder_lets_go(
    path: Path, calls: Flock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One try, then one blocking wait: no polling, and only the release ends it."""
    monkeypatch.setattr(writer_queue, "MAX_WAIT", NEVER)
    with ContextStore.open(path) as store:
        with held(path) as let_go:
            calls.operations.clear()
            thread, out = in_thread(store.create_conversation)
            assert calls.blocking.wait(HUNG), "the waiter never blocked in the kernel"
            assert thread.is_alive()
            let_go()
            conversation = finished(thread, out)
        assert calls.operations == [fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_EX, fcntl.LOCK_UN]
        assert store.get_conversation(conversation.id).id == conversation.id


def test_the_woken_waiter_writes_holding_the_lock(
    path: Path, calls: Flock, commits_held: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_queue, "MAX_WAIT", NEVER)
    with ContextStore.open(path) as store:
        cid = store.create_conversation().id
        with held(path) as let_go:
            commits_held.clear()
            thread, out = in_thread(lambda: store.append(cid, [user("hi"), assistant("hello")]))
            assert calls.blocking.wait(HUNG)
            let_go()
            finished(thread, out)
        assert commits_held == [True]
        assert len(store.render(cid)) == 2
        assert lock_is_free(path)


def test_a_turn_that_never_comes_leaves_the_write_to_sqlite(
    path: Path, commits_held: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder that keeps the queue (another store of this thread inside a transaction,
    say) without holding SQLite's lock does not stop the write."""
    monkeypatch.setattr(writer_queue, "MAX_WAIT", 0.01)
    with ContextStore.open(path) as store, held(path):

        def write() -> str:
            cid = store.create_conversation().id
            store.append(cid, [user("hi")])
            return cid

        commits_held.clear()
        thread, out = in_thread(write)
        cid = finished(thread, out)
        assert commits_held == [True, True]  # by the holder, not by this store
        assert len(store.render(cid)) == 1


def test_an_abandoned_wait_lets_go_of_the_lock_it_gets_later(
    path: Path, calls: Flock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_queue, "MAX_WAIT", 0.01)
    with ContextStore.open(path) as store:
        with held(path):
            store.create_conversation()  # gave up waiting; the helper stays in the kernel
            assert calls.blocking.is_set()
            assert not queue_of(store)._helper.idle()  # type: ignore[union-attr]
        settle(queue_of(store))  # the holder let go: the helper took the lock...
        assert lock_is_free(path)  # ...and let go of it, nobody wanting it any more


def test_a_later_wait_takes_over_an_abandoned_one(
    path: Path, calls: Flock, commits_held: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_queue, "MAX_WAIT", 0.01)
    with ContextStore.open(path) as store:
        cid = store.create_conversation().id
        with held(path) as let_go:
            store.append(cid, [user("gave up waiting")])
            monkeypatch.setattr(writer_queue, "MAX_WAIT", NEVER)
            waiting = threading.Event()
            on_helper_wait(monkeypatch, waiting.set)
            commits_held.clear()
            thread, out = in_thread(lambda: store.append(cid, [assistant("waited")]))
            assert waiting.wait(HUNG)
            let_go()
            finished(thread, out)
        assert commits_held == [True]
        assert calls.operations.count(fcntl.LOCK_EX) == 1  # one wait in the kernel, shared
        assert len(store.render(cid)) == 2
        assert lock_is_free(path)


def test_no_lock_is_taken_beside_a_wait_still_in_the_kernel(
    path: Path, calls: Flock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a release and the helper's word on a wait that gave up, the queue's own
    open file holds the lock already: taking it again there would succeed, and the
    helper would then let go of it under the new turn. The turn waits for the helper."""
    monkeypatch.setattr(writer_queue, "MAX_WAIT", 0.01)
    came, go = threading.Event(), threading.Event()

    def pause() -> None:
        came.set()
        assert go.wait(HUNG)

    with ContextStore.open(path) as store:
        queue = queue_of(store)
        with held(path):
            store.create_conversation()  # gave up; the helper waits in the kernel
            calls.after_blocking = pause
        assert came.wait(HUNG)  # the helper has the lock and has not yet said so
        monkeypatch.setattr(writer_queue, "MAX_WAIT", NEVER)
        entered = threading.Event()
        on_helper_wait(monkeypatch, entered.set)
        releaser = threading.Thread(target=lambda: entered.wait(HUNG) and go.set(), daemon=True)
        releaser.start()
        fd = queue._descriptor()
        assert fd is not None
        taken = queue._take(fd)
        go.set()
        settle(queue)
        try:
            assert taken
            assert not lock_is_free(path), "the helper let go of the lock under the turn"
        finally:
            entered.set()
            fcntl.flock(fd, fcntl.LOCK_UN)


def _in_child(work: Callable[[], bool]) -> bool:
    """``work``'s answer from a forked child process."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.write(write, b"1" if work() else b"0")
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        answer = _read_within(read, HUNG)
    finally:
        os.close(read)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return answer == b"1"


def _takes_the_lock(queue: writer_queue.WriterQueue) -> bool:
    """Whether the queue's own lock file descriptor gets the lock (as a forked child)."""
    fd = queue._descriptor()
    return fd is not None and queue._take(fd)


def _read_within(fd: int, seconds: float) -> bytes:
    import select

    ready, _, _ = select.select([fd], [], [], seconds)
    assert ready, "the child hung"
    return os.read(fd, 1)


def test_a_forked_child_does_not_share_its_parents_lock(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_queue, "MAX_WAIT", 0.01)
    with ContextStore.open(path) as store:
        queue = queue_of(store)
        with queue.turn():
            assert not lock_is_free(path)

            # the parent's turn, not the child's
            assert _in_child(lambda: _takes_the_lock(queue)) is False


def test_a_forked_child_waits_through_a_helper_of_its_own(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_queue, "MAX_WAIT", 0.01)
    with ContextStore.open(path) as store:
        queue = queue_of(store)
        with held(path):
            store.create_conversation()  # the parent's helper exists from here on
        settle(queue)
        assert queue._helper is not None
        monkeypatch.setattr(writer_queue, "MAX_WAIT", NEVER)
        with held(path) as let_go:
            read, write = os.pipe()
            on_helper_wait(monkeypatch, lambda: os.write(write, b"w"))

            def let_go_once_waiting() -> None:
                assert _read_within(read, HUNG) == b"w"
                let_go()

            releaser = threading.Thread(target=let_go_once_waiting, daemon=True)
            releaser.start()
            assert _in_child(lambda: _takes_the_lock(queue)) is True
            releaser.join(HUNG)
            os.close(read)
            os.close(write)


HOLDER = """
import os, sys, time
from contextstore import ContextStore
store = ContextStore.open(sys.argv[1])
store.create_conversation()  # the queue's lock file is open from here on
child = os.fork() if sys.argv[2] == "fork" else 0
if sys.argv[2] == "fork" and child == 0:  # lives on, touching nothing
    time.sleep(600)
    os._exit(0)
with store.transaction():
    store.create_conversation()
    print("holding", child, flush=True)
    time.sleep(600)
"""


@pytest.fixture
def spawn_holder(path: Path) -> Iterator[Callable[[str], tuple[subprocess.Popen[str], int]]]:
    """Starts a process holding the queue inside a transaction (``"fork"``: after forking
    a child that outlives it); yields its process and that child's pid (0 without)."""
    started: list[tuple[subprocess.Popen[str], int]] = []

    def start(mode: str) -> tuple[subprocess.Popen[str], int]:
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path), mode], stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout is not None
        word, child = holder.stdout.readline().split()
        assert word == "holding"
        started.append((holder, int(child)))
        return started[-1]

    yield start
    for holder, child in started:
        holder.kill()
        holder.wait(HUNG)
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("mode", ["alone", "fork"])
def test_a_killed_holder_frees_the_lock_for_its_waiter(
    path: Path,
    mode: str,
    spawn_holder: Callable[[str], tuple[subprocess.Popen[str], int]],
    calls: Flock,
    commits_held: list[bool],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Also when the holder forked a child that outlives it: the child closed the
    descriptors it inherited, which would have kept the holder's lock alive."""
    monkeypatch.setattr(writer_queue, "MAX_WAIT", NEVER)
    ContextStore.open(path).close()
    holder, child = spawn_holder(mode)
    with ContextStore.open(path) as store:
        commits_held.clear()
        thread, out = in_thread(store.create_conversation)
        assert calls.blocking.wait(HUNG)
        holder.send_signal(signal.SIGKILL)
        holder.wait(HUNG)
        finished(thread, out)
        if child:
            os.kill(child, 0)  # still alive
        assert commits_held == [True]
        assert out[0].id in [c.id for c in store.list_conversations()]


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
