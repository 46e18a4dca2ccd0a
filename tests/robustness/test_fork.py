"""A store opened before ``os.fork()`` (a ``multiprocessing`` worker with the fork start
method, a pre-forking server) is usable in the child, and the child never touches the
parent's connections: it opens its own, and closing its store leaves the parent's alone.

Until 2026-12-05 a thread of the child was handed the parent's connection from the pool
(on PostgreSQL both processes then spoke on one socket: the parent's next append failed with
psycopg's ``DuplicatePreparedStatement``), and the child's ``close()`` ended the parent's
PostgreSQL sessions (the parent's next call: "the database server closed the connection").
The verdicts are outcomes (which connection each call used, what the parent can still do),
never timings; :data:`HUNG` only bounds a child that would hang.
"""

from __future__ import annotations

import json
import os
import select
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from tests.conftest import open_backend, text

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

HUNG = 60.0
"""Seconds after which the child is taken to have hung (a deadline, not a measure)."""


def _driver_connection(store: ContextStore) -> Any:
    """The driver connection the calling thread's calls go through."""
    with store.database.read() as connection:
        return connection.connection.driver_connection


def _in_thread(work: Callable[[], Any]) -> Any:
    """``work()``'s answer, computed on a new thread (which holds a connection of its own)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join(HUNG)
    assert out, "the thread failed or hung"
    return out[0]


def _in_child(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``work()``'s answer (JSON), computed in a forked child, or its error."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            answer = work()
        except BaseException as exc:
            answer = {"error": repr(exc)}
        os.write(write, json.dumps(answer).encode())
        os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], HUNG)
        assert ready, "the child hung"
        data = b""
        while chunk := os.read(read, 65536):
            data += chunk
    finally:
        os.close(read)
        if not data:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    result: dict[str, Any] = json.loads(data)
    return result


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_a_forked_child_writes_through_connections_of_its_own(backend: str, tmp_path: Path) -> None:
    store, cleanup = open_backend(backend, tmp_path)
    try:
        cid = store.create_conversation().id
        store.append(cid, "user", [text("before the fork")])
        parents = [_driver_connection(store), _in_thread(lambda: _driver_connection(store))]

        def child() -> dict[str, Any]:
            store.append(cid, "assistant", [text("the child's main thread")])

            def from_thread() -> bool:
                store.append(cid, "user", [text("a thread of the child")])
                mine = _driver_connection(store)
                return any(mine is parent for parent in parents)

            threads_used_parents = _in_thread(from_thread)
            main_used_parents = any(_driver_connection(store) is p for p in parents)
            store.close()
            return {"used_parents": [main_used_parents, threads_used_parents]}

        assert _in_child(child) == {"used_parents": [False, False]}

        # The parent's own connections still work, on both of its threads.
        store.append(cid, "assistant", [text("the parent, after its child closed its store")])
        _in_thread(lambda: store.append(cid, "user", [text("a thread of the parent")]))
        assert [m["content"][0]["text"] for m in store.messages(cid)] == [
            "before the fork",
            "the child's main thread",
            "a thread of the child",
            "the parent, after its child closed its store",
            "a thread of the parent",
        ]
        assert store.check(cid, raise_on_problems=False).ok
    finally:
        cleanup()


def test_a_forked_child_keeps_its_copy_of_an_in_memory_store(tmp_path: Path) -> None:
    store, cleanup = open_backend("memory", tmp_path)
    try:
        cid = store.create_conversation().id
        store.append(cid, "user", [text("before the fork")])

        def child() -> dict[str, Any]:
            store.append(cid, "assistant", [text("the child's copy")])
            return {"messages": len(store.messages(cid))}

        assert _in_child(child) == {"messages": 2}
        assert len(store.messages(cid)) == 1  # the child wrote to its own copy
    finally:
        cleanup()
