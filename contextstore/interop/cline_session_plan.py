"""Placing a Cline 4 session on one timeline, checked before anything is written.

Every message of the transcript is a row at its own ``ts``, in the transcript's order. A
model's turn with ``metrics`` is preceded by its request row (``tokens_in`` = the SDK's
``inputTokens`` less its cache reads and writes, which it counts in; the metrics whole in
``details``). A checkpoint (``metadata.checkpoint.history`` in the manifest) comes just
after the user message that started its run (the ``runCount``-th: Cline's restore keeps
the messages up to that one), at its ``createdAt`` when that fits. The compaction state,
Cline's latest only (it writes over it each time), closes the timeline: a source record
holding it whole and, when it hides messages past the first two, a deleted range from 2 to
the last message it replaces (``source_message_count - 1``, less the newest messages it
keeps as they were), with the text it sends in their place as the range's summary and in
the truncation notice on message 1, as :meth:`~contextstore.ContextStore.truncate` shows a
summary.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from contextstore.core.notices import truncation_notice_update
from contextstore.core.rows import (
    CheckpointRow,
    MessageRow,
    RangeRow,
    RequestRow,
    SourceRecordRow,
    UpdateRow,
)
from contextstore.core.validate import MAX_HASH_LENGTH, MAX_ID_LENGTH, MAX_INT32, is_model_id
from contextstore.interop.cline import is_int
from contextstore.interop.cline_session import (
    ClineSession,
    compaction_file,
    manifest_file,
)
from contextstore.interop.cline_session_blocks import store_message
from contextstore.interop.errors import ClineSessionError
from contextstore.interop.files import Note, path_text
from contextstore.interop.plan import (
    ImportPlan,
    MetadataPart,
    Slot,
    clock_start,
    fit_metadata,
    fitting_details,
    parse_timestamp,
    stamp,
    usable_ts,
)
from contextstore.interop.stand_in import fitted_stand_in

SOURCE: Final = "cline_session"
"""The import's source, and the conversation metadata key of what the session's files hold
(beside no row): ``$.cline_session``."""
ORIGIN: Final = "cline_session"
"""``source_records.origin`` of what a session keeps beside its messages."""
COMPACTION_SOURCE: Final = "cline_session:compaction"
"""``context_updates.source`` of the notice that shows a compaction's summary."""
ID_PREFIX: Final = "cline-session-"
"""A session's conversation id is this and its session id, apart from Cline's task ids."""
_TITLE_CHARS: Final = 120
_SYNTHETIC_KINDS: Final = frozenset(
    {
        "auto_compaction",
        "compaction_budget_emergency",
        "completion_reminder",
        "loop_detection_notice",
        "manual_compaction",
        "mistake_stop_notice",
        "recovery_notice",
    }
)
"""Kinds of user messages the SDK adds itself, which start no run of their own."""


def conversation_id_for(session_id: str) -> str:
    """``cline-session-<sessionId>``; for an id too long for that, ``cline-session-`` and a
    hash of it."""
    named = f"{ID_PREFIX}{session_id}"
    if len(named) <= MAX_ID_LENGTH:
        return named
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{ID_PREFIX}{digest[:40]}"


def plan_session(session: ClineSession, *, max_message_bytes: int) -> ImportPlan:
    """Lay a session's files out as one stamped timeline (see the module docstring).

    Raises:
        ClineSessionError: a message is over ``max_message_bytes`` and the store cannot
            hold even a stand-in for it.
    """
    notes = list(session.notes)
    messages = _fitted(session, max_message_bytes, notes)
    after: list[list[Slot]] = [[] for _ in messages]
    unplaced: list[Slot] = []
    starts = run_starts(messages)
    for entry in _checkpoints(session, notes):
        index = starts.get(entry["runCount"])
        slot = Slot(entry["createdAt"], _checkpoint_maker(entry))
        if index is None:
            notes.append(
                Note(
                    str(session.directory / manifest_file(session.session_id)),
                    f"metadata.checkpoint run {entry['runCount']}",
                    "names a run the transcript does not hold; the checkpoint was placed at "
                    "the end of the history.",
                )
            )
            unplaced.append(slot)
        else:
            after[index].append(slot)
    stamps = [usable_ts(m.get("ts")) for m in messages]
    later: list[int | None] = [None] * len(messages)  # the next message's own stamp
    for k in range(len(messages) - 2, -1, -1):
        later[k] = stamps[k + 1] if stamps[k + 1] is not None else later[k + 1]
    slots: list[Slot] = []
    for k, message in enumerate(messages):
        request = _request_slot(message, k, session, notes)
        if request is not None:
            slots.append(request)
        slots.append(Slot(stamps[k], _message_maker(message)))
        slots.extend(Slot(s.natural, s.make, before=later[k]) for s in after[k])
    slots.extend(unplaced)
    slots.extend(_compaction_slots(session, messages))
    start = _started(session)
    created = clock_start([start], slots)
    read = (
        session.directory if session.parent is None else session.directory / session.transcript_file
    )
    return ImportPlan(
        source=SOURCE,
        path=path_text(read),
        conversation_id=conversation_id_for(path_text(session.session_id)),
        created_ts=created,
        rows=stamp(created, slots),
        title=_title(session, messages),
        model_id=_model_id(session, messages),
        metadata=_metadata(session, notes),
        notes=notes,
    )


def _fitted(session: ClineSession, limit: int, notes: list[Note]) -> list[dict[str, Any]]:
    """The messages, each over ``limit`` replaced by a stand-in without its content."""
    messages = list(session.messages)
    path = session.directory / session.transcript_file
    for idx, (message, size) in enumerate(zip(messages, session.sizes, strict=True)):
        if size <= limit:
            continue
        reason = f"it is {size:,} bytes as JSON, over the store's limit of {limit:,}"
        previous = messages[idx - 1]["role"] if idx else None
        stand_in = fitted_stand_in(message, reason, previous, limit)
        if stand_in is None:
            raise ClineSessionError(
                path,
                f"messages[{idx}]",
                f"{reason}, and the store cannot hold even a stand-in for it; open the "
                "store with a larger max_message_bytes. Nothing was imported.",
            )
        messages[idx] = stand_in
        notes.append(
            Note(
                str(path),
                f"messages[{idx}]",
                f"{reason} (max_message_bytes): it was kept in its place without its "
                "content, with an empty text, which renders leave out, so that the messages "
                "after it keep their places (open the store with a larger "
                "max_message_bytes to keep it).",
            )
        )
    return messages


def _message_maker(message: Mapping[str, Any]) -> Any:
    return lambda ts: MessageRow(ts, message)


def run_span(message: Mapping[str, Any]) -> int:
    """How many of the user's runs a message starts, as Cline's checkpoints count them: a
    user message with words or an attachment starts one, a compaction the runs it folded
    (``metadata.userRunSpan``, else one); tool results and the SDK's own notices none."""
    if message.get("role") != "user":
        return 0
    metadata = message.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    kind = metadata.get("kind")
    span = metadata.get("userRunSpan")
    stored = span if isinstance(span, int) and is_int(span) else None
    if kind in ("compaction", "compaction_summary"):
        return 1 if stored is None else stored
    if stored is not None:
        return stored
    if kind in _SYNTHETIC_KINDS:
        return 0
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    texts, attached, answered = [], False, False
    for block in blocks if isinstance(blocks, list) else []:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text" and "cline_file" not in block:
            texts.append(str(block.get("text")))
        elif kind == "tool_result":
            answered = True
        elif kind in ("image", "text"):
            attached = True
    text = "\n".join(texts).strip()
    if attached and not answered:
        return 1
    if not text or text.startswith("[TASK RESUMPTION]"):
        return 0
    return 1


def run_starts(messages: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """For each run (1 for the first), the index of the message that starts it; a run
    folded into a compaction with others has none (Cline cannot restore to it either)."""
    starts: dict[int, int] = {}
    count = 0
    for index, message in enumerate(messages):
        span = run_span(message)
        if span:
            count += span
            starts[count] = index
    return starts


def _checkpoints(session: ClineSession, notes: list[Note]) -> list[dict[str, Any]]:
    """The manifest's checkpoint history, each entry usable (others noted)."""
    metadata = (session.manifest or {}).get("metadata")
    checkpoint = metadata.get("checkpoint") if isinstance(metadata, Mapping) else None
    history = checkpoint.get("history") if isinstance(checkpoint, Mapping) else None
    found = []
    for n, entry in enumerate(history if isinstance(history, list) else []):
        if (
            isinstance(entry, Mapping)
            and isinstance(entry.get("ref"), str)
            and entry["ref"].strip()
            and is_int(entry.get("runCount"))
            and entry["runCount"] >= 1
        ):
            found.append({**entry, "createdAt": usable_ts(entry.get("createdAt"))})
        else:
            notes.append(
                Note(
                    str(session.directory / manifest_file(session.session_id)),
                    f"metadata.checkpoint.history[{n}]",
                    "is no checkpoint Cline can restore (it needs a ref and a runCount of at "
                    "least 1); it was left out.",
                )
            )
    return found


def _checkpoint_maker(entry: Mapping[str, Any]) -> Any:
    ref = entry["ref"].strip()
    kind = entry.get("kind")
    note = f"Cline checkpoint of run {entry['runCount']}" + (
        f" ({kind})" if isinstance(kind, str) else ""
    )
    git_hash = ref if len(ref) <= MAX_HASH_LENGTH else None
    label = f"cline:run-{entry['runCount']}"
    return lambda ts: CheckpointRow(ts, label=label, git_hash=git_hash, note=note)


_METRICS: Final = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


def _request_slot(
    message: Mapping[str, Any], index: int, session: ClineSession, notes: list[Note]
) -> Slot | None:
    """The request row of a model's turn that records its ``metrics``."""
    metrics = message.get("metrics")
    if message.get("role") != "assistant" or not isinstance(metrics, Mapping):
        return None
    path = str(session.directory / session.transcript_file)
    counts: dict[str, int | None] = {}
    for key in _METRICS:
        value = metrics.get(key)
        if value is not None and not is_int(value, MAX_INT32):
            notes.append(
                Note(
                    path,
                    f"messages[{index}] metrics.{key}",
                    f"{value!r:.40} is not a token count; left out of the request row.",
                )
            )
            value = None
        counts[key] = value
    cost = metrics.get("cost")
    if not isinstance(cost, (int, float)) or isinstance(cost, bool) or cost < 0:
        cost = None
    given, reads = counts["inputTokens"], counts["cacheReadTokens"]
    writes = counts["cacheWriteTokens"]
    tokens_in = given
    if given is not None and (reads or 0) + (writes or 0) <= given:
        tokens_in = given - (reads or 0) - (writes or 0)
    model = message.get("modelInfo")
    model_id = model.get("id") if isinstance(model, Mapping) else None
    details = fitting_details({"metrics": dict(metrics)}, path, f"messages[{index}]", notes)
    row = RequestRow(
        0,
        tokens_in=tokens_in,
        tokens_out=counts["outputTokens"],
        cache_writes=writes,
        cache_reads=reads,
        cost=float(cost) if cost is not None else None,
        model_id=model_id if is_model_id(model_id) else None,
        details=details,
    )
    return Slot(None, lambda ts: dataclasses.replace(row, ts=ts))


def _compaction_slots(session: ClineSession, messages: Sequence[Mapping[str, Any]]) -> list[Slot]:
    """The compaction state's record and, when it hides messages past the first two, its
    range and the notice that shows its summary (see the module docstring)."""
    state = session.compaction
    if state is None:
        return []
    own = parse_timestamp(state.get("updated_at"))
    count: int = state["source_message_count"]
    slots = [Slot(own, lambda ts: SourceRecordRow(ts, ORIGIN, "compaction", state, own))]
    if count > len(messages):
        return slots
    compacted = state["messages"]
    kept = _preserved(compacted, messages, count)
    end = count - 1 - kept
    if end < 2:
        return slots
    reason = (
        f"Cline compacted the context ({compaction_file(session.session_id)}): the model "
        f"is sent {len(compacted)} compacted message(s) in place of the transcript's first "
        f"{count}" + (f", the last {kept} of them as they were" if kept else "")
    )
    summary = _summary(compacted[: len(compacted) - kept])
    tokens = _tokens_before(compacted)
    slots.append(
        Slot(
            None,
            lambda ts: RangeRow(ts, end, reason=reason, tokens_total=tokens, summary=summary),
        )
    )
    notice = truncation_notice_update([dict(m) for m in messages[:2]], {}, summary)
    if notice is not None:
        slots.append(
            Slot(
                None,
                lambda ts: UpdateRow(
                    ts,
                    notice.message_idx,
                    notice.block_idx,
                    notice.text,
                    kind=notice.kind,
                    source=COMPACTION_SOURCE,
                ),
            )
        )
    return slots


def _preserved(compacted: Sequence[Any], messages: Sequence[Mapping[str, Any]], count: int) -> int:
    """How many of the compacted messages, from the last, are the transcript's messages
    just before ``count`` as they were (Cline's agentic compaction keeps the newest turns
    after its summary; the basic one the last run, unless it added a notice to it)."""
    kept = 0
    while kept < min(len(compacted), count - 2):
        theirs = compacted[len(compacted) - 1 - kept]
        if not isinstance(theirs, Mapping) or not _same(theirs, messages[count - 1 - kept]):
            break
        kept += 1
    return kept


def _same(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> bool:
    """Whether a compacted message is this transcript message unchanged (both read from
    Cline's files; ``ours`` in the store's shape): the same role and content. Not by
    ``id``: Cline's basic compaction keeps a user message's id when it adds its notice of
    what was done, and Cline mints new ids for the same message on some round trips (its
    own compaction fingerprint leaves ids out for that reason)."""
    if theirs.get("role") != ours.get("role"):
        return False
    try:
        return store_message(theirs).get("content") == ours.get("content")
    except ValueError:
        return False


def _summary(compacted: Sequence[Any]) -> str | None:
    """The text a compaction sends in place of what it hides: each compacted message's
    text blocks (its summary, or for Cline's basic compaction each run's request with
    the notice of what was done and the run's last answer), a message to a paragraph,
    led by its role when the assistant speaks among them."""
    said: list[tuple[str, str]] = []
    for message in compacted:
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts = [content]
        elif isinstance(content, list):
            texts = [
                str(b["text"])
                for b in content
                if isinstance(b, Mapping) and b.get("type") == "text" and "text" in b
            ]
        else:
            texts = []
        text = "\n\n".join(t for t in texts if t.strip())
        if text:
            said.append((str(message.get("role")), text))
    if not said:
        return None
    if all(role == "user" for role, _ in said):
        return "\n\n".join(text for _, text in said)
    return "\n\n".join(f"{role.capitalize()}: {text}" for role, text in said)


def _tokens_before(compacted: Sequence[Any]) -> int | None:
    for message in compacted:
        metadata = message.get("metadata") if isinstance(message, Mapping) else None
        if not isinstance(metadata, Mapping):
            continue
        tokens = metadata.get("tokensBefore")
        if isinstance(tokens, int) and is_int(tokens, MAX_INT32):
            return tokens
        usage = metadata.get("usageBefore")
        if isinstance(usage, Mapping):
            parts = [usage.get(k) for k in _METRICS]
            if all(p is None or is_int(p, MAX_INT32) for p in parts):
                total = sum(p for p in parts if p is not None)
                return total if total <= MAX_INT32 else None
    return None


def _started(session: ClineSession) -> int | None:
    manifest = session.manifest or {}
    start = parse_timestamp(manifest.get("started_at"))
    if start is not None:
        return start
    head = session.session_id.split("_", 1)[0]
    return usable_ts(int(head)) if head.isascii() and head.isdigit() and len(head) < 17 else None


def _title(session: ClineSession, messages: Sequence[Mapping[str, Any]]) -> str | None:
    metadata = (session.manifest or {}).get("metadata")
    title = metadata.get("title") if isinstance(metadata, Mapping) else None
    if isinstance(title, str) and title.strip():
        return title.strip().splitlines()[0][:_TITLE_CHARS]
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message["content"]
        texts = (
            [content]
            if isinstance(content, str)
            else [b["text"] for b in content if b.get("type") == "text" and "cline_file" not in b]
        )
        for text in texts:
            lines = [line.strip() for line in str(text).splitlines() if line.strip()]
            if lines:
                return lines[0][:_TITLE_CHARS]
    return None


def _model_id(session: ClineSession, messages: Sequence[Mapping[str, Any]]) -> str | None:
    for message in reversed(messages):
        info = message.get("modelInfo")
        model = info.get("id") if isinstance(info, Mapping) else None
        if is_model_id(model):
            return str(model)
    model = (session.manifest or {}).get("model")
    return str(model) if is_model_id(model) else None


def _metadata(session: ClineSession, notes: list[Note]) -> dict[str, Any]:
    found: dict[str, Any] = {
        "session_id": path_text(session.session_id),
        "directory": path_text(session.directory),
        "files": list(session.files),
    }
    parts: list[MetadataPart] = []
    if session.manifest is not None:
        found["manifest"] = dict(session.manifest)
        manifest = str(session.directory / manifest_file(session.session_id))
        parts.extend(
            MetadataPart(found["manifest"], key, manifest, key) for key in found["manifest"]
        )
    if session.transcript:
        found["transcript"] = dict(session.transcript)
        transcript = str(session.directory / session.transcript_file)
        parts.extend(
            MetadataPart(found["transcript"], key, transcript, key) for key in found["transcript"]
        )
    if session.transcripts:
        found["transcripts"] = list(session.transcripts)
    if session.parent is not None:
        found["parent_conversation_id"] = conversation_id_for(path_text(session.parent))
    metadata = {"source": "cline", SOURCE: found}
    fit_metadata(metadata, parts, notes)
    return metadata
