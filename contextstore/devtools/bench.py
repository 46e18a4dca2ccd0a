"""``contextstore bench``: contextstore, the floor and the peers, interleaved in one process.

Every workload builds one lane per subject (the floor, contextstore, each installed peer)
on the same messages, then runs rounds: in each round every lane does one sample's work, in
an order that rotates from round to round, so a burst of load from another process lands on
every subject alike. A sample is seconds per unit (per message for appends, per operation
otherwise); a result is the median of the samples with their min and max. Ratios compare
medians taken in the same run, never absolute times across machines.

This module runs the workloads of :mod:`.bench_workloads` with the machinery of
:mod:`.bench_runner`. Nothing here prints: :func:`run` returns a
:class:`~contextstore.devtools.bench_runner.Report` that the CLI formats and that
:meth:`~contextstore.devtools.bench_runner.Report.to_json` writes out.
"""

from __future__ import annotations

import datetime
import multiprocessing
import platform
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from contextstore.devtools.bench_runner import WORKLOADS, Context, Report, Settings
from contextstore.devtools.bench_subjects import drop_postgres_floor, versions
from contextstore.devtools.bench_workloads import (
    append_batch_workload,
    append_workload,
    pages_workload,
    processes_workload,
    render_workloads,
    rollback_workloads,
)


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
