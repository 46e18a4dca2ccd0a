"""Running a processor pipeline over a conversation's view, and caching rendered views.

Processors propose block rewrites on the cut view (stored rewrites applied, block positions
intact). Proposals are collapsed to one final rewrite per block and either applied in
memory (``render``) or written as ``context_updates`` rows (``prepare_request``), so an
auditor sees both the original and what the model saw.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from contextstore.core.overlays import BlockAddress, BlockUpdate, OverlayMap, UpdateKind
from contextstore.core.view import cut, provider_safe, repair_indexed
from contextstore.processors.pipeline import Pipeline, drop_stale
from contextstore.storage.queries import ConversationState


def collapse(updates: Sequence[BlockUpdate]) -> list[BlockUpdate]:
    """One update per block: the last text, the first ``base_hash`` (the stored text read)."""
    first: dict[BlockAddress, BlockUpdate] = {}
    last: dict[BlockAddress, BlockUpdate] = {}
    sources: dict[BlockAddress, list[str]] = {}
    for update in updates:
        first.setdefault(update.address, update)
        last[update.address] = update
        sources.setdefault(update.address, []).append(update.source)
    return [
        dataclasses.replace(
            last[address],
            kind=UpdateKind.PROCESSOR,
            base_hash=first[address].base_hash,
            source="+".join(dict.fromkeys(sources[address])),
        )
        for address in last
    ]


def propose(pipeline: Pipeline | None, state: ConversationState) -> list[BlockUpdate]:
    """The pipeline's rewrites for the current view, stale ones dropped, one per block."""
    if pipeline is None or not pipeline.processors:
        return []
    view = cut(state.messages, state.deleted_range, state.overlays)
    updates = pipeline.run(view, parallel=pipeline.parallel, overlays=state.overlays)
    return collapse(drop_stale(updates, view)) if updates else []


def processed_view(pipeline: Pipeline | None, state: ConversationState) -> list[dict[str, Any]]:
    """The repaired view with the pipeline applied in memory (nothing written)."""
    overlays: OverlayMap = state.overlays
    proposals = propose(pipeline, state)
    if proposals:
        merged = dict(state.overlays)
        merged.update({u.address: u for u in proposals})
        overlays = merged
    return provider_safe(repair_indexed(cut(state.messages, state.deleted_range, overlays)))


RENDER_CACHE_BYTES = 64 * 1024 * 1024
"""What the render cache may hold, counted as the stored bytes its views were read from."""


class RenderCache:
    """An LRU of rendered views, bounded by their size in bytes, keyed by the conversation's
    newest ``ts`` and the render settings.

    Every write moves the conversation's clock, so a key naming the newest ``ts`` can never
    return a view that a later write changed. A view larger than the whole budget is not
    kept. ``hits`` and ``misses`` are counted for tests.
    """

    def __init__(self, max_bytes: int = RENDER_CACHE_BYTES) -> None:
        self._entries: OrderedDict[Hashable, tuple[list[dict[str, Any]], int]] = OrderedDict()
        self._lock = threading.Lock()
        self.max_bytes = max_bytes
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def bytes(self) -> int:
        """The sizes of the views held, as given to :meth:`put`."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> list[dict[str, Any]] | None:
        """The cached view for ``key`` (a deep copy is the caller's business), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: Hashable, value: list[dict[str, Any]], size: int) -> None:
        """Remember ``value`` (``size`` bytes) for ``key``, evicting the least recently
        used views until the cache fits its budget."""
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

    def clear(self) -> None:
        """Forget every view."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
