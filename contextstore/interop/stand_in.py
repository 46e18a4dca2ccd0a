"""Stand-ins: a message the store cannot hold, kept in its place (Cline and Gemini CLI alike).

An agent's history is addressed by position (Cline's ``conversationHistoryIndex``, deleted
ranges and ``context_history.json``; a re-import's row fingerprints), so a message the
store refuses, or one over its ``max_message_bytes``, is not left out of the middle: it is
kept in its place as a stand-in whose content is an empty text (every render leaves it
out), marked with :data:`REFUSED_KEY`. Nothing here touches a database.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Mapping
from typing import Any, Final

from contextstore.core.content import ROLES, normalize_message_dict
from contextstore.core.errors import InvalidInputError

REFUSED_KEY: Final = "contextstore_refused"
"""Marks a message the store refused (an unknown block type, a field of the wrong type, a
message over ``max_message_bytes``...): it is kept in its place as a stand-in with an empty
text as its content (renders leave it out), so every later message keeps its place. The
marker holds ``reason`` (the store's words) and, when it is kept, ``message``: the original
as JSON text (text, not a value: the original may hold what no stored value may, such as
NUL characters or too deep a nesting), which an export writes back. Without it (a message
too large to keep, or one whose original lives elsewhere, as a Gemini CLI record does),
an export writes :data:`LEFT_OUT_TEXT` in its place. The original's other fields stay
beside it when the store takes them."""
LEFT_OUT_TEXT: Final = (
    "[This message was left out when the {what} was imported into contextstore: {reason}]"
)
"""The text an export writes for a message whose original was not kept (``what``: "task",
"session")."""
NO_ORIGINAL: Final = object()
"""What :func:`refused_original` gives for a stand-in that keeps no original."""


def refused_stand_in(
    message: Any,
    reason: str,
    previous_role: str | None,
    *,
    keep_original: bool = True,
    markers: Collection[str] = (),
) -> dict[str, Any]:
    """The stand-in kept for a message the store refuses (see :data:`REFUSED_KEY`): the
    original's role (else the role after ``previous_role``), an empty text, the original's
    other fields the store takes (not ``markers``, an importer's own marks), and the marker.

    ``keep_original``: keep the original as JSON text in the marker (False for a message
    too large to keep)."""
    role = message.get("role") if isinstance(message, dict) else None
    if not isinstance(role, str) or role not in ROLES:
        role = "assistant" if previous_role == "user" else "user"
    marker: dict[str, Any] = {"reason": reason}
    if keep_original:
        marker["message"] = json.dumps(message, ensure_ascii=False)
    kept: dict[str, Any] = {"role": role, "content": ""}
    if isinstance(message, dict):
        fields = {
            key: value
            for key, value in message.items()
            if isinstance(key, str)
            and key not in ("role", "content", REFUSED_KEY)
            and key not in markers
        }
        try:
            normalize_message_dict({**kept, **fields})
        except InvalidInputError:
            fields = {}  # the original (when kept) still holds them
        kept.update(copy.deepcopy(fields))
    kept[REFUSED_KEY] = marker
    return kept


def fitted_stand_in(
    original: Any,
    reason: str,
    previous_role: str | None,
    limit: int,
    *,
    markers: Collection[str] = (),
) -> dict[str, Any] | None:
    """The stand-in without its original for a message over ``limit``
    (:func:`refused_stand_in`), without the original's other fields too when they take it
    over ``limit``; None when even that is over ``limit``."""
    stand_in = refused_stand_in(
        original, reason, previous_role, keep_original=False, markers=markers
    )
    if normalize_message_dict(stand_in).json_size() > limit:
        stand_in = {key: stand_in[key] for key in ("role", "content", REFUSED_KEY)}
    if normalize_message_dict(stand_in).json_size() > limit:
        return None
    return stand_in


def refused_original(message: Mapping[str, Any]) -> Any:
    """The original a refused message's stand-in keeps (see :data:`REFUSED_KEY`), or
    :data:`NO_ORIGINAL` when it keeps none (too large to keep, or a marker not the
    import's)."""
    marker = message.get(REFUSED_KEY)
    text = marker.get("message") if isinstance(marker, dict) else None
    if not isinstance(text, str):
        return NO_ORIGINAL
    try:
        return json.loads(text)
    except ValueError:
        return NO_ORIGINAL


def refused_reason(message: Mapping[str, Any]) -> str | None:
    """The reason a stand-in's marker gives, None for a message that is no stand-in
    (``"unknown"`` for a marker edited into another form)."""
    marker = message.get(REFUSED_KEY)
    if message.get("content") != "" or not isinstance(marker, dict):
        return None
    reason = marker.get("reason")
    return reason if isinstance(reason, str) else "unknown"


def left_out_text(what: str, reason: str) -> str:
    """:data:`LEFT_OUT_TEXT` for a ``what`` ("task", "session") and a reason."""
    return LEFT_OUT_TEXT.format(what=what, reason=reason)
