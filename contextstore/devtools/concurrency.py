"""Concurrent workloads: writers appending tool-call pairs, readers checking every render.

Each writer appends ``pairs`` transactions, each one ``append_many`` of an assistant
``tool_use`` and the user ``tool_result`` answering it. A render that saw half of such a
transaction would show an odd message count, or a call whose result is the view's
``result missing`` placeholder; readers look for exactly that, so a reader that never
complains proves that each render was one consistent snapshot.

The same functions run on threads sharing one store (:func:`write_pairs`,
:func:`read_until`) and in processes started with ``spawn`` (:func:`run_processes`), each
process opening its own store on the same location.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextstore.store import ContextStore

TASK = "<task>concurrency</task>"


def pair(writer: str, number: int) -> list[dict[str, Any]]:
    """Writer ``writer``'s ``number``-th transaction: a tool call and its result."""
    tag = f"{writer}:{number}"
    call_id = f"toolu_{writer}_{number}"
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": tag},
                {"type": "tool_use", "id": call_id, "name": "read_file", "input": {"tag": tag}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": tag}],
        },
    ]


@dataclass
class WriterReport:
    """What one writer committed: the indices of each of its pairs, in order."""

    writer: str
    conversation_id: str
    indices: list[tuple[int, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class ReaderReport:
    """How many renders a reader checked, the largest it saw, and what was wrong."""

    renders: int = 0
    largest: int = 0
    problems: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def write_pairs(
    store: ContextStore,
    conversation_id: str,
    writer: str,
    pairs: int,
    *,
    rollback_to: str | None = None,
) -> WriterReport:
    """Append ``pairs`` pair transactions; with ``rollback_to``, roll back after each one.

    Errors are caught and reported (a busy database must never surface: that is the point).
    """
    report = WriterReport(writer, conversation_id)
    for number in range(pairs):
        try:
            written = store.append_many(conversation_id, pair(writer, number))
            report.indices.append((written[0].index, written[1].index))
            if rollback_to is not None:
                store.rollback(conversation_id, rollback_to)
        except Exception as exc:
            report.errors.append(f"{type(exc).__name__}: {exc}")
            break
    return report


def check_view(view: Sequence[Mapping[str, Any]], *, base: int = 1) -> list[str]:
    """Problems in a render of a pairs-only conversation (``base`` messages precede pairs)."""
    problems: list[str] = []
    if (len(view) - base) % 2:
        problems.append(f"{len(view)} messages: a pair transaction was split")
    for position in range(base, len(view) - 1, 2):
        call, result = view[position], view[position + 1]
        call_blocks = call.get("content")
        result_blocks = result.get("content")
        if not isinstance(call_blocks, list) or not isinstance(result_blocks, list):
            problems.append(f"message {position} or {position + 1} has no content blocks")
            continue
        tag = call_blocks[0].get("text") if call_blocks else None
        answer = result_blocks[0] if result_blocks else {}
        if (
            call.get("role") != "assistant"
            or result.get("role") != "user"
            or answer.get("type") != "tool_result"
            or answer.get("content") != tag
        ):
            problems.append(f"messages {position}-{position + 1} are not one pair: {call} {result}")
    return problems


def read_until(
    store: ContextStore,
    conversation_ids: Sequence[str],
    stop: Callable[[], bool],
    *,
    base: int = 1,
    minimum: int = 5,
) -> ReaderReport:
    """Render each conversation in turn until ``stop()`` (and at least ``minimum`` rounds)."""
    report = ReaderReport()
    rounds = 0
    while rounds < minimum or not stop():
        rounds += 1
        for conversation_id in conversation_ids:
            try:
                view = store.render(conversation_id)
            except Exception as exc:
                report.errors.append(f"{type(exc).__name__}: {exc}")
                return report
            report.renders += 1
            report.largest = max(report.largest, len(view))
            report.problems.extend(check_view(view, base=base))
    return report


def run_threads(
    store: ContextStore,
    plan: Sequence[tuple[str, str, int]],
    readers: Sequence[Sequence[str]],
) -> tuple[list[WriterReport], list[ReaderReport]]:
    """Writers ``(conversation_id, writer, pairs)`` and readers on threads sharing ``store``."""
    writer_reports: list[WriterReport] = []
    reader_reports: list[ReaderReport] = []
    done = threading.Event()

    def writer_main(conversation_id: str, writer: str, pairs: int) -> None:
        writer_reports.append(write_pairs(store, conversation_id, writer, pairs))

    def reader_main(conversation_ids: Sequence[str]) -> None:
        reader_reports.append(read_until(store, conversation_ids, done.is_set))

    writers = [threading.Thread(target=writer_main, args=item) for item in plan]
    reader_threads = [threading.Thread(target=reader_main, args=(ids,)) for ids in readers]
    for thread in [*reader_threads, *writers]:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    for thread in reader_threads:
        thread.join()
    return writer_reports, reader_reports


# -- processes ----------------------------------------------------------------------------


def _open(location: str, engine_kwargs: dict[str, Any] | None) -> ContextStore:
    return ContextStore.open(location, engine_kwargs=engine_kwargs)


def _writer_process(
    location: str,
    engine_kwargs: dict[str, Any] | None,
    task: tuple[str, str, int],
    rollback_to: str | None,
    start: Any,
    results: Any,
) -> None:
    conversation_id, writer, pairs = task
    try:
        with _open(location, engine_kwargs) as store:
            start.wait()
            report = write_pairs(store, conversation_id, writer, pairs, rollback_to=rollback_to)
    except Exception:
        report = WriterReport(writer, conversation_id, errors=[traceback.format_exc()])
    results.put(("writer", report))


def _reader_process(
    location: str,
    engine_kwargs: dict[str, Any] | None,
    conversation_ids: list[str],
    base: int,
    start: Any,
    stop: Any,
    results: Any,
) -> None:
    try:
        with _open(location, engine_kwargs) as store:
            start.wait()
            report = read_until(store, conversation_ids, stop.is_set, base=base)
    except Exception:
        report = ReaderReport(errors=[traceback.format_exc()])
    results.put(("reader", report))


def _opener_process(location: str, number: int, start: Any, results: Any) -> None:
    start.wait()
    try:
        with _open(location, None) as store:
            conversation = store.create_conversation(title=f"opener {number}")
            store.append(conversation.id, "user", f"opened by {number}")
        results.put(("ok", conversation.id))
    except Exception:
        results.put(("error", traceback.format_exc()))


def open_simultaneously(
    location: str, count: int, *, timeout: float = 60.0
) -> list[tuple[str, str]]:
    """``count`` processes open the same (typically new) database at the same instant.

    Each creates a conversation and appends to it; returns ``("ok", conversation_id)`` or
    ``("error", traceback)`` per process. Creating the file, switching it to WAL and
    migrating it must all tolerate the race.
    """
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    processes = [
        context.Process(target=_opener_process, args=(location, n, start, results))
        for n in range(count)
    ]
    for process in processes:
        process.start()
    time.sleep(1.5)  # every process has imported contextstore and waits on the event
    start.set()
    outcomes: list[tuple[str, str]] = []
    try:
        for _ in processes:
            outcomes.append(results.get(timeout=timeout))
    except queue_module.Empty:
        outcomes.append(("error", "timed out"))
    for process in processes:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join()
    return outcomes


def run_processes(
    location: str,
    plan: Sequence[tuple[str, str, int]],
    readers: Sequence[Sequence[str]],
    *,
    engine_kwargs: dict[str, Any] | None = None,
    rollback_to: str | None = None,
    base: int = 1,
    timeout: float = 120.0,
) -> tuple[list[WriterReport], list[ReaderReport]]:
    """Writers and readers in separate ``spawn``-ed processes, each with its own store.

    Every process opens its store first, then all start together (a shared event), so the
    work overlaps instead of being serialised by process start-up.

    Args:
        location: the database every process opens (a file path or a URL).
        plan: one ``(conversation_id, writer, pairs)`` per writer process.
        readers: the conversations each reader process renders, one list per reader.
        engine_kwargs: passed to every ``ContextStore.open`` (e.g. a PostgreSQL search_path).
        rollback_to: a checkpoint label writers roll back to after each pair.
        base: how many messages precede the pairs in each conversation.
        timeout: seconds to wait for every report.
    """
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    stop = context.Event()
    results = context.Queue()
    writers = [
        context.Process(
            target=_writer_process,
            args=(location, engine_kwargs, task, rollback_to, start, results),
        )
        for task in plan
    ]
    reader_processes = [
        context.Process(
            target=_reader_process,
            args=(location, engine_kwargs, list(ids), base, start, stop, results),
        )
        for ids in readers
    ]
    processes = [*writers, *reader_processes]
    for process in processes:
        process.start()
    time.sleep(1.0)  # let every process import and open its store
    start.set()
    writer_reports: list[WriterReport] = []
    reader_reports: list[ReaderReport] = []
    deadline = time.monotonic() + timeout
    try:
        while len(writer_reports) < len(writers):
            kind, report = results.get(timeout=max(deadline - time.monotonic(), 0.1))
            (writer_reports if kind == "writer" else reader_reports).append(report)
        stop.set()
        while len(reader_reports) < len(reader_processes):
            kind, report = results.get(timeout=max(deadline - time.monotonic(), 0.1))
            (writer_reports if kind == "writer" else reader_reports).append(report)
    except queue_module.Empty:
        pass
    finally:
        stop.set()
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
    return writer_reports, reader_reports
