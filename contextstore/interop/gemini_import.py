"""Moving Gemini CLI chats into and out of a store, through the public ``ContextStore`` API only.

:func:`import_gemini` reads and writes one chat after another, all of them in one
transaction (a link out of the folder, a file over the size limit or nested too deep stops
everything, and nothing is written). :func:`export_gemini` writes a conversation as a session
recording (``.jsonl`` as current Gemini CLI writes, ``.json`` as older versions did) or as a
``/chat save`` checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from contextstore.core.hardening import DEFAULT_FINAL_USER_TEXT
from contextstore.core.os_errors import check_regular_targets, os_errors
from contextstore.core.records import Conversation, RequestRecord
from contextstore.core.server_tools import SERVER_BLOCK_TYPES
from contextstore.core.store_files import check_not_store_files
from contextstore.core.validate import check_flags, check_id
from contextstore.core.view import adopt_text_results, build_view
from contextstore.interop.arguments import check_import_options, path_argument
from contextstore.interop.errors import GeminiChatError
from contextstore.interop.files import MAX_FILE_BYTES, Folder
from contextstore.interop.gemini import (
    CHECKPOINT,
    CONTENTS,
    continued_in,
    find_chats,
    is_ignored_user_content,
    read_chat,
)
from contextstore.interop.gemini_convert import CONTEXT_OPENINGS
from contextstore.interop.gemini_plan import ORIGIN, plan_chat
from contextstore.interop.plan import ImportPlan, format_timestamp
from contextstore.interop.report import ExportReport, ImportReport
from contextstore.interop.stand_in import REFUSED_KEY, left_out_text, refused_reason
from contextstore.interop.store_api import InteropStore, in_one_snapshot
from contextstore.interop.sync import Progress, imported_until, run_import
from contextstore.interop.writing import (
    write_json_atomic,
    write_text_atomic,
)
from contextstore.renderers import registry
from contextstore.renderers.gemini import content_part, result_text

SESSION_RECORD_KINDS = frozenset({"user", "gemini", "info", "error", "warning"})


def import_gemini(
    store: InteropStore,
    path: str | os.PathLike[str],
    *,
    replace: bool = False,
    max_file_bytes: int = MAX_FILE_BYTES,
    progress: Progress | None = None,
    context_window: int | None = None,
) -> ImportReport:
    """Import a Gemini CLI chat file, or every chat under a folder.

    ``path`` is a session recording (``session-*.jsonl`` or ``.json``), a ``/chat save``
    checkpoint, a ``/chat share`` export, or a folder holding them (``chats/``, a project's
    folder, ``~/.gemini/tmp``). A session becomes the conversation whose id is its
    ``sessionId``; importing again adds only what is new. A legacy ``.json`` session that
    Gemini CLI continued in a ``.jsonl`` beside it is an older copy of that file: it is
    skipped (with a note) in a folder, and refused when named.

    A conversation's context window is the one Gemini CLI sized the chat against
    (:func:`~contextstore.interop.gemini_plan.token_limit` of its model: 1,048,576, or
    256,000 for Gemma 4), set when the conversation is created or has none;
    ``context_window`` (tokens) overrides it on every conversation this import writes.

    Raises:
        InvalidInputError: ``path`` is no path, ``replace`` no flag, ``max_file_bytes`` no
            positive integer, ``progress`` nothing to call, ``context_window`` no positive
            integer.
        GeminiChatError: ``path`` holds no chat, a single file holds nothing readable, or
            it is a ``.json`` session continued in the ``.jsonl`` beside it.
        UnsafeInputError: a link leads out of ``path``, or a file is too large or too deep.
        ImportConflictError: a single file no longer matches its conversation.
    """
    root = path_argument("path", path)
    check_import_options(
        replace=replace,
        max_file_bytes=max_file_bytes,
        progress=progress,
        context_window=context_window,
    )
    folder, files = gemini_chats(root, max_file_bytes=max_file_bytes)
    single = root.is_file()

    def plan(file: Path) -> ImportPlan:
        twin = continued_in(file)
        if twin is not None:
            raise GeminiChatError(file, None, _older_copy(twin, single))
        chat = read_chat(file, folder)
        modified = int(file.stat().st_mtime * 1000)
        # A session without records, as an export of a conversation without messages
        # writes it, is taken when named; a folder's are skipped with a note.
        return plan_chat(
            chat,
            max_message_bytes=store.max_message_bytes,
            file_ms=modified,
            empty_session=single,
        )

    def exported(imported: ImportPlan) -> ImportPlan | None:
        return _plan_of_export(store, imported, max_file_bytes)

    return run_import(
        store,
        ORIGIN,
        files,
        plan,
        single=single,
        replace=replace,
        progress=progress,
        exported=exported,
        context_window=context_window,
    )


def _plan_of_export(
    store: InteropStore, imported: ImportPlan, max_file_bytes: int
) -> ImportPlan | None:
    """What importing the session :func:`export_gemini` writes for the conversation now
    would read (written to a scratch folder under the file's own name), or None for a
    checkpoint or a shared chat, whose plan depends on the file's time."""
    with tempfile.TemporaryDirectory(prefix="contextstore-export-") as scratch:
        target = Path(scratch) / Path(imported.path).name
        export_gemini(store, imported.conversation_id, target)
        chat = read_chat(target, Folder(Path(scratch), max_file_bytes=max_file_bytes))
        if not chat.is_session:
            return None
        return plan_chat(chat, max_message_bytes=store.max_message_bytes, empty_session=True)


def _older_copy(twin: Path, single: bool) -> str:
    instead = f"import {twin} instead" if single else f"{twin.name} is imported instead"
    return (
        f"is an older copy of {twin.name}: Gemini CLI copied the session there whole when it "
        f"was resumed and has recorded it there since, so this file was left out; {instead}."
    )


def gemini_chats(
    path: str | os.PathLike[str], *, max_file_bytes: int = MAX_FILE_BYTES
) -> tuple[Folder, list[Path]]:
    """The chat files :func:`import_gemini` would import from ``path``, and the folder no
    file may lead out of.

    Raises:
        GeminiChatError: ``path`` does not exist or holds no chat.
        OutsideFolderError: a link under it leads out of it.
    """
    root = Path(path)
    folder = Folder(root if root.is_dir() else root.parent, max_file_bytes=max_file_bytes)
    files = find_chats(root, folder)
    if not files:
        raise GeminiChatError(
            root,
            None,
            "holds no Gemini CLI chats (chats/session-*.jsonl or .json, checkpoint-*.json, "
            "or session recordings under their own names, session-<date>T<time>-<id>.json); "
            "nothing to import.",
        )
    return folder, files


@in_one_snapshot
def export_gemini(
    store: InteropStore,
    conversation_id: str,
    path: str | os.PathLike[str],
    *,
    checkpoint: bool = False,
    overwrite: bool = False,
) -> ExportReport:
    """Write a conversation as a Gemini CLI session recording or ``/chat save`` checkpoint.

    A path ending in ``.jsonl`` (in any case) gets a session in the JSONL form Gemini CLI
    writes today (the metadata record, then one record per message); any other path
    (``.json``, or a name of no Gemini CLI file such as ``out.txt``) the legacy single-object
    form, as :func:`import_gemini` reads such a file back. With ``checkpoint``, a checkpoint
    (``{"history": [...]}``, or the bare array when that is what was imported), which a
    ``.jsonl`` path cannot hold: the import would read it as a session recording. An
    imported file comes back JSON-equal (for JSONL: equal once its records are replayed);
    messages written in contextstore become records of their own, and so does every
    message of an imported checkpoint exported as a session.

    The conversation is read as of one moment (:meth:`~contextstore.ContextStore.snapshot`):
    an agent appending meanwhile is in none of the records or in all of them.

    Raises:
        GeminiChatError: the file exists and ``overwrite`` is False, or a checkpoint is
            asked of a conversation without messages or into a ``.jsonl`` path (nothing
            written).
        InvalidInputError: ``path`` is the store's database or a file beside it, or no
            path; ``checkpoint`` or ``overwrite`` is no flag.
        ConversationNotFoundError: no conversation has this id.
        ImportStateError: the conversation's import bookkeeping was edited into a form no
            import writes (nothing written).
    """
    check_id(conversation_id)
    target = path_argument("path", path)
    check_flags(checkpoint=checkpoint, overwrite=overwrite)
    conversation = store.get_conversation(conversation_id)
    check_not_store_files([target], store.path)
    check_regular_targets([target])
    jsonl = target.suffix.lower() == ".jsonl"
    if checkpoint and jsonl:
        raise GeminiChatError(
            target,
            None,
            "a checkpoint is one JSON document (Gemini CLI saves it as checkpoint-<tag>.json), "
            "and a file whose name ends in .jsonl is read back as a session recording, line "
            "by line, so this one could not be imported back. Name it .json, or export a "
            "session. Nothing was written.",
        )
    if target.exists() and not overwrite:
        raise GeminiChatError(
            target,
            None,
            "already exists; pass overwrite to replace. Nothing was written.",
        )
    gemini = conversation.metadata.get("gemini")
    gemini = gemini if isinstance(gemini, dict) else {}
    until = imported_until(conversation, ORIGIN, target)
    imported = -1 if until is None else until
    records = store.source_records(conversation_id, origin=ORIGIN)
    if checkpoint:
        value: Any = _checkpoint(store, conversation, gemini, records, imported)
        counts = {"contents": len(value if isinstance(value, list) else value["history"])}
        if not counts["contents"]:
            # A checkpoint of no Contents is refused by the import: nothing to load.
            raise GeminiChatError(
                target,
                None,
                f"conversation {conversation_id!r} holds no messages, so a checkpoint of it "
                "would hold no Contents, and a checkpoint with nothing in it cannot be "
                "imported back. Export it as a session instead, or append a message first. "
                "Nothing was written.",
            )
        with os_errors("write the Gemini CLI checkpoint", target):
            target.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(target, value, indent=2)
        return ExportReport(conversation_id, (target,), (), counts)
    if gemini.get("kind") in (CHECKPOINT, CONTENTS):
        # A checkpoint's Contents are no session records: every message becomes one.
        session = _generated_records(store, conversation, -1)
    else:
        session = [as_written(r.data) for r in records if r.kind in SESSION_RECORD_KINDS]
        session += _generated_records(store, conversation, imported)
    metadata = _session_metadata(conversation, gemini, until, jsonl=jsonl)
    with os_errors("write the Gemini CLI session", target):
        target.parent.mkdir(parents=True, exist_ok=True)
        if jsonl:
            write_text_atomic(target, _jsonl(metadata, session))
        else:
            write_json_atomic(target, {**metadata, "messages": session}, indent=2)
    return ExportReport(conversation_id, (target,), (), {"records": len(session)})


def _session_metadata(
    conversation: Conversation, gemini: Mapping[str, Any], until: int | None, *, jsonl: bool
) -> dict[str, Any]:
    """The session's metadata: as imported, else made up; a JSONL file (or one made up)
    gets a ``sessionId`` and ``projectHash`` where it has none."""
    stored = gemini.get("session")
    project_hash = _project_hash(conversation, gemini)
    metadata: dict[str, Any] = (
        dict(stored)
        if isinstance(stored, dict)
        else {
            "sessionId": conversation.id,
            "projectHash": project_hash,
            "startTime": format_timestamp(conversation.created_ts),
        }
    )
    for key, value in (("sessionId", conversation.id), ("projectHash", project_hash)):
        # Gemini CLI's loader takes a JSONL file whose metadata lacks either (or holds an
        # empty one) for no session at all: it does not list, resume or load it. (A legacy
        # .json needs only the sessionId, so an imported one stays JSON-equal.)
        missing = not isinstance(metadata.get(key), str) or not metadata[key]
        if missing and (jsonl or not isinstance(stored, dict) or key == "sessionId"):
            metadata[key] = value
    if conversation.parent_id is not None and metadata.get("sessionId") != conversation.id:
        # A fork holds its parent's session metadata: written under the parent's id, the
        # file would be that session (Gemini CLI resumes one of the two, and importing it
        # would update the parent).
        metadata["sessionId"] = conversation.id
    forked = conversation.parent_id is not None
    if not isinstance(stored, dict) or until != conversation.last_ts or forked:
        # A fork made before 2026-12-05 kept the moment it copies up to as its clock, which
        # may be long before the fork was made (before the session began, for a fork of
        # nothing); it was updated then.
        metadata["lastUpdated"] = format_timestamp(
            max(conversation.last_ts, conversation.created_ts)
        )
    return metadata


PROJECT_HASH: Final = re.compile(r"[0-9a-f]{64}")
"""A project folder's name under ``~/.gemini/tmp`` before 0.29 (a short name since): the
SHA-256 of the project's root, which is what a session's ``projectHash`` holds."""


def _project_hash(conversation: Conversation, gemini: Mapping[str, Any]) -> str:
    """The ``projectHash`` of a session that had none: the project folder's hash when the
    imported file lay under one, else a SHA-256 of the conversation's id (Gemini CLI only
    needs it present; it does not compare it with the project it resumes in)."""
    source = gemini.get("file")
    folders = Path(source).parts[:-1] if isinstance(source, str) else ()
    found = [name for name in folders if PROJECT_HASH.fullmatch(name)]
    if found:
        return found[-1]
    return hashlib.sha256(conversation.id.encode("utf-8", "surrogatepass")).hexdigest()


def _jsonl(metadata: Mapping[str, Any], records: Sequence[Any]) -> str:
    """A session recording's JSONL text: the metadata record, the records, then the
    scratchpad as a ``$set`` record, as Gemini CLI appends it."""
    head = {k: v for k, v in metadata.items() if k != "memoryScratchpad"}
    lines = [json.dumps(head, ensure_ascii=False)]
    lines += [json.dumps(record, ensure_ascii=False) for record in records]
    if "memoryScratchpad" in metadata:
        lines.append(json.dumps({"$set": {"memoryScratchpad": metadata["memoryScratchpad"]}}))
    return "\n".join(lines) + "\n"


def _checkpoint(
    store: InteropStore,
    conversation: Conversation,
    gemini: Mapping[str, Any],
    records: Sequence[Any],
    until: int,
) -> Any:
    kind = gemini.get("kind")
    contents = [as_written(r.data) for r in records if r.kind.startswith("content:")]
    if kind in (CHECKPOINT, CONTENTS) and conversation.last_ts == until:
        history: list[Any] = contents
    else:
        view = build_view(store.messages(conversation.id), None, None)
        history = registry.render("gemini", view)
        if (
            view
            and view[-1]["role"] == "assistant"
            and history[-1]["parts"] == [{"text": DEFAULT_FINAL_USER_TEXT}]
        ):
            history = history[:-1]  # a saved chat may end with the model's answer
        if history and not _opens_with_context(history):
            history = [{"role": "user", "parts": [{"text": CONTEXT_STAND_IN}]}, *history]
    if kind == CONTENTS:
        return history
    extra = gemini.get("checkpoint") if kind == CHECKPOINT else None
    return {"history": history, **(extra if isinstance(extra, dict) else {})}


CONTEXT_STAND_IN: Final = (
    "<session_context>\nThis is the Gemini CLI. The environment context of this chat was not "
    "recorded; it was written from a contextstore history.\n</session_context>"
)
"""The first Content of a checkpoint written from a history that has no environment context.
Gemini CLI takes a checkpoint's first Content for that context: ``/resume resume`` (``/chat
resume``) shows the chat from the second on, so without it the first prompt went unseen."""


def _opens_with_context(history: Sequence[Mapping[str, Any]]) -> bool:
    """True when the first Content is Gemini CLI's environment context (its tagged form, or
    the untagged text of versions before the tag)."""
    if not history or history[0].get("role") != "user":
        return False
    parts = history[0].get("parts") or []
    text = parts[0].get("text") if parts and isinstance(parts[0], dict) else None
    return isinstance(text, str) and text.lstrip().startswith(CONTEXT_OPENINGS)


def _generated_records(
    store: InteropStore, conversation: Conversation, after: int
) -> list[dict[str, Any]]:
    """Session records for messages written in contextstore (after the import, if any)."""
    stored = store.messages(conversation.id)
    # A result Cline 3.5x wrote as a user text block answers its call here as in the view
    # (view rules, difference 10): in the call's ``result``, not as a user record's text.
    messages = [message for _, message in adopt_text_results(list(enumerate(stored)))]
    stamps = store.message_timestamps(conversation.id)
    new = [(i, m, ts) for i, (m, ts) in enumerate(zip(messages, stamps, strict=True)) if ts > after]
    if not new:
        return []
    records: list[dict[str, Any]] = []
    results = _results_by_call(messages)
    answered = _answered_requests(store.requests(conversation.id), stamps)
    for index, message, ts in new:
        record_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"contextstore:{conversation.id}:{index}"))
        base = {"id": record_id, "timestamp": format_timestamp(ts)}
        blocks = _blocks(message)
        texts = _record_parts(blocks)
        if message["role"] == "user":
            if texts:
                records.append({**base, "type": "user", **_user_content(texts)})
            continue
        calls = [
            {
                "id": b["id"],
                "name": b["name"],
                "args": b.get("input") or {},
                "result": results.get(b["id"], []),
                "status": _call_status(results.get(b["id"], [])),
                "timestamp": format_timestamp(ts),
            }
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        record: dict[str, Any] = {**base, "type": "gemini", "content": texts}
        if calls:
            record["toolCalls"] = calls
        request = answered.get(index)
        model = (request.model_id if request else None) or conversation.model_id
        if model:
            record["model"] = model
        if request is not None:
            record["tokens"] = _tokens(request)
        records.append(record)
    return records


def _user_content(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A generated user record's ``content``, written so that Gemini CLI's resume keeps it.

    Gemini CLI takes a user record whose text starts with ``/`` or ``?`` for a command and
    leaves it out of the model history (``isIgnoredUserContent``), so a prompt such as
    ``/etc/hosts is wrong`` vanished. It reads a part with a ``thought`` field as the label
    ``[Thought: ...]``, not as its text, and sends a part whose ``thought`` is false as the
    ordinary text it is; so the first part gets ``"thought": false`` (the model's text is
    unchanged), and ``displayContent`` the parts as they are, which its screen shows."""
    if not is_ignored_user_content(parts) or "text" not in parts[0]:
        return {"content": parts}
    if not "".join(str(p.get("text", "")) for p in parts).lstrip().startswith(("/", "?")):
        return {"content": parts}  # context Gemini CLI injects itself stays ignored
    return {"content": [{**parts[0], "thought": False}, *parts[1:]], "displayContent": parts}


def _call_status(result: Sequence[Mapping[str, Any]]) -> str:
    """A generated tool call's ``status``, as Gemini CLI's ``CoreToolCallStatus`` names it:
    ``cancelled`` for a call the history holds no result for (it never came back), ``error``
    for an error result, else ``success``."""
    if not result:
        return "cancelled"
    if any("error" in part["functionResponse"]["response"] for part in result):
        return "error"
    return "success"


def _answered_requests(
    requests: Sequence[RequestRecord], stamps: Sequence[int]
) -> dict[int, RequestRecord]:
    """The request each message answers, by the message's index: the newest request with
    usage recorded after the message before it (Gemini CLI keeps a request's usage on the
    record of the answer it produced; a retry that was answered by nothing has no record)."""
    found: dict[int, RequestRecord] = {}
    position = 0
    ordered = sorted(requests, key=lambda r: r.ts)
    for index, ts in enumerate(stamps):
        while position < len(ordered) and ordered[position].ts < ts:
            request = ordered[position]
            if request.tokens_in is not None or request.tokens_out is not None:
                found[index] = request
            position += 1
    return found


def _tokens(request: RequestRecord) -> dict[str, int]:
    """Gemini CLI's ``tokens`` for a request recorded here, so an import reads the same
    usage back: ``input`` counts the whole prompt (cache writes included: Gemini has none
    of its own), ``cached`` the part read from a cache."""
    cached = request.cache_reads or 0
    given = (request.tokens_in or 0) + (request.cache_writes or 0) + cached
    output = request.tokens_out or 0
    return {
        "input": given,
        "output": output,
        "cached": cached,
        "thoughts": 0,
        "tool": 0,
        "total": given + output,
    }


_RECORD_TYPES = frozenset({"text", "image", "document", *SERVER_BLOCK_TYPES})
"""Block types a generated record's ``content`` shows."""


def _record_parts(blocks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A record's ``content``: its text, images and documents as Gemini parts, and
    Anthropic's server tool blocks as the text parts the Gemini renderer sends for them
    (calls and results go in ``toolCalls``; thinking is not part of what a record says)."""
    parts = []
    for block in blocks:
        if block.get("type") in _RECORD_TYPES:
            part = content_part(block)
            if part is not None and part.get("text") != "":
                parts.append({k: v for k, v in part.items() if k != "thoughtSignature"})
    return parts


def as_written(record: Mapping[str, Any]) -> Any:
    """A stored record as Gemini CLI wrote it: the placeholder kept for one too large to
    keep (see :func:`~contextstore.interop.gemini_plan.plan_chat`) without its marker, so
    it is a record Gemini CLI loads, saying the record was left out."""
    if REFUSED_KEY not in record:
        return record
    return {key: value for key, value in record.items() if key != REFUSED_KEY}


def _blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    reason = refused_reason(message)
    if reason is not None:  # a stand-in: say what it stands in for
        return [{"type": "text", "text": left_out_text("session", reason)}]
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _results_by_call(messages: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """``functionResponse`` parts for every tool result, by the call's id, holding the text
    the Gemini renderer sends for it (search results and plain-text documents included)."""
    found: dict[str, list[Any]] = {}
    for message in messages:
        for block in _blocks(message):
            if block.get("type") != "tool_result":
                continue
            text = result_text(block)
            key = "error" if block.get("is_error") else "output"
            found[str(block.get("tool_use_id"))] = [
                {
                    "functionResponse": {
                        "id": block.get("tool_use_id"),
                        "name": "",
                        "response": {key: text},
                    }
                }
            ]
    calls = {
        b["id"]: b["name"] for m in messages for b in _blocks(m) if b.get("type") == "tool_use"
    }
    for call_id, parts in found.items():
        for part in parts:
            part["functionResponse"]["name"] = calls.get(call_id, "")
    return found
