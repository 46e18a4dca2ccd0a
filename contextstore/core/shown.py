"""What the view does to each visible message: the stored blocks it leaves out and the
blocks it sends that no stored block holds.

The view rules (:mod:`contextstore.core.view`) drop tool results (an orphan result in the
first message after a cut, a result for an id no call issued, a second result for one call)
and add blocks (a ``result missing`` placeholder for a lost result, the note left in a
message whose blocks were all dropped); a text block sent as its call's ``tool_result``
(Cline's text results) is sent, neither dropped nor added. An auditor reading the stored
rows beside the view needs both named: the rules are applied here by the view's own
functions and their output compared with their input, never restated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contextstore.core.overlays import Message, OverlayMap
from contextstore.core.truncation import DeletedRange
from contextstore.core.view import (
    VIEW_RULES,
    adopt_text_results,
    calls_cut_off,
    calls_hidden_before,
    cut,
    provider_safe,
    repair_indexed,
)


@dataclass(frozen=True)
class ShownMessage:
    """What the view sent of one visible stored message."""

    dropped: frozenset[int] = frozenset()
    """Positions of the message's stored blocks the view left out."""
    added: list[dict[str, Any]] = field(default_factory=list)
    """Blocks sent in this message that no stored block holds, in the order sent."""
    followed_by: list[dict[str, Any]] = field(default_factory=list)
    """The blocks of a user message the view inserted right after this one (``result
    missing`` placeholders for calls followed by no user message, or by none the cut left
    visible); empty when none."""


def _blocks(content: Any) -> list[Any]:
    """A message's content as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _compare(before: Any, after: Any) -> ShownMessage:
    """The blocks of ``before`` (one message's content, cut and rewritten) missing from
    ``after`` (what the view sent), and those of ``after`` that ``before`` lacks.

    A block is matched to the same object first (the repair moves blocks, it does not copy
    them), else to an equal one (a string content becomes a text block)."""
    stored = _blocks(before)
    sent = _blocks(after)
    unmatched = set(range(len(stored)))
    added: list[dict[str, Any]] = []
    for block in sent:
        position = next((i for i in sorted(unmatched) if stored[i] is block), None)
        if position is None:
            position = next((i for i in sorted(unmatched) if stored[i] == block), None)
        if position is None:
            added.append(block)
        else:
            unmatched.discard(position)
    return ShownMessage(dropped=frozenset(unmatched), added=added)


def shown_by_view(
    messages: Sequence[Message],
    deleted_range: DeletedRange | None,
    overlays: OverlayMap | None,
    *,
    rules: int = VIEW_RULES,
) -> dict[int, ShownMessage]:
    """For each visible message index that the view changes (blocks dropped or added, or a
    message inserted after it), what it changed; unchanged messages are left out.

    The view is :func:`contextstore.core.view.build_view`'s, built here by its steps so
    that each message it sends keeps its stored index.
    """
    indexed = cut(messages, deleted_range, overlays)
    hidden = calls_hidden_before(messages, deleted_range)
    repaired = repair_indexed(indexed, rules=rules, hidden_calls=hidden)
    # A text block sent as its call's tool_result (view rules 2) is the stored block sent,
    # in another form: compared in that form (the adoption keeps every block's position).
    compared = adopt_text_results(indexed) if rules >= 2 else indexed
    final = provider_safe(repaired, rules=rules, cut_off=calls_cut_off(messages, deleted_range))
    changes: dict[int, ShownMessage] = {}
    position = 0
    for message in final:
        if (
            position > 0
            and message.get("role") == "user"
            and (position == len(repaired) or repaired[position].get("role") != "user")
        ):
            # provider_safe inserted this message before the next stored one (or after the
            # last, whose calls the cut left unanswered).
            idx = indexed[position - 1][0]
            earlier = changes.get(idx, ShownMessage())
            changes[idx] = ShownMessage(
                earlier.dropped, earlier.added, _blocks(message.get("content"))
            )
            continue
        idx, before = compared[position]
        position += 1
        if message is before or message.get("content") is before.get("content"):
            continue
        found = _compare(before.get("content"), message.get("content"))
        if found.dropped or found.added:
            changes[idx] = found
    return changes
