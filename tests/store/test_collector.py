"""Renders, prepares and payload rebuilds run with Python's cyclic collector paused, and
leave it as they found it (see contextstore/facade/collector.py)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.overlays import BlockUpdate
from contextstore.core.view import IndexedView
from contextstore.processors import Pipeline
from tests.conftest import assistant, user


class Watching:
    """Records whether the collector was on each time it is run; may wait for a signal."""

    name = "watching"

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.seen: list[bool] = []
        self.hold = hold
        self.entered = threading.Event()

    def config(self) -> dict[str, Any]:
        return {}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        self.seen.append(gc.isenabled())
        self.entered.set()
        if self.hold is not None:
            assert self.hold.wait(30)
        return []


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def _conversation(store: ContextStore) -> str:
    cid = store.create_conversation().id
    store.append(cid, [user("hello"), assistant("hi")])
    return cid


CALLS: dict[str, Callable[[ContextStore, str, Pipeline], Any]] = {
    "render": lambda s, c, p: s.render(c, pipeline=p),
    "prepare_request": lambda s, c, p: s.prepare_request(c, pipeline=p),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.usefixtures("collector_on")
def test_the_collector_is_off_inside_and_on_again_after(
    memory_store: ContextStore, call: str
) -> None:
    cid = _conversation(memory_store)
    watching = Watching()
    CALLS[call](memory_store, cid, Pipeline([watching]))
    assert watching.seen == [False]
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_a_payload_rebuild_leaves_the_collector_on(memory_store: ContextStore) -> None:
    cid = _conversation(memory_store)
    prepared = memory_store.prepare_request(cid)
    seen: list[bool] = []
    original = gc.disable

    def recording() -> None:
        seen.append(True)
        original()

    gc.disable = recording  # type: ignore[assignment]
    try:
        memory_store.request_payload(cid, prepared.request_id)
    finally:
        gc.disable = original  # type: ignore[assignment]
    assert seen == [True] and gc.isenabled()


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_collector_the_caller_turned_off_stays_off(memory_store: ContextStore, call: str) -> None:
    cid = _conversation(memory_store)
    was = gc.isenabled()
    gc.disable()
    try:
        CALLS[call](memory_store, cid, Pipeline([Watching()]))
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


@pytest.mark.usefixtures("collector_on")
def test_builds_on_two_threads_share_one_pause(file_store: ContextStore) -> None:
    cid = _conversation(file_store)
    release = threading.Event()
    slow = Watching(hold=release)
    worker = threading.Thread(target=lambda: file_store.render(cid, pipeline=Pipeline([slow])))
    worker.start()
    try:
        assert slow.entered.wait(30)
        quick = Watching()
        file_store.render(cid, pipeline=Pipeline([quick]))
        # the quick render ended while the slow one runs: the collector stays off for it
        assert quick.seen == [False] and not gc.isenabled()
    finally:
        release.set()
        worker.join(30)
    assert slow.seen == [False] and gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_a_failing_build_turns_the_collector_back_on(memory_store: ContextStore) -> None:
    class Failing(Watching):
        def propose(self, view: IndexedView) -> list[BlockUpdate]:
            super().propose(view)
            raise RuntimeError("processor bug")

    cid = _conversation(memory_store)
    with pytest.raises(Exception, match="processor bug"):
        memory_store.render(cid, pipeline=Pipeline([Failing()]))
    assert gc.isenabled()
