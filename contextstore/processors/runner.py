"""Running a processor pipeline over a conversation's view.

Processors propose block rewrites on the cut view (stored rewrites applied, block positions
intact). Proposals are collapsed to one final rewrite per block and either applied in
memory (``render``) or written as ``context_updates`` rows (``prepare_request``), so an
auditor sees both the original and what the model saw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from contextstore.core.overlays import (
    BlockAddress,
    BlockUpdate,
    OverlayMap,
    UpdateKind,
    apply_overlays,
)
from contextstore.core.state import ConversationState
from contextstore.core.view import IndexedView, cut, finish_view
from contextstore.processors.pipeline import Pipeline, drop_stale


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
    return _proposed(pipeline, state, cut(state.messages, state.deleted_range, state.overlays))


def _proposed(
    pipeline: Pipeline | None, state: ConversationState, indexed: IndexedView
) -> list[BlockUpdate]:
    if pipeline is None or not pipeline.processors:
        return []
    updates = pipeline.run(indexed, parallel=pipeline.parallel, overlays=state.overlays)
    return collapse(drop_stale(updates, indexed)) if updates else []


def propose_and_view(
    pipeline: Pipeline | None, state: ConversationState
) -> tuple[list[BlockUpdate], list[dict[str, Any]]]:
    """The pipeline's rewrites and the repaired view with them applied, from one cut: the
    messages the rewrites touch are overlaid again, the others are reused as cut."""
    indexed = cut(state.messages, state.deleted_range, state.overlays)
    proposals = _proposed(pipeline, state, indexed)
    if proposals:
        merged = dict(state.overlays)
        merged.update({u.address: u for u in proposals})
        touched = {u.message_idx for u in proposals}
        indexed = [
            (i, apply_overlays(state.messages[i], i, merged) if i in touched else message)
            for i, message in indexed
        ]
    return proposals, finish_view(indexed)


def view_with(state: ConversationState, proposals: Sequence[BlockUpdate]) -> list[dict[str, Any]]:
    """The repaired view of ``state`` with ``proposals`` applied in memory (nothing written)."""
    overlays: OverlayMap = state.overlays
    if proposals:
        merged = dict(state.overlays)
        merged.update({u.address: u for u in proposals})
        overlays = merged
    return finish_view(cut(state.messages, state.deleted_range, overlays))
