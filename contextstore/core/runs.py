"""Processor runs as plain values: what a processor was given and what became of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class Outcome:
    """The ``outcome`` values of a processor run."""

    APPLIED = "applied"
    """At least one proposal was written (or, in a render, applied in memory)."""
    DROPPED_STALE = "dropped_stale"
    """Every proposal was dropped: its block was gone or had changed since it was read."""
    NO_CHANGE = "no_change"
    """The processor proposed nothing."""
    FAILED = "failed"
    """The processor raised; nothing of the run was written but this row."""

    ALL = frozenset({APPLIED, DROPPED_STALE, NO_CHANGE, FAILED})


@dataclass(frozen=True)
class ProcessorRun:
    """One ``processor_runs`` row.

    Attributes:
        id, conversation_id, ts: The row and when the run was written.
        processor: The processor's name; ``config_sha256`` its type, config and trigger.
        trigger: The trigger that fired (``new_message``, ``aged_out:4000``...).
        nodes_given: Blocks the processor was given; ``first_message_idx`` and
            ``last_message_idx`` bound the messages they belong to (None: none given).
        seen_through: The newest message index handled after this run.
        outcome: One of :class:`Outcome`; ``reason`` says why for a drop or a failure.
        proposed, applied, dropped: Proposal counts.
        result: ``{"applied": [[m, b], ...], "dropped": [{"node": [m, b], "reason": ...}],
            "given": [message indices], "reused": n}``.
    """

    id: int
    conversation_id: str
    ts: int
    processor: str
    config_sha256: str
    trigger: str
    nodes_given: int
    first_message_idx: int | None
    last_message_idx: int | None
    seen_through: int
    outcome: str
    reason: str | None
    proposed: int
    applied: int
    dropped: int
    result: dict[str, Any]
