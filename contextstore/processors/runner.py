"""Running a processor pipeline over a conversation's view.

Processors propose block rewrites on the cut view (stored rewrites applied, block positions
intact). Proposals are collapsed to one final rewrite per block and either applied in
memory (``render``) or written as ``context_updates`` rows (``prepare_request``), so an
auditor sees both the original and what the model saw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextstore.core.overlays import (
    BlockAddress,
    BlockUpdate,
    OverlayMap,
    UpdateKind,
    apply_overlays,
)
from contextstore.core.state import ConversationState
from contextstore.core.view import (
    CutMemo,
    IndexedView,
    calls_cut_off,
    calls_hidden_before,
    cut,
    cut_reusing,
    finish_view,
)
from contextstore.processors.pipeline import Pipeline, ProcessorStep, drop_stale
from contextstore.processors.triggers import plan_firings


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


@dataclass(frozen=True)
class RunContext:
    """What the store knows about a conversation's earlier processor runs.

    Attributes:
        seen: Newest message index each processor handled, by its
            :func:`~contextstore.processors.triggers.processor_key` (absent: none).
        tokens: Stored token count per message index (only read when a trigger needs it).
        demand: Names of on-demand processors this run asks for.
        memo: Reuse per-message results of incremental processors for unchanged messages.
    """

    seen: Mapping[str, int] = field(default_factory=dict)
    tokens: Mapping[int, int] | None = None
    demand: frozenset[str] = frozenset()
    memo: bool = True


@dataclass(frozen=True)
class RunResult:
    """The pipeline's rewrites (stale ones dropped, one per block), the repaired view with
    them applied, and each fired processor's step."""

    proposals: list[BlockUpdate]
    view: list[dict[str, Any]]
    steps: tuple[ProcessorStep, ...]
    cut_memo: CutMemo = field(default_factory=dict)
    """The cut's rewritten messages, for a later run's ``previous_cut``."""


def propose(pipeline: Pipeline | None, state: ConversationState) -> list[BlockUpdate]:
    """The pipeline's rewrites for the current view, stale ones dropped, one per block."""
    indexed = cut(state.messages, state.deleted_range, state.overlays)
    return _proposed(pipeline, state, indexed, None)[0]


def _proposed(
    pipeline: Pipeline | None,
    state: ConversationState,
    indexed: IndexedView,
    context: RunContext | None,
) -> tuple[list[BlockUpdate], tuple[ProcessorStep, ...]]:
    if pipeline is None or not pipeline.processors:
        return [], ()
    firings = None
    if context is not None:
        visible = [i for i, _ in indexed]
        firings = plan_firings(
            pipeline.ordered,
            visible,
            context.seen,
            tokens=context.tokens,
            demand=context.demand,
            rewritten=rewritten_outside(state, visible),
        )
    report = pipeline.run_report(
        indexed,
        parallel=pipeline.parallel,
        overlays=state.overlays,
        firings=firings,
        memo=context is not None and context.memo,
    )
    updates = list(report.updates)
    return (collapse(drop_stale(updates, indexed)) if updates else []), report.steps


OUTSIDE_KINDS = frozenset(
    {UpdateKind.MANUAL, UpdateKind.TRUNCATION_NOTICE, UpdateKind.FIRST_USER_REPLACEMENT}
)
"""Rewrites written from outside the pipeline whose text a caller or a summarizer chose
(file-read notes are the store's own fixed words)."""


def rewritten_outside(state: ConversationState, visible: Sequence[int]) -> set[int]:
    """The visible messages a rewrite of :data:`OUTSIDE_KINDS` now shows text of."""
    shown = set(visible)
    return {m for (m, _), u in state.overlays.items() if u.kind in OUTSIDE_KINDS and m in shown}


def propose_and_view(
    pipeline: Pipeline | None, state: ConversationState, context: RunContext | None = None
) -> tuple[list[BlockUpdate], list[dict[str, Any]]]:
    """The pipeline's rewrites and the repaired view with them applied, from one cut: the
    messages the rewrites touch are overlaid again, the others are reused as cut."""
    result = run(pipeline, state, context)
    return result.proposals, result.view


def run(
    pipeline: Pipeline | None,
    state: ConversationState,
    context: RunContext | None = None,
    previous_cut: CutMemo | None = None,
) -> RunResult:
    """Run ``pipeline`` on ``state``'s view. With ``context``, each processor runs only when
    its trigger fires and is given only what it fired for; without, every processor reads
    the whole view. With ``previous_cut`` (an earlier run's ``cut_memo`` on a state sharing
    this one's message objects), unchanged rewritten messages are reused, not rebuilt."""
    memo: CutMemo = {}
    if previous_cut is None:
        indexed = cut(state.messages, state.deleted_range, state.overlays)
    else:
        indexed, memo = cut_reusing(
            state.messages, state.deleted_range, state.overlays, previous_cut
        )
    proposals, steps = _proposed(pipeline, state, indexed, context)
    if proposals:
        merged = dict(state.overlays)
        merged.update({u.address: u for u in proposals})
        touched = {u.message_idx for u in proposals}
        indexed = [
            (i, apply_overlays(state.messages[i], i, merged) if i in touched else message)
            for i, message in indexed
        ]
    hidden = calls_hidden_before(state.messages, state.deleted_range)
    cut_off = calls_cut_off(state.messages, state.deleted_range)
    view = finish_view(indexed, hidden_calls=hidden, cut_off=cut_off)
    return RunResult(proposals, view, steps, memo)


def view_with(state: ConversationState, proposals: Sequence[BlockUpdate]) -> list[dict[str, Any]]:
    """The repaired view of ``state`` with ``proposals`` applied in memory (nothing written)."""
    overlays: OverlayMap = state.overlays
    if proposals:
        merged = dict(state.overlays)
        merged.update({u.address: u for u in proposals})
        overlays = merged
    return finish_view(
        cut(state.messages, state.deleted_range, overlays),
        hidden_calls=calls_hidden_before(state.messages, state.deleted_range),
        cut_off=calls_cut_off(state.messages, state.deleted_range),
    )
