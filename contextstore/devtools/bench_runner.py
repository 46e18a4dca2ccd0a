"""The benchmark's machinery: what a run measures, its rounds, samples, ratios and report.

A workload (:mod:`.bench_workloads`) builds one :class:`Lane` per subject and hands the
lanes to :func:`interleave`, which runs rounds in an order that rotates from round to
round, so a burst of load from another process lands on every subject alike.
:meth:`Context.record` keeps the samples as one :class:`Measurement` per lane, with its
ratio against the floor in the workload's sense (:data:`SENSE`); :class:`Report` holds a
run's measurements and writes them as JSON. Nothing here prints (the CLI formats the
report).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contextstore.devtools.bench_subjects import (
    PEERS,
    ContextStoreSubject,
    FloorPostgres,
    FloorSqlite,
    Subject,
    peer_available,
)
from contextstore.processors.pipeline import Pipeline

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
