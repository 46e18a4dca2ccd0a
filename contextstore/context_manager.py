"""Context-window management on rows: Cline's policy, decided and written in one transaction.

The functions here run inside a write transaction the facade opened. They read the
conversation's state, decide with the pure functions of ``contextstore.core``, and write
the decision as rows (a deleted range, context updates) stamped with one ``ts``, so a
truncation and its notice land together or not at all, and a rollback undoes both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from contextstore.core.errors import ContextStoreError, InvalidInputError
from contextstore.core.file_reads import plan_file_read_dedupe
from contextstore.core.notices import (
    first_user_replacement_update,
    notice_text,
    truncation_notice_update,
)
from contextstore.core.overlays import (
    BlockUpdate,
    Message,
    UpdateKind,
    apply_overlays,
    text_hash,
)
from contextstore.core.truncation import (
    is_empty_range,
    next_truncation_range,
    normalize_keep,
    subagent_next_range,
    visible_start,
)
from contextstore.core.window import context_window_info, keep_for_overflow, should_compact
from contextstore.records import TruncationDecision
from contextstore.storage import queries
from contextstore.storage.clock import tick

Summarizer = Callable[[list[Message]], str]
"""A caller-supplied function that summarises the messages a truncation hides."""

SUBAGENT_THRESHOLD = 0.75
"""Cline's SubagentRunner compacts at 75 % of the window (capped at the maximum size)."""


@dataclass(frozen=True)
class Policy:
    """How a conversation's context is managed, read from its row and the call."""

    context_window: int | None
    auto_condense: float | None = None
    subagent: bool = False


def policy_from_conversation(
    context_window: int | None, metadata: dict[str, Any], auto_condense: float | None
) -> Policy:
    """The policy for one prepare: the call's ``auto_condense`` wins over the stored one."""
    stored = metadata.get("auto_condense")
    threshold = auto_condense if auto_condense is not None else stored
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0 < threshold <= 1
    ):
        raise InvalidInputError(
            f"auto_condense must be a fraction of the window in (0, 1], got {threshold!r}."
        )
    return Policy(context_window, threshold, bool(metadata.get("subagent")))


def _write_decision(
    connection: Connection,
    conversation_id: str,
    updates: Sequence[BlockUpdate],
    new_range: tuple[int, int] | None,
    *,
    keep: str,
    reason: str,
    tokens_total: int | None,
    summary: str | None,
) -> int | None:
    if not updates and new_range is None:
        return None
    (stamp,) = tick(connection, conversation_id)
    queries.insert_updates(connection, conversation_id, stamp, updates)
    if new_range is not None:
        queries.insert_range(
            connection,
            conversation_id,
            stamp,
            new_range[1],
            keep=keep,
            reason=reason,
            tokens_total=tokens_total,
            summary=summary,
        )
    return stamp


def _summarise(
    summarizer: Summarizer | None,
    summary: str | None,
    state: queries.ConversationState,
    new_range: tuple[int, int],
) -> str | None:
    if summary is not None or summarizer is None:
        return summary
    hidden = [
        apply_overlays(state.messages[i], i, state.overlays)
        for i in range(visible_start(state.deleted_range), new_range[1] + 1)
    ]
    try:
        result = summarizer(hidden)
    except ContextStoreError:
        raise
    except Exception as exc:
        raise ContextStoreError(
            f"the summarizer failed ({type(exc).__name__}: {exc}); nothing was written. Fix the "
            "summarizer or truncate without one."
        ) from exc
    if not isinstance(result, str):
        raise InvalidInputError("the summarizer must return a string.")
    return result


def _notice_updates(
    state: queries.ConversationState, summary: str | None, *, first_user: bool
) -> list[BlockUpdate]:
    updates: list[BlockUpdate] = []
    notice = truncation_notice_update(state.messages, state.overlays, summary)
    if notice is None and summary:
        notice = _replace_notice(state, summary)
    if notice is not None:
        updates.append(notice)
    if first_user:
        replacement = first_user_replacement_update(state.messages, state.overlays)
        if replacement is not None:
            updates.append(replacement)
    return updates


def _replace_notice(state: queries.ConversationState, summary: str) -> BlockUpdate | None:
    """A new notice carrying ``summary`` over an existing one (notices are otherwise once-only)."""
    for (message_idx, block_idx), current in state.overlays.items():
        if message_idx == 1 and current.kind == UpdateKind.TRUNCATION_NOTICE:
            return BlockUpdate(
                1,
                block_idx,
                UpdateKind.TRUNCATION_NOTICE,
                notice_text(summary),
                current.source,
                {},
                text_hash(current.text),
            )
    return None


def decide_and_write(
    connection: Connection,
    conversation_id: str,
    policy: Policy,
    state: queries.ConversationState,
    *,
    summarizer: Summarizer | None = None,
) -> TruncationDecision:
    """The per-request decision: nothing, de-duplication alone, or a truncation.

    Uses the newest recorded request's token total against the conversation's window:
    at the maximum allowed size, file reads are de-duplicated first; if that saves at
    least 30 % of the characters, nothing is truncated; otherwise the notice and a new
    range (``half``, or ``quarter`` when half the total still exceeds the maximum) are
    written with the de-duplication, in one ``ts``. ``state`` is the conversation as read
    in this transaction; the caller refreshes its range and updates when the decision
    wrote any.
    """
    total = queries.last_request_total(connection, conversation_id)
    window = context_window_info(policy.context_window)
    base = TruncationDecision(
        action="none",
        deleted_range=state.deleted_range,
        previous_range=state.deleted_range,
        tokens_total=total,
    )
    if total is None:
        return base
    if policy.subagent:
        return _subagent(connection, conversation_id, state, policy, total, base)
    if policy.auto_condense is not None:
        return _auto_condense(connection, conversation_id, state, policy, total, base, summarizer)
    keep = keep_for_overflow(total, policy.context_window)
    if keep is None:
        return base
    reason = (
        f"previous request used {total:,} tokens, at or over the maximum of "
        f"{window.max_allowed_size:,.0f} for a {window.context_window:,}-token window"
    )
    return _dedupe_then_truncate(connection, conversation_id, state, keep, total, reason)


def _dedupe_then_truncate(
    connection: Connection,
    conversation_id: str,
    state: queries.ConversationState,
    keep: str,
    total: int,
    reason: str,
    *,
    summary: str | None = None,
    subagent: bool = False,
) -> TruncationDecision:
    """De-duplicate file reads; if that saves under 30 %, also hide more messages.

    A subagent's truncation adds no notice and gives up when it cannot progress, as
    Cline's SubagentRunner does; otherwise the notice is written with the new range.
    """
    plan = plan_file_read_dedupe(state.messages, visible_start(state.deleted_range), state.overlays)
    unchanged = functools.partial(
        TruncationDecision,
        deleted_range=state.deleted_range,
        previous_range=state.deleted_range,
        tokens_total=total,
        deduplicated=plan.touched,
        fraction_saved=plan.fraction_saved,
    )
    if plan.updates and not plan.need_to_truncate:
        _write_decision(
            connection,
            conversation_id,
            plan.updates,
            None,
            keep=keep,
            reason=reason,
            tokens_total=total,
            summary=None,
        )
        return unchanged(
            action="dedupe",
            reason=f"{reason}; de-duplicating file reads saved {plan.fraction_saved:.0%}, "
            "so nothing was truncated",
        )
    if subagent:
        new_range = subagent_next_range(state.messages, state.deleted_range)
    else:
        candidate = next_truncation_range(state.messages, state.deleted_range, keep)
        progressed = not is_empty_range(candidate) and candidate != state.deleted_range
        new_range = candidate if progressed else None
    updates = list(plan.updates)
    if new_range is not None and not subagent:
        updates += _notice_updates(
            queries.with_updates(state, plan.updates), summary, first_user=False
        )
    _write_decision(
        connection,
        conversation_id,
        updates,
        new_range,
        keep=keep,
        reason=reason,
        tokens_total=total,
        summary=summary if new_range is not None else None,
    )
    if new_range is None:
        return unchanged(
            action="dedupe" if plan.updates else "none",
            reason=f"{reason}; no progress possible (nothing more can be hidden)",
        )
    return TruncationDecision(
        "truncate",
        keep,
        new_range,
        state.deleted_range,
        total,
        plan.touched,
        plan.fraction_saved,
        reason,
    )


def _subagent(
    connection: Connection,
    conversation_id: str,
    state: queries.ConversationState,
    policy: Policy,
    total: int,
    base: TruncationDecision,
) -> TruncationDecision:
    if not should_compact(total, policy.context_window, SUBAGENT_THRESHOLD):
        return base
    reason = f"subagent request used {total:,} tokens, at or over 75 % of its window"
    return _dedupe_then_truncate(
        connection, conversation_id, state, "quarter", total, reason, subagent=True
    )


def _auto_condense(
    connection: Connection,
    conversation_id: str,
    state: queries.ConversationState,
    policy: Policy,
    total: int,
    base: TruncationDecision,
    summarizer: Summarizer | None,
) -> TruncationDecision:
    assert policy.auto_condense is not None
    if not should_compact(total, policy.context_window, policy.auto_condense):
        return base
    if state.deleted_range is not None and len(state.messages) - state.deleted_range[1] - 1 <= 2:
        return TruncationDecision(
            "none",
            None,
            state.deleted_range,
            state.deleted_range,
            total,
            reason="auto-condense skipped: the last truncation left at most "
            "two messages (avoids summarising a summary)",
        )
    reason = (
        f"previous request used {total:,} tokens, at or over the auto-condense threshold "
        f"of {policy.auto_condense:.0%} of the window"
    )
    keep = (
        "last_two"
        if summarizer is not None
        else (keep_for_overflow(total, policy.context_window) or "half")
    )
    if summarizer is None:
        return _dedupe_then_truncate(connection, conversation_id, state, keep, total, reason)
    new_range = next_truncation_range(state.messages, state.deleted_range, keep)
    if is_empty_range(new_range) or new_range == state.deleted_range:
        return base
    summary = _summarise(summarizer, None, state, new_range)
    return _dedupe_then_truncate(
        connection,
        conversation_id,
        state,
        keep,
        total,
        reason + "; condensed with a summary",
        summary=summary,
    )


def explicit_truncate(
    connection: Connection,
    conversation_id: str,
    keep: str,
    *,
    reason: str,
    summary: str | None,
    summarizer: Summarizer | None,
    first_user_replacement: bool,
) -> TruncationDecision:
    """An explicit truncation (condense, summary, context-window error retry).

    Writes the new range, the truncation notice (with the summary, if any) and, as Cline
    does for these flows, the first-user-message replacement; the original task text stays
    in the rows.
    """
    strategy = normalize_keep(keep)
    state = queries.load_state(connection, conversation_id)
    new_range = next_truncation_range(state.messages, state.deleted_range, strategy)
    total = queries.last_request_total(connection, conversation_id)
    if is_empty_range(new_range) or new_range == state.deleted_range:
        return TruncationDecision(
            "none",
            strategy,
            state.deleted_range,
            state.deleted_range,
            total,
            reason=f"{reason}; nothing more can be hidden",
        )
    summary = _summarise(summarizer, summary, state, new_range)
    updates = _notice_updates(state, summary, first_user=first_user_replacement)
    _write_decision(
        connection,
        conversation_id,
        updates,
        new_range,
        keep=strategy,
        reason=reason,
        tokens_total=total,
        summary=summary,
    )
    return TruncationDecision(
        "truncate", strategy, new_range, state.deleted_range, total, reason=reason
    )
