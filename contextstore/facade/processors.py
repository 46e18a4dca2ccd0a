"""Processor runs: running the pipeline on demand, recording what each processor did, and
the state its triggers resume from.

Where runs are recorded: :meth:`prepare_request` and :meth:`run_processors` write one
``processor_runs`` row per processor whose trigger fired, in the transaction that writes
its rewrites. A plain :meth:`render` is a read: it runs the processors in memory from the
recorded state (so it too does work only for what changed since the last recorded run, and
reuses per-message results for unchanged messages) and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.runs import Outcome, ProcessorRun
from contextstore.core.state import ConversationState
from contextstore.core.validate import check_id, shown
from contextstore.core.view import cut
from contextstore.facade.base import Snapshot, StoreBase
from contextstore.processors.pipeline import Pipeline, ProcessorStep
from contextstore.processors.runner import RunContext, RunResult, run
from contextstore.processors.triggers import plan_firings, processor_key, trigger_of
from contextstore.storage import processor_runs, updates
from contextstore.storage.clock import NO_LIMIT, last_ts
from contextstore.storage.database import Connection


def _spans(indices: Sequence[int]) -> list[list[int]]:
    """Sorted indices as ``[first, last]`` runs of consecutive values."""
    spans: list[list[int]] = []
    for idx in sorted(indices):
        if spans and idx == spans[-1][1] + 1:
            spans[-1][1] = idx
        else:
            spans.append([idx, idx])
    return spans


def run_row(pipeline: Pipeline, step: ProcessorStep) -> dict[str, Any]:
    """The ``processor_runs`` values of one step (without conversation and ts)."""
    processor = next(p for p in pipeline.ordered if p.name == step.name)
    reasons = list(dict.fromkeys(step.reasons))
    return {
        "processor": step.name,
        "config_sha256": processor_key(processor, trigger_of(processor)),
        "trigger": step.trigger,
        "nodes_given": step.nodes_given,
        "first_message_idx": min(step.given) if step.given else None,
        "last_message_idx": max(step.given) if step.given else None,
        "seen_through": step.seen_through,
        "outcome": step.outcome,
        "reason": "; ".join(reasons) if reasons else None,
        "proposed": step.proposed,
        "applied": len(step.accepted),
        "dropped": len(step.dropped),
        "result": {
            "applied": [[u.message_idx, u.block_idx] for u in step.accepted],
            "dropped": [
                {"node": [u.message_idx, u.block_idx], "reason": reason}
                for u, reason in zip(step.dropped, step.reasons, strict=False)
            ],
            "given": _spans(step.given),
            "reused": step.reused,
        },
    }


@dataclass(frozen=True)
class _Decided:
    """A run decided outside any transaction: its result, or the failure to record."""

    result: RunResult | None
    failure: dict[str, Any] | None = None
    error: BaseException | None = None

    @property
    def ticks(self) -> int:
        if self.failure is not None:
            return 1
        return 1 if self.result is not None and self.result.steps else 0


class ProcessorsMixin(StoreBase):
    """Processor runs: running the pipeline on demand, recording what each processor did,
    and the state its triggers resume from."""

    def run_processors(
        self,
        conversation_id: str,
        *,
        pipeline: Pipeline | None = None,
        demand: Sequence[str] = (),
    ) -> list[ProcessorRun]:
        """Run the pipeline (the store's, or ``pipeline``) now, write its rewrites as
        ``context_updates`` rows and record a ``processor_runs`` row per processor whose
        trigger fired; returns those rows.

        Each processor is given only what its trigger fired for since its last recorded
        run. ``demand`` names on-demand processors to run this time. A processor that
        raises is recorded with outcome ``failed`` (and raised again as a ContextStoreError);
        nothing else of the run is written.

        Raises:
            InvalidInputError: ``demand`` names a processor the pipeline does not have.
        """
        check_id(conversation_id)
        active = self._active(pipeline)
        names = {p.name for p in active.processors} if active is not None else set()
        listed = (
            isinstance(demand, Sequence)
            and not isinstance(demand, str)
            and all(isinstance(name, str) for name in demand)
        )
        if not listed or not frozenset(demand) <= names:
            known = ", ".join(sorted(names)) if names else "it has none"
            raise InvalidInputError(
                f"demand must list processor names of the pipeline ({known}), got {shown(demand)}."
            )
        wanted = frozenset(demand)

        def decide(snapshot: Snapshot) -> _Decided:
            with self._db.read() as connection:
                context = self._run_context(connection, conversation_id, active, NO_LIMIT, wanted)
            try:
                return _Decided(run(active, snapshot.state, context))
            except Exception as exc:
                name = getattr(exc, "failed_processor", None)
                if name is None or active is None or context is None:
                    raise
                return _Decided(None, _failure_row(active, snapshot.state, context, name, exc), exc)

        def write(connection: Connection, decided: _Decided, stamps: list[int]) -> int:
            if decided.failure is not None:
                processor_runs.insert_runs(
                    connection, conversation_id, stamps[0], [decided.failure]
                )
                return stamps[0]
            assert decided.result is not None and active is not None
            proposals = decided.result.proposals
            if proposals:
                # Masked as every other write is: a processor's output may repeat a secret.
                masked = self._masked_updates(proposals)
                updates.insert_updates(
                    connection, conversation_id, stamps[0], proposals if masked is None else masked
                )
            rows = [run_row(active, step) for step in decided.result.steps]
            processor_runs.insert_runs(connection, conversation_id, stamps[0], rows)
            return stamps[0]

        decided, stamp = self._planned_write(
            conversation_id,
            decide,
            lambda d: d.ticks,
            write,
            local=active is None or active.local,
        )
        if decided.error is not None:
            raise decided.error
        if stamp is None:
            return []
        with self._db.read() as connection:
            return [
                r
                for r in processor_runs.list_runs(connection, conversation_id, stamp)
                if r.ts == stamp
            ]

    def processor_runs(
        self, conversation_id: str, *, as_of: int | None = None
    ) -> list[ProcessorRun]:
        """The conversation's recorded processor runs (``ts <= as_of``), oldest first."""
        check_id(conversation_id)
        limit = self._as_of(as_of)
        with self._db.read() as connection:
            last_ts(connection, conversation_id)
            return processor_runs.list_runs(connection, conversation_id, limit)


def _failure_row(
    pipeline: Pipeline,
    state: ConversationState,
    context: RunContext,
    name: str,
    exc: BaseException,
) -> dict[str, Any]:
    """The ``failed`` row of processor ``name``: what it was to be given, and why it failed
    (the processor's own exception, when the pipeline's error wraps it)."""
    source = exc.__cause__ if exc.__cause__ is not None else exc
    processor = next(p for p in pipeline.ordered if p.name == name)
    trigger = trigger_of(processor)
    key = processor_key(processor, trigger)
    indexed = cut(state.messages, state.deleted_range)  # the indices only: no rewrites
    firing = plan_firings(
        [processor],
        [i for i, _ in indexed],
        context.seen,
        tokens=context.tokens,
        demand=context.demand,
    ).get(name)
    given = firing.messages if firing is not None else ()
    return {
        "processor": name,
        "config_sha256": key,
        "trigger": firing.trigger if firing is not None else trigger.label,
        "nodes_given": 0,
        "first_message_idx": min(given) if given else None,
        "last_message_idx": max(given) if given else None,
        "seen_through": context.seen.get(key, -1),
        "outcome": Outcome.FAILED,
        "reason": f"{type(source).__name__}: {source}"[:2000],
        "proposed": 0,
        "applied": 0,
        "dropped": 0,
        "result": {"applied": [], "dropped": [], "given": _spans(given), "reused": 0},
    }
