"""Commands around the library: the benchmark and the crash campaign."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from contextstore.cli import terminal
from contextstore.cli.common import (
    IntegerRange,
    NumberRange,
    WrittenPath,
    handle_errors,
    refuse_store_options,
)


@click.command("crash-test")
@click.option(
    "--kills", type=IntegerRange(1), default=500, show_default=True, help="Children to SIGKILL."
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seeds delays and operations.")
@click.option(
    "--db",
    "db_path",
    type=WrittenPath("a database", dir_okay=False),
    default=None,
    callback=lambda _ctx, _param, value: _new_file(value),
    help="A new SQLite file to torture, kept afterwards (default: a new file in a temporary "
    "directory).",
)
@click.option(
    "--max-delay",
    type=NumberRange(0, min_open=True),
    default=0.25,
    show_default=True,
    help="Longest wait (seconds) between a child's start and its kill.",
)
def crash_test(kills: int, seed: int, db_path: str | None, max_delay: float) -> None:
    """Kill writers with SIGKILL mid-operation, reopen and verify; print the tally.

    Exits 1 if any committed write was lost or an invariant broke.
    """
    import tempfile

    from contextstore.devtools.crash import run_campaign

    refuse_store_options(
        click.get_current_context(), own_file=" (crash-test --db NEW_FILE names a file of its own)"
    )

    with (
        tempfile.TemporaryDirectory(prefix="contextstore-crash-") as scratch,
        terminal.progress("killing writers", total=kills) as advance,
    ):

        def progress(_run: int, _tally: Any) -> None:
            advance(1)

        path = Path(db_path) if db_path else Path(scratch) / "crash.db"
        tally = run_campaign(path, kills=kills, seed=seed, max_delay=max_delay, progress=progress)
    terminal.out(f"database: {path}")
    terminal.out(tally.summary())
    if not tally.ok:
        click.get_current_context().exit(1)


def _new_file(value: str | None) -> str | None:
    """``--db`` of ``crash-test``: a file that is not there yet (the campaign builds its own
    conversation in it, and would report another store's rows as lost)."""
    if value is not None and "://" in value:
        raise click.BadParameter(
            f"{value} is a URL; crash-test kills writers of a SQLite file: name a new file, "
            "or leave --db out to use a temporary one.",
            param_hint="'--db'",
        )
    if value is not None and Path(value).exists():
        raise click.BadParameter(
            f"{value} exists; crash-test builds its own store: name a new file, or leave --db "
            "out to use a temporary one.",
            param_hint="'--db'",
        )
    return value


def _sizes(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part.replace("_", "")) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(
            "give sizes as numbers separated by commas, e.g. 1000,10000"
        ) from None
    if not sizes or min(sizes) < 4:
        raise click.BadParameter("each size must be at least 4 messages")
    return sizes


def _workloads(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, ...]:
    from contextstore.devtools.bench_runner import WORKLOADS

    if value is None:
        return WORKLOADS
    chosen = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = sorted(set(chosen) - set(WORKLOADS))
    if unknown or not chosen:
        raise click.BadParameter(f"choose from {', '.join(WORKLOADS)} (got {value!r})")
    return chosen


def _postgres_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A ``--url`` that names a PostgreSQL database this machine can reach, or None."""
    if value is None:
        return None
    from contextstore.core.errors import InvalidInputError
    from contextstore.devtools.bench_subjects import unreachable_postgres
    from contextstore.storage.engine import resolve_target

    try:
        target = resolve_target(value, Path(value))
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc)) from None
    if target.is_sqlite or "://" not in value:
        raise click.BadParameter(
            "give a PostgreSQL URL (postgresql://user@host:port/database); SQLite is measured "
            "in every run, in a temporary folder."
        )
    reason = unreachable_postgres(target.url)
    if reason is not None:
        raise click.BadParameter(f"cannot connect to it: {reason}")
    return target.url


def _json_out(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A ``--json-out`` file that can be written once the run ends (checked before it starts)."""
    if value is None:
        return None
    folder = Path(value).absolute().parent  # there: WrittenPath checked it
    if not os.access(folder, os.W_OK):
        raise click.BadParameter(f"the folder {folder} cannot be written to.")
    return value


@click.command()
@click.option(
    "--sizes",
    default="1000,10000",
    show_default=True,
    callback=_sizes,
    help="Conversation lengths (messages) to measure at, separated by commas.",
)
@click.option("--large", is_flag=True, help="Also measure at 100,000 messages.")
@click.option(
    "--rounds", default=7, show_default=True, type=IntegerRange(1), help="Samples per subject."
)
@click.option(
    "--chunk",
    default=40,
    show_default=True,
    type=IntegerRange(1),
    help="Durable appends per sample.",
)
@click.option(
    "--workloads",
    default=None,
    callback=_workloads,
    help="Workloads to run, separated by commas (default: all).",
)
@click.option(
    "--url",
    default=None,
    metavar="URL",
    callback=_postgres_url,
    help="Also run on this PostgreSQL database (postgresql+psycopg://...) against raw psycopg.",
)
@click.option(
    "--processes",
    default=4,
    show_default=True,
    type=IntegerRange(2),
    help="Writers for 'processes'.",
)
@click.option(
    "--process-messages",
    default=60,
    show_default=True,
    type=IntegerRange(1),
    help="Messages each of the writers appends.",
)
@click.option("--no-peers", is_flag=True, help="Skip the peer stores.")
@click.option(
    "--cline-tasks",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="'pages' also stores the API histories of the Cline task folders in this folder.",
)
@click.option(
    "--json-out",
    type=WrittenPath("the samples as well as the tables", dir_okay=False, writable=True),
    default=None,
    callback=_json_out,
    help="Also write every sample and the environment to this JSON file.",
)
@handle_errors
def bench(
    sizes: tuple[int, ...],
    large: bool,
    rounds: int,
    chunk: int,
    workloads: tuple[str, ...],
    url: str | None,
    processes: int,
    process_messages: int,
    no_peers: bool,
    cline_tasks: str | None,
    json_out: str | None,
) -> None:
    """Measure contextstore against the floor (raw sqlite3, raw psycopg with --url) and the
    installed peers, interleaved in rounds in this process; print medians and ratios."""
    import json

    from contextstore.devtools import bench as benchmarks
    from contextstore.devtools.bench_runner import Settings

    refuse_store_options(click.get_current_context())

    if large and 100_000 not in sizes:
        sizes = (*sizes, 100_000)
    settings = Settings(
        sizes=sizes,
        rounds=rounds,
        chunk=chunk,
        workloads=workloads,
        postgres_url=url,
        processes=processes,
        process_messages=process_messages,
        peers=not no_peers,
        cline_tasks=cline_tasks,
    )
    report = benchmarks.run(settings, progress=lambda text: terminal.note(f"  {text}"))
    terminal.table(*bench_table(report), wrap=("note",))
    for reason in report.skipped:
        terminal.note(f"(skipped: {reason})")
    if json_out:
        try:
            with open(json_out, "w", encoding="utf-8") as handle:
                json.dump(report.to_json(), handle, indent=1)
        except OSError as exc:
            raise click.FileError(json_out, hint=exc.strerror or str(exc)) from exc
        terminal.note(f"wrote {json_out}")


def _amount(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / 1e6:,.2f} MB"
    if value >= 1:
        return f"{value:,.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:,.2f} ms"
    return f"{value * 1e6:,.1f} us"


BENCH_COLUMNS = ("workload", "size", "backend", "subject", "median", "min-max", "ratio", "note")


def bench_table(report: Any) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The report as one table: medians with min-max, and each ratio in its workload's sense."""
    from contextstore.devtools.bench_runner import SENSE

    rows: list[tuple[Any, ...]] = []
    for m in report.measurements:
        sense = SENSE[m.workload]
        if m.ratio is None:
            ratio = "-"
        elif m.workload == "processes":
            ratio = f"{m.ratio:.2f}x one process"
        elif m.workload in ("disk", "pages"):
            ratio = f"{m.ratio:.2f}x content"
        elif sense == "throughput":
            ratio = f"{m.ratio:.3f}x floor throughput"
        else:
            ratio = f"{m.ratio:.2f}x floor"
        spread = f"{_amount(m.low, m.unit)}-{_amount(m.high, m.unit)}" if len(m.samples) > 1 else ""
        rows.append(
            (
                m.workload,
                f"{m.size:,}" if m.size else "",
                m.backend,
                m.subject,
                f"{_amount(m.median, m.unit)}/{m.unit.split('/')[-1]}"
                if "/" in m.unit
                else _amount(m.median, m.unit),
                spread,
                ratio,
                m.note,
            )
        )
    return BENCH_COLUMNS, rows
