"""Python's cyclic garbage collector, paused while a view or a request is built.

Building a view of thousands of messages allocates a few containers per block and frees
none of them until it is done. CPython runs its cyclic collector every 700 net
allocations, and each of its older-generation passes walks every object the process holds:
on a prepare of 10,000 messages (5,000 visible) those passes were about 40 % of the time,
and their share grows with the history. What is built is trees of JSON values, without
cycles, so reference counting frees all of it and nothing waits for the collector; it runs
again when the last build in the process ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_builds = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off.

    Builds on several threads share one pause: the first turns the collector off (if it
    was on) and the last to end turns it back on; a collector the caller had turned off
    stays off.
    """
    global _builds, _was_enabled
    with _lock:
        if _builds == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _builds += 1
    try:
        yield
    finally:
        with _lock:
            _builds -= 1
            if _builds == 0 and _was_enabled:
                gc.enable()
