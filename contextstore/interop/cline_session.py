"""Cline 4 sessions as plain values: finding session folders, reading and checking their files.

Cline 4 (the extension and CLI rebuilt on Cline's SDK) keeps each task as a session in
``~/.cline/data/sessions/<sessionId>/``:

* ``<sessionId>.json``: the manifest (``version`` 1, ``session_id``, ``started_at``,
  ``ended_at``, ``status``, ``provider``, ``model``, ``cwd``, ``metadata`` with the
  ``title`` and the ``checkpoint`` history: ``{ref, createdAt, runCount, kind}``);
* ``<sessionId>.messages.json``: the whole transcript (``version`` 1, ``updated_at``,
  ``agent``, ``sessionId``, ``origin``, ``messages``, ``system_prompt``); each message has
  ``id``, ``role``, ``content``, ``ts`` and, on a model's turn, ``modelInfo`` and
  ``metrics`` (that request's tokens and cost);
* ``<sessionId>.compaction.json``, when the context was compacted: the messages the model
  is sent in place of the first ``source_message_count`` of the transcript;
* ``<agentId>.messages.json`` (and ``<agentId>__<teamTaskId>.messages.json``): the
  transcripts of the session's subagents and teammates, each a session of its own
  (``<sessionId>__<agentId>``) with no manifest.

Reading recovers what a damaged file holds, with notes, as for a task; a manifest or
transcript of a version other than :data:`SESSION_VERSION` is refused. Nothing here touches
a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from contextstore.core.content import normalize_message_dict
from contextstore.core.errors import InvalidInputError
from contextstore.interop.cline_session_blocks import store_message
from contextstore.interop.errors import ClineSessionError
from contextstore.interop.files import Folder, Note, json_kind, nul_note, without_nul
from contextstore.interop.stand_in import refused_stand_in

SESSIONS_DIR: Final = "sessions"
"""The folder of Cline's data folder (``~/.cline/data``) holding one folder per session."""
MESSAGES_SUFFIX: Final = ".messages.json"
COMPACTION_SUFFIX: Final = ".compaction.json"
SESSION_VERSION: Final = 1
"""The version of the manifest, transcript and compaction files this module reads."""


def manifest_file(session_id: str) -> str:
    """The name of a session's manifest."""
    return f"{session_id}.json"


def messages_file(session_id: str) -> str:
    """The name of a session's transcript."""
    return f"{session_id}{MESSAGES_SUFFIX}"


def compaction_file(session_id: str) -> str:
    """The name of a session's compaction state."""
    return f"{session_id}{COMPACTION_SUFFIX}"


@dataclass(frozen=True)
class ClineSession:
    """What a session folder holds, read and checked.

    Attributes:
        directory: the ``sessions/<sessionId>`` folder.
        session_id: the folder's name (the session's id).
        manifest: the manifest, None when there is none to read.
        transcript: the transcript's fields other than ``messages``.
        messages: the messages in the store's shape, each in its place (one the store
            refuses is a stand-in keeping the original, noted).
        compaction: the compaction state, None when there is none (or it is unusable,
            noted, as Cline itself ignores it).
        files: the session's own files that were there.
        transcripts: the other transcripts in the folder (subagents, teammates).
        notes: what was left out or repaired.
        transcript_file: the transcript's name (a subagent's is not its session id's).
        parent: for a subagent's or teammate's transcript, the session it ran in.
        sizes: each message's size as the store measures it.
    """

    directory: Path
    session_id: str
    manifest: dict[str, Any] | None
    transcript: dict[str, Any]
    messages: list[dict[str, Any]]
    compaction: dict[str, Any] | None
    files: tuple[str, ...]
    transcripts: tuple[str, ...] = ()
    notes: list[Note] = field(default_factory=list)
    transcript_file: str = ""
    parent: str | None = None
    sizes: list[int] = field(default_factory=list)


def is_session_dir(path: Path) -> bool:
    """True when ``path`` is a folder holding a session's manifest or transcript."""
    name = path.name
    return path.is_dir() and any(
        (path / file).is_file() for file in (messages_file(name), manifest_file(name))
    )


def session_dirs_in(path: Path, folder: Folder) -> list[Path]:
    """The session folders directly in ``path`` (Cline's ``sessions/``, or a copy of some
    of them), by name (session ids start with their creation time)."""
    if not path.is_dir():
        return []
    found = []
    for child in sorted(path.iterdir()):
        if is_session_dir(child):
            found.append(folder.check(child) if child.is_symlink() else child)
    return found


def subagent_transcripts(directory: Path, folder: Folder) -> list[Path]:
    """The transcripts of a session folder's subagents and teammates, by name."""
    own = messages_file(directory.name)
    return [
        folder.check(path) if path.is_symlink() else path
        for path in sorted(directory.iterdir())
        if path.name.endswith(MESSAGES_SUFFIX) and path.name != own and path.is_file()
    ]


def session_file_folder(path: Path) -> Path | None:
    """The session folder ``path`` is one of the files of (its manifest, transcript or
    compaction state), if it is one."""
    name = path.name
    session_id = path.parent.name
    own = (manifest_file(session_id), messages_file(session_id), compaction_file(session_id))
    if name in own and is_session_dir(path.parent):
        return path.parent
    return None


def _version_problem(value: Mapping[str, Any], what: str) -> str | None:
    version = value.get("version")
    if version == SESSION_VERSION and not isinstance(version, bool):
        return None
    return (
        f"is a Cline session {what} of version {version!r:.40}; this contextstore reads "
        f"version {SESSION_VERSION}. Upgrade contextstore, or import the task from a "
        "Cline that writes this version. Nothing was imported."
    )


def read_session(directory: Path, folder: Folder) -> ClineSession:
    """Read a session folder, recovering what damaged files still hold.

    Raises:
        ClineSessionError: the manifest or transcript is of another version, the transcript
            holds no list of messages, or the folder holds nothing readable.
        UnsafeInputError: a file is a link out of the folder, too large or nested too deep.
    """
    notes: list[Note] = []
    session_id = directory.name
    names = (manifest_file(session_id), messages_file(session_id), compaction_file(session_id))
    files = tuple(name for name in names if folder.is_file(directory / name))
    manifest = _read_manifest(directory / names[0], folder, notes) if names[0] in files else None
    transcript: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    sizes: list[int] = []
    if names[1] in files:
        transcript, messages, sizes = _read_transcript(directory / names[1], folder, notes)
    elif manifest is not None:
        notes.append(
            Note(
                str(directory / names[1]),
                None,
                "is not there: the session's manifest was imported without its messages.",
            )
        )
    if manifest is None and not messages:
        raise ClineSessionError(
            directory,
            None,
            "has no manifest or message that can be read; there is nothing to import."
            + (f" ({'; '.join(map(str, notes))})" if notes else ""),
        )
    compaction = None
    if names[2] in files:
        compaction = _read_compaction(directory / names[2], folder, notes, len(messages))
    transcripts = tuple(p.name for p in subagent_transcripts(directory, folder))
    return ClineSession(
        directory,
        session_id,
        manifest,
        transcript,
        messages,
        compaction,
        files,
        transcripts,
        notes,
        transcript_file=names[1],
        sizes=sizes,
    )


def read_subagent(path: Path, folder: Folder) -> ClineSession:
    """Read the transcript of a session's subagent or teammate (``<agentId>.messages.json``
    in the session's folder), a session of its own with no manifest.

    Raises:
        ClineSessionError: it is of another version, holds no list of messages, or none.
        UnsafeInputError: it is a link out of the folder, too large or nested too deep.
    """
    notes: list[Note] = []
    transcript, messages, sizes = _read_transcript(path, folder, notes)
    if not messages:
        raise ClineSessionError(
            path, None, "holds no message of the subagent that can be read; nothing to import."
        )
    root = path.parent.name
    named = transcript.get("sessionId")
    stem = path.name.removesuffix(MESSAGES_SUFFIX)
    session_id = named if isinstance(named, str) and named else f"{root}__{stem}"
    return ClineSession(
        path.parent,
        session_id,
        None,
        transcript,
        messages,
        None,
        (path.name,),
        notes=notes,
        transcript_file=path.name,
        parent=root,
        sizes=sizes,
    )


def _storable(value: Any, path: Path, position: str | None, notes: list[Note]) -> Any:
    value, count = without_nul(value)
    if count:
        notes.append(nul_note(path, position, count))
    return value


def _read_manifest(path: Path, folder: Folder, notes: list[Note]) -> dict[str, Any] | None:
    value = folder.read_json(path, notes)
    if value is None:
        return None
    if not isinstance(value, dict):
        notes.append(Note(str(path), None, f"holds {json_kind(value)}, not a session manifest."))
        return None
    problem = _version_problem(value, "manifest")
    if problem:
        raise ClineSessionError(path, "version", problem)
    manifest: dict[str, Any] = _storable(value, path, None, notes)
    return manifest


def _read_transcript(
    path: Path, folder: Folder, notes: list[Note]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[int]]:
    """The transcript's other fields, its messages and their sizes."""
    value = folder.read_json(path, notes, keep_depth=1)
    if value is None:
        return {}, [], []
    if isinstance(value, list):  # the bare list early SDK versions wrote, which Cline reads
        return {}, *_messages(value, path, notes)
    if not isinstance(value, dict) or not isinstance(value.get("messages"), list):
        raise ClineSessionError(
            path,
            None,
            f"holds {json_kind(value)} without a list of messages, not a Cline session "
            "transcript; if Cline wrote it, it is damaged: import a copy Cline wrote whole. "
            "Nothing was imported.",
        )
    problem = _version_problem(value, "transcript")
    if problem:
        raise ClineSessionError(path, "version", problem)
    header = {k: v for k, v in value.items() if k != "messages"}
    transcript: dict[str, Any] = _storable(header, path, None, notes)
    return transcript, *_messages(value["messages"], path, notes)


def _messages(
    found: list[Any], path: Path, notes: list[Note]
) -> tuple[list[dict[str, Any]], list[int]]:
    """Every message in the store's shape, and its size; one the store refuses becomes a
    stand-in in its place."""
    kept: list[dict[str, Any]] = []
    sizes: list[int] = []
    replaced, first = 0, None
    for idx, message in enumerate(found):
        where = f"messages[{idx}]"
        if isinstance(message, dict):
            fields, count = without_nul({k: v for k, v in message.items() if k != "content"})
            if count:
                first, replaced = first or where, replaced + count
                message = {**fields, "content": message.get("content")}
        try:
            if not isinstance(message, dict):
                raise InvalidInputError(f"{where} is {json_kind(message)}, not a message.")
            converted = store_message(message)
            size = normalize_message_dict(converted).json_size()
        except (InvalidInputError, ValueError) as exc:
            notes.append(
                Note(
                    str(path),
                    where,
                    f"{exc} The store cannot hold this message: it was kept in its place "
                    "with an empty text as its content, which renders leave out, so that "
                    "the messages after it keep their places.",
                )
            )
            previous = kept[-1]["role"] if kept else None
            converted = refused_stand_in(message, str(exc), previous)
            size = normalize_message_dict(converted).json_size()
        kept.append(converted)
        sizes.append(size)
    if replaced:
        notes.append(nul_note(path, first, replaced))
    return kept, sizes


def _read_compaction(
    path: Path, folder: Folder, notes: list[Note], count: int
) -> dict[str, Any] | None:
    """The compaction state, or None with a note when Cline would not use it either (of
    another version, damaged, or counting more messages than the transcript holds)."""
    value = folder.read_json(path, notes, keep_depth=1)
    if value is None:
        return None
    problem = None
    if not isinstance(value, dict):
        problem = f"holds {json_kind(value)}, not a compaction state"
    elif _version_problem(value, "compaction state"):
        problem = f"is of version {value.get('version')!r:.40}, not {SESSION_VERSION}"
    else:
        source = value.get("source_message_count")
        if not isinstance(source, int) or isinstance(source, bool) or source < 0:
            problem = "has no usable source_message_count"
        elif not isinstance(value.get("messages"), list):
            problem = "has no list of messages"
        elif source > count:
            problem = (
                f"counts {source} messages of the transcript, which holds {count} (it is "
                "older or newer than the transcript)"
            )
    if problem:
        notes.append(
            Note(
                str(path),
                None,
                f"{problem}; Cline ignores such a compaction state, and so does the import "
                "(the transcript, which holds every message, was imported).",
            )
        )
        return None
    state: dict[str, Any] = _storable(value, path, None, notes)
    return state
