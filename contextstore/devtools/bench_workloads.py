"""The benchmark's workloads: each builds one lane per subject on the same messages.

A workload makes its subjects (the floor, contextstore, the installed peers) through the
run's :class:`~contextstore.devtools.bench_runner.Context`, loads them with the same
history, and records the samples :func:`~contextstore.devtools.bench_runner.interleave`
takes of their lanes. A sample is seconds per unit (per message for appends, per
operation otherwise); ``disk``, ``memory`` and ``pages`` record bytes instead.
"""

from __future__ import annotations

import multiprocessing
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contextstore.core.overlays import Message
from contextstore.devtools import bench_data
from contextstore.devtools.bench_runner import Context, Lane, Measurement, interleave
from contextstore.devtools.bench_subjects import (
    CONTEXTSTORE,
    FLOOR_POSTGRES,
    FLOOR_SQLITE,
    ContextStoreSubject,
    FloorPostgres,
    FloorSqlite,
    LayoutFloor,
    Subject,
)
from contextstore.processors.pipeline import default_pipeline
from contextstore.storage import engine

BATCH = 1_000
"""Messages per transaction in ``append_batch``, and messages a rollback removes."""

SLOW_PEER_LIMIT = 10_000
"""Peers that rewrite the whole history per message are not run above this size."""


def _slow(subject: Subject, size: int) -> bool:
    return (
        subject.name not in (FLOOR_SQLITE, FLOOR_POSTGRES, CONTEXTSTORE) and size > SLOW_PEER_LIMIT
    )


def _note_slow(context: Context, subject: Subject, size: int) -> None:
    reason = f"{subject.name} skipped at {size:,} messages (it rewrites the whole history)"
    if reason not in context.skipped:
        context.skipped.append(reason)


def append_workload(context: Context, size: int, backend: str) -> None:
    """Durable appends (one transaction per message) onto a conversation of ``size``, and
    the bytes each subject then keeps on disk."""
    folder = context.scratch(f"append-{size}-{backend}")
    subjects: list[Subject] = [
        context.floor(backend, folder),
        context.contextstore(backend, folder),
    ]
    subjects += context.peers(backend, folder, size)
    held: dict[str, list[Message]] = {}
    lanes: list[Lane] = []
    for subject in subjects:
        if _slow(subject, size):
            _note_slow(context, subject, size)
            continue
        history = bench_data.conversation(size, final_call=True)
        subject.load(history)
        held[subject.name] = history
        chunk = context.settings.chunk
        if subject.name not in (FLOOR_SQLITE, FLOOR_POSTGRES, CONTEXTSTORE) and size >= 10_000:
            chunk = max(2, chunk // 10)
        feed = _Feed(history, chunk)
        lanes.append(Lane(subject.name, _appender(subject, feed), feed.make))
    samples = interleave(lanes, context.settings.rounds)
    context.record("append", size, backend, lanes, samples, "s/message")
    if "disk" not in context.settings.workloads or backend != "sqlite":
        return
    by_name = {s.name: s for s in subjects}
    disk = []
    for lane in lanes:
        content = bench_data.content_bytes(held[lane.subject])
        stored = by_name[lane.subject].file_bytes()
        disk.append(Measurement("disk", size, backend, lane.subject, "bytes", [float(stored)]))
        disk[-1].ratio = stored / content
        disk[-1].note = f"{stored:,} bytes for {content:,} bytes of message JSON"
    context.measurements.extend(disk)


class _Feed:
    """A lane's next messages, made by :meth:`make` before its timed step: making them costs
    50-70 us a message, more than the floor's own work on a batch, so made inside the step
    it would weigh in every subject's time alike and pull every ratio towards 1.

    The history and each step's messages end on a tool call, which the next step's first
    message answers: every result answers a call, as in an agent's history (a step used to
    begin with a result answering no call, which contextstore looked up in the store)."""

    def __init__(self, history: list[Message], count: int) -> None:
        self.history = history
        self.count = count
        self.fresh: list[Message] = []

    def make(self) -> None:
        self.fresh = bench_data.conversation(self.count, start=len(self.history), final_call=True)

    def take(self) -> list[Message]:
        """The messages made last (the history grows by them)."""
        fresh, self.fresh = self.fresh, []
        self.history.extend(fresh)
        return fresh


def _appender(subject: Subject, feed: _Feed) -> Callable[[], int]:
    def step() -> int:
        fresh = feed.take()
        for message in fresh:
            subject.append_one(message)
        return len(fresh)

    return step


def append_batch_workload(context: Context, size: int, backend: str) -> None:
    """Appends of ``BATCH`` messages per transaction onto a conversation of ``size``."""
    folder = context.scratch(f"batch-{size}-{backend}")
    subjects: list[Subject] = [
        context.floor(backend, folder),
        context.contextstore(backend, folder),
    ]
    subjects += [p for p in context.peers(backend, folder, size) if not _slow(p, size)]
    lanes = []
    for subject in subjects:
        history = bench_data.conversation(size, final_call=True)
        subject.load(history)
        feed = _Feed(history, BATCH)
        lanes.append(Lane(subject.name, _batcher(subject, feed), feed.make))
    rounds = max(3, context.settings.rounds // 2)
    context.record("append_batch", size, backend, lanes, interleave(lanes, rounds), "s/message")


def _batcher(subject: Subject, feed: _Feed) -> Callable[[], int]:
    def step() -> int:
        fresh = feed.take()
        subject.append_batch(fresh)
        return len(fresh)

    return step


def _loaded_pair(
    context: Context, label: str, size: int, backend: str
) -> tuple[Path, FloorSqlite | FloorPostgres, ContextStoreSubject, list[Message]]:
    """A new scratch folder with the floor and contextstore in it, both loaded with the
    same conversation of ``size``; returns the folder, the two subjects and the history."""
    folder = context.scratch(f"{label}-{size}-{backend}")
    floor = context.floor(backend, folder)
    ours = context.contextstore(backend, folder)
    history = bench_data.conversation(size)
    floor.load(history)
    ours.load(history)
    return folder, floor, ours, history


def _render_fixture(
    context: Context, size: int, backend: str
) -> tuple[FloorSqlite | FloorPostgres, ContextStoreSubject, list[Subject], str]:
    """A conversation of ``size`` with its first half hidden and a fifth of its blocks
    rewritten, on the floor (which reads the same visible rows) and on contextstore."""
    folder, floor, ours, history = _loaded_pair(context, "render", size, backend)
    end = size // 2 - 1 if (size // 2 - 1) % 2 == 1 else size // 2 - 2
    floor.visible_after = end
    store = ours.store
    store.set_deleted_range(ours.conversation_id, end, keep="half", reason="bench")
    targets = [i for i in range(end + 1, size) if i % 2 == 0][: size // 5]
    with store.transaction():
        for idx in targets:
            store.add_context_update(
                ours.conversation_id, idx, 0, f"[trimmed result of message {idx}]", source="bench"
            )
    peers = [p for p in context.peers(backend, folder, size) if not _slow(p, size)]
    for peer in peers:
        peer.load(history)
    note = f"{size - end + 1:,} visible of {size:,}, {len(targets):,} rewritten blocks"
    return floor, ours, peers, note


def render_workloads(context: Context, size: int, backend: str) -> None:
    """Uncached renders (no pipeline, then default masking), prepares, and the memory a
    render takes, on one fixture."""
    wanted = context.settings.workloads
    floor, ours, peers, note = _render_fixture(context, size, backend)
    store, cid = ours.store, ours.conversation_id
    masking = default_pipeline()
    peer_note = {p.name: "reads the whole history (no cut, no rewrites)" for p in peers}
    if "render" in wanted:
        lanes = [Lane(floor.name, _once(floor.read)), Lane(CONTEXTSTORE, _once(ours.read))]
        lanes += [Lane(p.name, _once(p.read)) for p in peers]
        found = context.record(
            "render",
            size,
            backend,
            lanes,
            interleave(lanes, context.settings.rounds),
            "s/render",
            {**peer_note, CONTEXTSTORE: note},
        )
        del found

    def masked() -> int:
        store.render_cache.clear()
        store.render(cid, pipeline=masking)
        return 1

    if "render_masked" in wanted:
        lanes = [Lane(floor.name, _once(floor.read)), Lane(CONTEXTSTORE, masked)]
        context.record(
            "render_masked",
            size,
            backend,
            lanes,
            interleave(lanes, context.settings.rounds),
            "s/render",
            {CONTEXTSTORE: "default pipeline (secret masking)"},
        )
    if "prepare" in wanted:
        prepared: list[int | None] = []

        def prepare() -> int:
            prepared.append(store.prepare_request(cid, pipeline=masking).request_id)
            return 1

        def agent_turn() -> None:
            # What an agent does between two prepares, untimed: record the last request's
            # usage, append the model's answer and the tool's result.
            if prepared:
                store.record_request(cid, request_id=prepared.pop(), tokens_in=1_000, tokens_out=50)
            store.append_many(cid, ours_turns.next())

        floor_turns, ours_turns = _Turns(size), _Turns(size)
        lanes = [
            Lane(floor.name, _once(floor.read), lambda: floor.append_batch(floor_turns.next())),
            Lane(CONTEXTSTORE, prepare, agent_turn),
        ]
        context.record(
            "prepare",
            size,
            backend,
            lanes,
            interleave(lanes, context.settings.rounds),
            "s/prepare",
            {
                CONTEXTSTORE: "a turn appended and usage recorded before each (untimed); "
                "default pipeline, anthropic payload, request row"
            },
        )
    if "memory" in wanted:
        floor_peak = _peak_bytes(floor.read)
        ours_peak = _peak_bytes(ours.read)
        cached = store.render_cache.bytes
        for subject, peak in ((floor.name, floor_peak), (CONTEXTSTORE, ours_peak)):
            measurement = Measurement("memory", size, backend, subject, "bytes", [float(peak)])
            measurement.ratio = peak / floor_peak
            context.measurements.append(measurement)
        context.measurements[-1].note = f"peak traced bytes of one render; cache holds {cached:,}"


class _Turns:
    """The turns an agent appends to the benchmark's conversation of ``size`` messages (which
    ends on the model's last answer): a user message first, then a tool call and its result
    per turn, so that the conversation always ends on a message that can be sent."""

    def __init__(self, size: int) -> None:
        self.position = size

    def next(self) -> list[Message]:
        """The next turn's messages."""
        if self.position == 0 or self.position % 2 == 1:
            fresh = bench_data.conversation(2, start=self.position)
        else:
            fresh = [{"role": "user", "content": [{"type": "text", "text": "Continue."}]}]
        self.position += len(fresh)
        return fresh


def _once(read: Callable[[], int]) -> Callable[[], int]:
    """A read as one operation (``read`` returns how many messages it read)."""

    def step() -> int:
        read()
        return 1

    return step


def _peak_bytes(work: Callable[[], int]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def rollback_workloads(context: Context, size: int, backend: str) -> None:
    """Rolling back the last ``BATCH`` messages of ``size + BATCH``: archived, then purged."""
    _folder, floor, ours, _history = _loaded_pair(context, "rollback", size, backend)
    tail = bench_data.conversation(BATCH, start=size)
    store, cid = ours.store, ours.conversation_id

    def refill_floor() -> None:
        if floor.next_idx == size:
            floor.append_batch(tail)

    def refill_ours() -> None:
        store.checkpoint(cid, "bench")
        store.append_many(cid, tail)

    def floor_step(archive: bool) -> Callable[[], int]:
        def step() -> int:
            floor.remove_from(size, archive=archive)
            return 1

        return step

    def ours_step(purge: bool) -> Callable[[], int]:
        def step() -> int:
            store.rollback(cid, "bench", purge=purge)
            return 1

        return step

    by_hand = LayoutFloor(ours)
    context.stack.callback(by_hand.close)

    def by_hand_step(archive: bool) -> Callable[[], int]:
        def step() -> int:
            by_hand.remove_from(size, archive=archive)
            return 1

        return step

    for workload, archive in (("rollback", True), ("purge", False)):
        if workload not in context.settings.workloads:
            continue
        lanes = [
            Lane(
                f"{floor.name} {'archive+DELETE' if archive else 'DELETE'}",
                floor_step(archive),
                refill_floor,
            )
        ]
        if archive:
            lanes.append(Lane(f"{floor.name} DELETE", floor_step(False), refill_floor))
        lanes.append(
            Lane(
                f"{by_hand.name} {'archive+DELETE' if archive else 'DELETE'}",
                by_hand_step(archive),
                refill_ours,
            )
        )
        lanes.append(Lane(CONTEXTSTORE, ours_step(not archive), refill_ours))
        context.record(
            workload, size, backend, lanes, interleave(lanes, context.settings.rounds), "s/rollback"
        )


def _process_worker(
    kind: str, location: str, count: int, start: Any, results: Any, number: int
) -> None:
    """Append ``count`` messages to a conversation of one's own once ``start`` is set (one
    more before it, untimed: a process's first write compiles and caches what the others
    reuse, and the workload measures appending, not starting)."""
    first, *messages = bench_data.conversation(count + 1, seed=number + 2)
    subject: Subject
    if kind == CONTEXTSTORE:
        ours = ContextStoreSubject(location)
        ours.store.token_counter.count("load the encoding before the clock starts")
        subject = ours
    elif location.startswith("postgresql"):
        subject = FloorPostgres(location, f"process-{number}-{time.time_ns()}")
    else:
        floor = FloorSqlite(Path(location))
        floor.conv = f"process-{number}-{time.time_ns()}"
        subject = floor
    subject.append_one(first)
    results.put(None)
    start.wait()
    began = time.time()
    for message in messages:
        subject.append_one(message)
    results.put((began, time.time()))
    subject.close()


def processes_workload(context: Context, backend: str) -> None:
    """N processes appending to conversations of their own in one database, against one
    process appending as many messages; for the floor and for contextstore."""
    folder = context.scratch(f"processes-{backend}")
    settings = context.settings
    spawn = multiprocessing.get_context("spawn")
    lanes: list[Lane] = []
    for kind in (FLOOR_SQLITE if backend == "sqlite" else FLOOR_POSTGRES, CONTEXTSTORE):
        if backend == "sqlite":
            location = str(folder / ("floor.db" if kind != CONTEXTSTORE else "contextstore.db"))
            if kind == CONTEXTSTORE:
                ContextStoreSubject(location).close()
            else:
                FloorSqlite(Path(location)).close()
        else:
            location = str(settings.postgres_url)
        for workers in (1, settings.processes):
            per_worker = settings.process_messages * settings.processes // workers
            lanes.append(
                Lane(f"{kind} x{workers}", _spawner(spawn, kind, location, workers, per_worker))
            )
    samples = interleave(lanes, max(3, settings.rounds // 2), warm_up=False)
    found = context.record("processes", 0, backend, lanes, samples, "s/message")
    for single, many in ((found[0], found[1]), (found[2], found[3])):
        single.ratio = 1.0
        many.ratio = single.median / many.median
        many.note = f"{settings.processes} processes against 1"


def _spawner(
    spawn: Any, kind: str, location: str, workers: int, count: int
) -> Callable[[], tuple[int, float]]:
    def step() -> tuple[int, float]:
        start, results = spawn.Event(), spawn.Queue()
        children = [
            spawn.Process(
                target=_process_worker, args=(kind, location, count, start, results, number)
            )
            for number in range(workers)
        ]
        for child in children:
            child.start()
        for _ in children:
            results.get(timeout=120)
        start.set()
        spans = [results.get(timeout=600) for _ in children]
        for child in children:
            child.join()
        began = min(span[0] for span in spans)
        ended = max(span[1] for span in spans)
        return workers * count, ended - began

    return step


PAGE_SIZES = (4_096, 8_192, 16_384)


def pages_workload(context: Context) -> None:
    """contextstore's file over its content under each page size, for the benchmark's
    2 KB tool results, for texts of log-uniform size from 100 B to 20 KB and, given
    ``Settings.cline_tasks``, for real Cline histories (all tasks in one file)."""
    sizes = context.settings.sizes
    count = max(4, min(max(sizes), 10_000))
    datasets = {
        "2 KB tool results": [bench_data.conversation(count)],
        "100 B-20 KB texts": [bench_data.mixed_sizes(max(4, count // 2))],
    }
    if context.settings.cline_tasks:
        histories = bench_data.cline_histories(Path(context.settings.cline_tasks))
        datasets[f"{len(histories)} real Cline histories"] = histories
    original = engine.PAGE_SIZE
    try:
        for label, conversations in datasets.items():
            content = sum(bench_data.content_bytes(messages) for messages in conversations)
            measured = sum(len(messages) for messages in conversations)
            for page_size in PAGE_SIZES:
                engine.PAGE_SIZE = page_size
                folder = context.scratch(f"pages-{page_size}")
                subject = ContextStoreSubject(folder / "contextstore.db")
                for number, messages in enumerate(conversations):
                    if number:
                        subject.conversation_id = subject.store.create_conversation().id
                    subject.load(messages)
                stored = subject.file_bytes()
                subject.close()
                found = Measurement(
                    "pages",
                    measured,
                    "sqlite",
                    f"{page_size // 1024} KiB pages",
                    "bytes",
                    [float(stored)],
                )
                found.ratio = stored / content
                found.note = f"{label}{' (configured)' if page_size == original else ''}"
                context.measurements.append(found)
    finally:
        engine.PAGE_SIZE = original
