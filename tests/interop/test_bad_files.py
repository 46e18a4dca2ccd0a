"""Damaged and odd files an import meets: each keeps what can be read, says what was not,
and never ends in an internal error, a hang, or a refusal that names no file.

Found by feeding variants of the real agents' files to ``contextstore import``; every case
here is a small synthetic file in the shape the real ones have.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contextstore import ContextStore
from contextstore.interop import import_cline, import_gemini
from tests.interop.cline_factory import story

SESSION_ID = "5e55e55e-0000-4000-8000-0000000000b4"
SESSION_NAME = "session-2026-08-04T10-00-5e55e55e.jsonl"


def _session_lines(path: Path, *records: dict[str, object]) -> Path:
    """A JSONL session recording: the metadata record, then ``records``."""
    head = {"sessionId": SESSION_ID, "projectHash": "p", "startTime": "2026-08-04T10:00:00.000Z"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in (head, *records)), encoding="utf-8")
    return path


def _user(record_id: str, text: str, second: int) -> dict[str, object]:
    return {
        "id": record_id,
        "timestamp": f"2026-08-04T10:00:{second:02d}.000Z",
        "type": "user",
        "content": text,
    }


@contextmanager
def _fed_if_opened(fifo: Path, text: str) -> Iterator[None]:
    """While the block runs, write ``text`` into ``fifo`` if anything opens it to read, so
    that a reader that should have left the pipe alone gets a chat instead of hanging."""
    stop = threading.Event()

    def feed() -> None:
        while not stop.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader yet
                stop.wait(0.01)
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as pipe:
                pipe.write(text)
            return

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield
    finally:
        stop.set()
        feeder.join()


# -- files that are not files --------------------------------------------------------------


def test_a_pipe_among_the_chats_of_a_folder_is_skipped_with_a_note_never_read(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    # Reading a pipe blocks until something writes to it: a folder import hung for good.
    chats = tmp_path / "project" / "chats"
    _session_lines(chats / SESSION_NAME, _user("u1", "hello", 1))
    fifo = chats / "session-2026-08-04T11-00-0000aaaa.jsonl"
    os.mkfifo(fifo)
    other = json.dumps({"sessionId": "from-the-pipe", "projectHash": "p"}) + "\n"
    with _fed_if_opened(fifo, other + json.dumps(_user("u9", "piped", 5)) + "\n"):
        report = import_gemini(memory_store, tmp_path / "project")
    by_path = {Path(item.path).name: item for item in report.items}
    assert by_path[SESSION_NAME].status == "imported"
    piped = by_path[fifo.name]
    assert piped.status == "skipped"
    assert [n.reason for n in piped.skipped] == [
        "is not a regular file (a pipe, a device or a socket); it was not read."
    ]
    assert [c.id for c in memory_store.list_conversations()] == [SESSION_ID]


def test_a_task_file_that_is_a_pipe_is_named_as_one_and_left_alone(
    memory_store: ContextStore, tmp_path: Path
) -> None:
    folder = story(3).write(tmp_path / "tasks" / "1760000000000")
    (folder / "api_conversation_history.json").unlink()
    os.mkfifo(folder / "api_conversation_history.json")
    os.mkfifo(folder / "context_history.json")
    report = import_cline(memory_store, folder)
    item = report.items[0]
    assert item.status == "imported"
    reasons = {Path(n.file).name: n.reason for n in item.skipped}
    assert reasons["api_conversation_history.json"].startswith(
        "is not a regular file (a pipe, a device or a socket): the task's UI messages"
    )
    assert reasons["context_history.json"] == (
        "is not a regular file (a pipe, a device or a socket); it was left out."
    )
