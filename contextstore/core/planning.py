"""Context-window management as a plan: Cline's policy decided on a conversation's state.

Nothing here reads or writes the database. The facade reads the state in one snapshot,
asks for a :class:`Plan` (which may call the caller's summarizer: an LLM call, made before
any write transaction opens), and writes the plan's rows (a deleted range, context
updates) stamped with one ``ts``, after checking that the conversation has not changed
since it was read. So a truncation and its notice land together or not at all, a rollback
undoes both, and SQLite's write lock is never held while a model runs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contextstore.core.errors import ContextStoreError, InvalidInputError
from contextstore.core.file_reads import plan_file_read_dedupe
from contextstore.core.notices import (
    SUMMARY_HEADING,
    can_show_a_notice,
    can_show_a_summary,
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
from contextstore.core.records import TruncationDecision
from contextstore.core.state import ConversationState
from contextstore.core.truncation import (
    DeletedRange,
    is_empty_range,
    next_truncation_range,
    normalize_keep,
    subagent_next_range,
    visible_start,
)
from contextstore.core.validate import check_free_text, shown
from contextstore.core.window import (
    compaction_threshold,
    context_window_info,
    keep_for_overflow,
    should_compact,
)

TruncationSummarizer = Callable[[list[Message]], str]
"""A caller-supplied function that summarises the messages a truncation hides."""

SUBAGENT_THRESHOLD = 0.75
"""Cline's SubagentRunner compacts at 75 % of the window (capped at the maximum size)."""


@dataclass(frozen=True)
class Policy:
    """How a conversation's context is managed, read from its row and the call."""

    context_window: int | None
    auto_condense: float | None = None
    subagent: bool = False


@dataclass(frozen=True)
class Plan:
    """What a decision writes, in one ``ts``: rewrites and, for a truncation, a new range.

    ``decision`` is what the caller is told; ``keep``, ``reason``, ``tokens_total`` and
    ``summary`` go on the range row.
    """

    decision: TruncationDecision
    updates: tuple[BlockUpdate, ...] = ()
    new_range: DeletedRange | None = None
    keep: str = ""
    reason: str = ""
    tokens_total: int | None = None
    summary: str | None = None

    @property
    def writes(self) -> bool:
        """True when the plan has rows to write."""
        return bool(self.updates) or self.new_range is not None

    def applied(self, state: ConversationState) -> ConversationState:
        """``state`` as it will be once the plan is written."""
        after = state.with_updates(self.updates)
        return after.with_range(self.new_range) if self.new_range is not None else after


def _nothing(decision: TruncationDecision) -> Plan:
    """A plan that writes nothing."""
    return Plan(decision)


def policy_from_conversation(
    context_window: int | None, metadata: dict[str, Any], auto_condense: float | None
) -> Policy:
    """The policy for one prepare: the call's ``auto_condense`` wins over the stored one."""
    stored = metadata.get("auto_condense")
    threshold = auto_condense if auto_condense is not None else stored
    check_threshold("auto_condense", threshold)
    return Policy(context_window, threshold, bool(metadata.get("subagent")))


SETTINGS: tuple[str, ...] = ("auto_condense", "subagent")
"""The keys of a conversation's metadata that hold the store's own settings (set by
``set_auto_condense`` and ``create_subagent``), read by every prepare."""


def check_settings(metadata: Mapping[str, Any]) -> None:
    """Refuse metadata naming one of the store's :data:`SETTINGS` with a value no prepare
    could use.

    Raises:
        InvalidInputError: naming the setting.
    """
    check_threshold("metadata['auto_condense']", metadata.get("auto_condense"))
    if not isinstance(metadata.get("subagent", False), bool):
        raise InvalidInputError(
            f"metadata['subagent'] must be true or false, got {shown(metadata['subagent'])}."
        )


def with_settings_kept(metadata: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` replacing ``current``, with the store's :data:`SETTINGS` of ``current``
    that ``metadata`` does not name: an importer writing its bookkeeping would otherwise
    turn auto-condense off, or a subagent into a main conversation, unseen.

    Raises:
        InvalidInputError: ``metadata`` names a setting with a value no prepare could use.
    """
    check_settings(metadata)
    kept = {key: current[key] for key in SETTINGS if key in current and key not in metadata}
    return {**metadata, **kept}


def check_threshold(name: str, threshold: Any) -> None:
    """Refuse an auto-condense threshold that is not a fraction of the window in (0, 1]
    (None, no threshold, passes); ``name`` is the parameter the caller gave it as."""
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0 < threshold <= 1
    ):
        raise InvalidInputError(
            f"{name} must be a fraction of the window in (0, 1], got {shown(threshold)}."
        )


def _summarise(
    summarizer: TruncationSummarizer | None,
    summary: str | None,
    state: ConversationState,
    new_range: tuple[int, int],
) -> str | None:
    if summary is not None or summarizer is None:
        return summary
    hidden = [
        apply_overlays(state.messages[i], i, state.overlays)
        for i in range(visible_start(state.deleted_range), new_range[1] + 1)
    ]
    for message_idx, kind in (
        (1, UpdateKind.TRUNCATION_NOTICE),
        (0, UpdateKind.FIRST_USER_REPLACEMENT),
    ):
        if any(
            update.kind == kind and SUMMARY_HEADING in update.text
            for (idx, _), update in state.overlays.items()
            if idx == message_idx
        ):
            # The new notice replaces the one that holds the earlier summary (on message 1,
            # or after the cue on message 0): the summarizer reads that message first, so
            # that what it writes can keep it (as Cline summarises the whole visible
            # conversation).
            message = state.messages[message_idx]
            hidden.insert(0, apply_overlays(message, message_idx, state.overlays))
            break
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
    check_free_text("the summarizer's summary", result)
    return result


def _notice_updates(
    state: ConversationState, summary: str | None, *, first_user: bool
) -> list[BlockUpdate]:
    updates: list[BlockUpdate] = []
    notice = truncation_notice_update(state.messages, state.overlays, summary)
    if notice is None and summary:
        notice = _replace_notice(state, summary)
    if notice is not None:
        updates.append(notice)
    carried = None
    if (summary or first_user) and not can_show_a_notice(state.messages):
        # Message 1 a user's or with no block that shows text cannot carry the notice: the
        # notice (and summary) then goes with the cue that replaces the task, where the model
        # reads it (a condense with a summary replaces the task text in Cline too). A
        # truncation that writes no cue and has no summary (a prepare's) shows no notice.
        carried = notice_text(summary)
    if first_user or carried is not None:
        replacement = first_user_replacement_update(state.messages, state.overlays, carried)
        if replacement is not None:
            updates.append(replacement)
    return updates


def _replace_notice(state: ConversationState, summary: str) -> BlockUpdate | None:
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


def plan_request(
    policy: Policy,
    state: ConversationState,
    total: int | None,
    *,
    summarizer: TruncationSummarizer | None = None,
) -> Plan:
    """The per-request decision: nothing, de-duplication alone, or a truncation.

    ``total`` is the newest recorded request's token total (None: no usage recorded). At
    the maximum allowed size for the window, file reads are de-duplicated first; if that
    saves at least 30 % of the characters, nothing is truncated; otherwise the notice and
    a new range (``half``, or ``quarter`` when half the total still exceeds the maximum)
    come with the de-duplication. With auto-condense and a summarizer, the summarizer is
    called here, on the messages the new range hides.
    """
    window = context_window_info(policy.context_window)
    base = TruncationDecision(
        action="none",
        deleted_range=state.deleted_range,
        previous_range=state.deleted_range,
        tokens_total=total,
    )
    if total is None:
        return _nothing(base)
    if policy.subagent:
        return _subagent(state, policy, total, base)
    if policy.auto_condense is not None:
        return _auto_condense(state, policy, total, base, summarizer)
    keep = keep_for_overflow(total, policy.context_window)
    if keep is None:
        return _nothing(base)
    reason = (
        f"previous request used {total:,} tokens, at or over the maximum of "
        f"{window.max_allowed_size:,.0f} for a {window.context_window:,}-token window"
    )
    return _dedupe_then_truncate(state, keep, total, reason)


def _dedupe_then_truncate(
    state: ConversationState,
    keep: str,
    total: int,
    reason: str,
    *,
    summary: str | None = None,
    subagent: bool = False,
) -> Plan:
    """De-duplicate file reads; if that saves under 30 %, also hide more messages.

    A subagent's truncation adds no notice and gives up when it cannot progress, as
    Cline's SubagentRunner does; otherwise the notice comes with the new range.
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
    row = functools.partial(Plan, keep=keep, reason=reason, tokens_total=total)
    if plan.updates and not plan.need_to_truncate:
        decision = unchanged(
            action="dedupe",
            reason=f"{reason}; de-duplicating file reads saved {plan.fraction_saved:.0%}, "
            "so nothing was truncated",
        )
        return row(decision, tuple(plan.updates))
    if subagent:
        new_range = subagent_next_range(state.messages, state.deleted_range)
    else:
        candidate = next_truncation_range(state.messages, state.deleted_range, keep)
        progressed = not is_empty_range(candidate) and candidate != state.deleted_range
        new_range = candidate if progressed else None
    updates = list(plan.updates)
    if new_range is not None and not subagent:
        updates += _notice_updates(state.with_updates(plan.updates), summary, first_user=False)
    if new_range is None:
        decision = unchanged(
            action="dedupe" if plan.updates else "none",
            reason=f"{reason}; no progress possible (nothing more can be hidden)",
        )
        return row(decision, tuple(updates))
    decision = TruncationDecision(
        "truncate",
        keep,
        new_range,
        state.deleted_range,
        total,
        plan.touched,
        plan.fraction_saved,
        reason,
    )
    return row(decision, tuple(updates), new_range, summary=summary)


def _subagent(
    state: ConversationState, policy: Policy, total: int, base: TruncationDecision
) -> Plan:
    if not should_compact(total, policy.context_window, SUBAGENT_THRESHOLD):
        return _nothing(base)
    reason = _threshold_reason(
        f"subagent request used {total:,} tokens, at or over its compaction threshold",
        policy.context_window,
        SUBAGENT_THRESHOLD,
    )
    return _dedupe_then_truncate(state, "quarter", total, reason, subagent=True)


def _auto_condense(
    state: ConversationState,
    policy: Policy,
    total: int,
    base: TruncationDecision,
    summarizer: TruncationSummarizer | None,
) -> Plan:
    assert policy.auto_condense is not None
    if not can_show_a_summary(state.messages):
        summarizer = None  # no place to show it: the truncation goes on without asking
    if not should_compact(total, policy.context_window, policy.auto_condense):
        return _nothing(base)
    if state.deleted_range is not None and len(state.messages) - state.deleted_range[1] - 1 <= 2:
        return _nothing(
            TruncationDecision(
                "none",
                None,
                state.deleted_range,
                state.deleted_range,
                total,
                reason="auto-condense skipped: the last truncation left at most "
                "two messages (avoids summarising a summary)",
            )
        )
    reason = _auto_condense_reason(total, policy.context_window, policy.auto_condense)
    keep = (
        "last_two"
        if summarizer is not None
        else (keep_for_overflow(total, policy.context_window) or "half")
    )
    dedupe = plan_file_read_dedupe(
        state.messages, visible_start(state.deleted_range), state.overlays
    )
    if summarizer is None or (dedupe.updates and not dedupe.need_to_truncate):
        # De-duplicating file reads may be enough on its own: then no summary is asked for.
        return _dedupe_then_truncate(state, keep, total, reason)
    new_range = next_truncation_range(state.messages, state.deleted_range, keep)
    if is_empty_range(new_range) or new_range == state.deleted_range:
        return _nothing(base)
    summary = _summarise(summarizer, None, state, new_range)
    return _dedupe_then_truncate(
        state, keep, total, reason + "; condensed with a summary", summary=summary
    )


def _auto_condense_reason(total: int, context_window: int | None, fraction: float) -> str:
    """Why auto-condense compacted: the threshold applied, in tokens, and where it comes from
    (the fraction of the window, or the maximum allowed size when that fraction is over it)."""
    return _threshold_reason(
        f"previous request used {total:,} tokens, at or over the auto-condense threshold",
        context_window,
        fraction,
    )


def _threshold_reason(opening: str, context_window: int | None, fraction: float) -> str:
    """``opening`` followed by the compaction threshold applied, in tokens, and where it
    comes from (see :func:`_auto_condense_reason`)."""
    window = context_window_info(context_window)
    applied = compaction_threshold(context_window, fraction)
    share = f"{fraction * 100:g}% of the {window.context_window:,}-token window"
    wanted = math.floor(window.context_window * fraction)
    if applied < wanted:
        source = f"{share} is {wanted:,}, over the maximum allowed size, which is used instead"
    else:
        source = share
    return f"{opening} of {applied:,.0f} tokens ({source})"


def plan_truncation(
    state: ConversationState,
    keep: str,
    total: int | None,
    *,
    reason: str,
    summary: str | None,
    summarizer: TruncationSummarizer | None,
    first_user_replacement: bool,
) -> Plan:
    """An explicit truncation (condense, summary, context-window error retry).

    Plans the new range, the truncation notice (with the summary, if any: the
    summarizer's, called here on the messages the range hides) and, as Cline does for
    these flows, the first-user-message replacement; the original task text stays in the
    rows.
    """
    strategy = normalize_keep(keep)
    new_range = next_truncation_range(state.messages, state.deleted_range, strategy)
    if is_empty_range(new_range) or new_range == state.deleted_range:
        return _nothing(
            TruncationDecision(
                "none",
                strategy,
                state.deleted_range,
                state.deleted_range,
                total,
                reason=f"{reason}; nothing more can be hidden",
            )
        )
    if (summary or summarizer is not None) and not can_show_a_summary(state.messages):
        raise InvalidInputError(
            "the summary would have no place the model reads: neither message 1 nor message "
            "0 holds a block that can show text; truncate without a summary or summarizer."
        )
    summary = _summarise(summarizer, summary, state, new_range)
    updates = _notice_updates(state, summary, first_user=first_user_replacement)
    decision = TruncationDecision(
        "truncate", strategy, new_range, state.deleted_range, total, reason=reason
    )
    return Plan(decision, tuple(updates), new_range, strategy, reason, total, summary)
