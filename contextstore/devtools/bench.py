"""``contextstore bench``: contextstore, the floor and the peers, interleaved in one process.

Every workload builds one lane per subject (the floor, contextstore, each installed peer)
on the same messages, then runs rounds: in each round every lane does one sample's work, in
an order that rotates from round to round, so a burst of load from another process lands on
every subject alike. A sample is seconds per unit (per message for appends, per operation
otherwise); a result is the median of the samples with their min and max. Ratios compare
medians taken in the same run, never absolute times across machines.

Nothing here prints: :func:`run` returns a :class:`Report` that the CLI formats and that
:meth:`Report.to_json` writes out.
"""

from __future__ import annotations

import datetime
import multiprocessing
import platform
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contextstore.core.overlays import Message
from contextstore.devtools import bench_data
from contextstore.devtools.bench_subjects import (
    CONTEXTSTORE,
    FLOOR_POSTGRES,
    FLOOR_SQLITE,
    PEERS,
    ContextStoreSubject,
    FloorPostgres,
    FloorSqlite,
    Subject,
    drop_postgres_floor,
    peer_available,
    versions,
)
from contextstore.processors.pipeline import Pipeline, default_pipeline
from contextstore.storage import engine

WORKLOADS = (
    "append",
    "append_batch",
    "render",
    "render_masked",
    "prepare",
    "rollback",
    "purge",
    "memory",
    "disk",
    "processes",
    "pages",
)
"""Every row of the issue's table, in its order ("disk" is measured on the append lanes),
and the page-size measurement behind :data:`contextstore.storage.engine.PAGE_SIZE`."""

THROUGHPUT = "throughput"
TIME = "time"
BYTES = "bytes"

SENSE = {
    "append": THROUGHPUT,
    "append_batch": THROUGHPUT,
    "processes": THROUGHPUT,
    "render": TIME,
    "render_masked": TIME,
    "prepare": TIME,
    "rollback": TIME,
    "purge": TIME,
    "memory": BYTES,
    "disk": BYTES,
    "pages": BYTES,
}
"""How a workload's ratio reads: ``throughput`` is the floor's time over the subject's (so
0.5 means half the floor's throughput); ``time`` and ``bytes`` are the subject's over the
floor's (so 2 means twice the floor's time or memory); ``disk`` compares bytes on disk with
the content's bytes."""

BATCH = 1_000
"""Messages per transaction in ``append_batch``, and messages a rollback removes."""

SLOW_PEER_LIMIT = 10_000
"""Peers that rewrite the whole history per message are not run above this size."""


@dataclass(frozen=True)
class Settings:
    """What one run measures."""

    sizes: tuple[int, ...] = (1_000, 10_000)
    rounds: int = 7
    chunk: int = 40
    workloads: tuple[str, ...] = WORKLOADS
    postgres_url: str | None = None
    processes: int = 4
    process_messages: int = 60
    peers: bool = True
    cline_tasks: str | None = None
    """A folder of Cline task folders whose API histories the ``pages`` workload also stores."""


@dataclass
class Measurement:
    """One subject's samples for one workload at one size on one backend."""

    workload: str
    size: int
    backend: str
    subject: str
    unit: str
    samples: list[float] = field(default_factory=list)
    ratio: float | None = None
    """The median against the floor's (or, for ``disk``, the content's), in the
    workload's sense (see :data:`SENSE`); ``processes`` compares N processes with one."""
    note: str = ""

    @property
    def median(self) -> float:
        """Median of the samples."""
        return statistics.median(self.samples)

    @property
    def low(self) -> float:
        """Smallest sample."""
        return min(self.samples)

    @property
    def high(self) -> float:
        """Largest sample."""
        return max(self.samples)

    @property
    def spread(self) -> float:
        """``high / low``: how noisy the samples were (1.0 means identical)."""
        return self.high / self.low if self.low else float("inf")


@dataclass
class Report:
    """Everything one run measured, with the settings and versions it ran with."""

    settings: Settings
    measurements: list[Measurement]
    skipped: list[str]
    started: str
    seconds: float
    environment: dict[str, str]

    def rows(self, workload: str) -> list[Measurement]:
        """The measurements of one workload, in run order."""
        return [m for m in self.measurements if m.workload == workload]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: settings, environment and every measurement with its samples."""
        return {
            "started": self.started,
            "seconds": round(self.seconds, 1),
            "settings": asdict(self.settings),
            "environment": self.environment,
            "skipped": self.skipped,
            "measurements": [
                {
                    **asdict(m),
                    "median": m.median,
                    "min": m.low,
                    "max": m.high,
                    "sense": SENSE[m.workload],
                }
                for m in self.measurements
            ],
        }


@dataclass
class Lane:
    """One subject's part in a workload: the work of one sample, and untimed set-up."""

    subject: str
    step: Callable[[], int | tuple[int, float]]
    """Does one sample's work and returns how many units (messages, operations) it did,
    or the units and the seconds it measured itself (when set-up is part of the call)."""
    before: Callable[[], None] | None = None
    """Untimed work before each sample (refilling what a rollback removes)."""


def interleave(lanes: Sequence[Lane], rounds: int, *, warm_up: bool = True) -> list[list[float]]:
    """Run ``rounds`` rounds over ``lanes`` in rotating order; seconds per unit per lane.

    A first round is run and dropped when ``warm_up`` is set (caches, prepared plans).
    """
    samples: list[list[float]] = [[] for _ in lanes]
    for number in range(rounds + (1 if warm_up else 0)):
        order = list(range(len(lanes)))
        shift = number % max(1, len(lanes))
        order = order[shift:] + order[:shift]
        for position in order:
            lane = lanes[position]
            if lane.before is not None:
                lane.before()
            start = time.perf_counter()
            done = lane.step()
            elapsed = time.perf_counter() - start
            units = done if isinstance(done, int) else done[0]
            if not isinstance(done, int):
                elapsed = done[1]
            if warm_up and number == 0:
                continue
            samples[position].append(elapsed / max(1, units))
    return samples


class Context:
    """What every workload shares: settings, a scratch folder, subjects to close, results."""

    def __init__(self, settings: Settings, folder: Path, stack: ExitStack) -> None:
        self.settings = settings
        self.folder = folder
        self.stack = stack
        self.measurements: list[Measurement] = []
        self.skipped: list[str] = []
        self.counter = 0

    def backends(self) -> list[str]:
        """``sqlite``, and ``postgresql`` when a URL was given."""
        return ["sqlite", "postgresql"] if self.settings.postgres_url else ["sqlite"]

    def scratch(self, label: str) -> Path:
        """A new empty folder for one workload's files."""
        self.counter += 1
        path = self.folder / f"{self.counter:03d}-{label}"
        path.mkdir()
        return path

    def floor(self, backend: str, folder: Path) -> FloorSqlite | FloorPostgres:
        """The floor subject of ``backend``."""
        if backend == "sqlite":
            subject: FloorSqlite | FloorPostgres = FloorSqlite(folder / "floor.db")
        else:
            assert self.settings.postgres_url is not None
            self.counter += 1
            subject = FloorPostgres(
                self.settings.postgres_url, f"contextstore_bench_{self.counter}"
            )
        self.stack.callback(subject.close)
        return subject

    def contextstore(
        self, backend: str, folder: Path, pipeline: Pipeline | None = None
    ) -> ContextStoreSubject:
        """A contextstore subject on ``backend`` (no processors unless ``pipeline``)."""
        location: str | Path = (
            folder / "contextstore.db" if backend == "sqlite" else str(self.settings.postgres_url)
        )
        subject = ContextStoreSubject(location, pipeline=pipeline or Pipeline([]))
        self.stack.callback(subject.close)
        return subject

    def peers(self, backend: str, folder: Path, size: int) -> list[Subject]:
        """Every installed peer (SQLite and files only), noting the ones skipped."""
        if backend != "sqlite" or not self.settings.peers:
            return []
        found: list[Subject] = []
        for name, distribution, factory in PEERS:
            reason = peer_available(distribution)
            if reason is None:
                subject = factory(folder)
                self.stack.callback(subject.close)
                found.append(subject)
            elif reason not in self.skipped:
                self.skipped.append(reason)
            del name
        return found

    def record(
        self,
        workload: str,
        size: int,
        backend: str,
        lanes: Sequence[Lane],
        samples: list[list[float]],
        unit: str,
        notes: dict[str, str] | None = None,
    ) -> list[Measurement]:
        """Store one workload's samples, with ratios against the floor lane (the first)."""
        found = [
            Measurement(workload, size, backend, lane.subject, unit, values)
            for lane, values in zip(lanes, samples, strict=True)
        ]
        floor = found[0].median
        for measurement in found:
            measurement.note = (notes or {}).get(measurement.subject, "")
            if SENSE[workload] == THROUGHPUT:
                measurement.ratio = floor / measurement.median if measurement.median else None
            else:
                measurement.ratio = measurement.median / floor if floor else None
        self.measurements.extend(found)
        return found


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
        history = bench_data.conversation(size)
        subject.load(history)
        held[subject.name] = history
        chunk = context.settings.chunk
        if subject.name not in (FLOOR_SQLITE, FLOOR_POSTGRES, CONTEXTSTORE) and size >= 10_000:
            chunk = max(2, chunk // 10)
        lanes.append(Lane(subject.name, _appender(subject, history, chunk)))
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


def _appender(subject: Subject, history: list[Message], chunk: int) -> Callable[[], int]:
    def step() -> int:
        fresh = bench_data.conversation(chunk, start=len(history))
        for message in fresh:
            subject.append_one(message)
        history.extend(fresh)
        return chunk

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
        history = bench_data.conversation(size)
        subject.load(history)
        lanes.append(Lane(subject.name, _batcher(subject, history)))
    rounds = max(3, context.settings.rounds // 2)
    context.record("append_batch", size, backend, lanes, interleave(lanes, rounds), "s/message")


def _batcher(subject: Subject, history: list[Message]) -> Callable[[], int]:
    def step() -> int:
        fresh = bench_data.conversation(BATCH, start=len(history))
        subject.append_batch(fresh)
        history.extend(fresh)
        return BATCH

    return step


def _render_fixture(
    context: Context, size: int, backend: str
) -> tuple[FloorSqlite | FloorPostgres, ContextStoreSubject, list[Subject], str]:
    """A conversation of ``size`` with its first half hidden and a fifth of its blocks
    rewritten, on the floor (which reads the same visible rows) and on contextstore."""
    folder = context.scratch(f"render-{size}-{backend}")
    floor = context.floor(backend, folder)
    ours = context.contextstore(backend, folder)
    history = bench_data.conversation(size)
    floor.load(history)
    ours.load(history)
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

        def prepare() -> int:
            store.prepare_request(cid, pipeline=masking)
            return 1

        lanes = [Lane(floor.name, _once(floor.read)), Lane(CONTEXTSTORE, prepare)]
        context.record(
            "prepare",
            size,
            backend,
            lanes,
            interleave(lanes, context.settings.rounds),
            "s/prepare",
            {CONTEXTSTORE: "default pipeline, anthropic payload, request row"},
        )
    if "memory" in wanted and backend == "sqlite":
        floor_peak = _peak_bytes(floor.read)
        ours_peak = _peak_bytes(ours.read)
        cached = store.render_cache.bytes
        for subject, peak in ((floor.name, floor_peak), (CONTEXTSTORE, ours_peak)):
            measurement = Measurement("memory", size, backend, subject, "bytes", [float(peak)])
            measurement.ratio = peak / floor_peak
            context.measurements.append(measurement)
        context.measurements[-1].note = f"peak traced bytes of one render; cache holds {cached:,}"


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
    folder = context.scratch(f"rollback-{size}-{backend}")
    floor = context.floor(backend, folder)
    ours = context.contextstore(backend, folder)
    history = bench_data.conversation(size)
    floor.load(history)
    ours.load(history)
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
        lanes.append(Lane(CONTEXTSTORE, ours_step(not archive), refill_ours))
        context.record(
            workload, size, backend, lanes, interleave(lanes, context.settings.rounds), "s/rollback"
        )


def _process_worker(
    kind: str, location: str, count: int, start: Any, results: Any, number: int
) -> None:
    """Append ``count`` messages to a conversation of one's own once ``start`` is set."""
    messages = bench_data.conversation(count, seed=number + 2)
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


@contextmanager
def _scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="contextstore-bench-") as folder:
        yield Path(folder)


def run(settings: Settings, progress: Callable[[str], None] | None = None) -> Report:
    """Run every workload of ``settings`` at every size and backend; return the report."""
    unknown = sorted(set(settings.workloads) - set(WORKLOADS))
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")
    started = datetime.datetime.now(datetime.timezone.utc)
    clock = time.perf_counter()
    tell = progress or (lambda _text: None)
    with _scratch() as folder, ExitStack() as stack:
        context = Context(settings, folder, stack)
        wanted = settings.workloads
        if settings.postgres_url:
            stack.callback(drop_postgres_floor, settings.postgres_url)
        for backend in context.backends():
            for size in settings.sizes:
                if "append" in wanted or "disk" in wanted:
                    tell(f"append at {size:,} on {backend}")
                    append_workload(context, size, backend)
                if "append_batch" in wanted:
                    tell(f"batched append at {size:,} on {backend}")
                    append_batch_workload(context, size, backend)
                if {"render", "render_masked", "prepare", "memory"} & set(wanted):
                    tell(f"render and prepare at {size:,} on {backend}")
                    render_workloads(context, size, backend)
                if {"rollback", "purge"} & set(wanted):
                    tell(f"rollback at {size:,} on {backend}")
                    rollback_workloads(context, size, backend)
            if "processes" in wanted:
                tell(f"{settings.processes} processes on {backend}")
                processes_workload(context, backend)
        if "pages" in wanted:
            tell("page sizes")
            pages_workload(context)
        measurements, skipped = context.measurements, context.skipped
    environment = {
        **versions(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": str(multiprocessing.cpu_count()),
    }
    return Report(
        settings,
        measurements,
        skipped,
        started.isoformat(timespec="seconds"),
        time.perf_counter() - clock,
        environment,
    )
