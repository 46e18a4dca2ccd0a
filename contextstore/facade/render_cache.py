"""Rendered views kept between calls, bounded by their size in bytes."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

RENDER_CACHE_BYTES = 16 * 1024 * 1024
"""What the render cache may hold: the text of the rewrites it keeps, in bytes."""


class RenderCache:
    """What a render's processors proposed, kept so a repeat render does no processing;
    an LRU bounded by the size of the rewrites in bytes, keyed by the conversation's newest
    ``ts``, the moment rendered, a hash of the rows read (``ConversationState.digest``) and
    the pipeline's configuration.

    Every write moves the conversation's clock, and rows replaced under the timestamps they
    had (an importer's, or a conversation written again under its id) change the hash, so
    a key never returns proposals made for other rows. The view itself is built again from
    rows on every render (that costs about a SELECT and a decode), so nothing the caller
    receives is shared with the cache, and its memory stays proportional to the rewrites,
    not to the conversations. An entry larger than the whole budget is not kept. ``hits``
    and ``misses`` are counted for tests.
    """

    def __init__(self, max_bytes: int = RENDER_CACHE_BYTES) -> None:
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.max_bytes = max_bytes
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def bytes(self) -> int:
        """The sizes of the entries held, as given to :meth:`put`."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Any:
        """The entry for ``key`` (never to be modified), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        """Remember ``value`` (``size`` bytes) for ``key``, evicting the least recently
        used entries until the cache fits its budget."""
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= previous[1]
            if size > self.max_bytes:
                return
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted

    def discard(self, key: Hashable) -> None:
        """Forget the entry for ``key``, if any."""
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= previous[1]

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0


PREPARE_CACHE_BYTES = 64 * 1024 * 1024
"""What the prepare cache may hold: the stored bytes of the states it keeps and the canonical
JSON of their rendered messages, in bytes."""
