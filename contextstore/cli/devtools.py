"""Commands around the library: the benchmark and the crash campaign."""

from __future__ import annotations

from typing import Any

import click

from contextstore.cli import terminal


@click.command("crash-test")
@click.option("--kills", type=int, default=500, show_default=True, help="Children to SIGKILL.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seeds delays and operations.")
@click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="SQLite file to torture (default: a new file in a temporary directory).",
)
@click.option(
    "--max-delay",
    type=float,
    default=0.25,
    show_default=True,
    help="Longest wait (seconds) between a child's start and its kill.",
)
def crash_test(kills: int, seed: int, db_path: str | None, max_delay: float) -> None:
    """Kill writers with SIGKILL mid-operation, reopen and verify; print the tally.

    Exits 1 if any committed write was lost or an invariant broke.
    """
    import tempfile
    from pathlib import Path

    from contextstore.devtools.crash import run_campaign

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


@click.command()
@click.option("--messages", default=2_000, show_default=True, help="Messages per run.")
@click.option("--text-bytes", default=2_000, show_default=True, help="Text size per message.")
@click.option(
    "--peer-messages", default=300, show_default=True, help="Messages for the peer comparison."
)
def bench(messages: int, text_bytes: int, peer_messages: int) -> None:
    """Time contextstore against raw sqlite3 and installed peers; print ratios, not promises."""
    from contextstore.devtools import bench as benchmarks
    from contextstore.devtools import bench_peers

    rows = benchmarks.run(messages, text_bytes)
    terminal.table(
        ("operation", "contextstore", "raw sqlite3", "ratio", "note"),
        [
            (
                r.name,
                f"{r.contextstore_s * 1000:,.1f} ms",
                f"{r.baseline_s * 1000:,.1f} ms",
                f"{r.ratio:,.2f}x",
                r.note,
            )
            for r in rows
        ],
    )
    terminal.out("\nSQLite file size for 1,000 rows, by row size and page size:")
    terminal.table(
        ("row bytes", "page size", "file bytes", "not payload"),
        [
            (p.row_bytes, p.page_size, f"{p.file_bytes:,}", f"{p.overhead:.0%}")
            for p in benchmarks.page_sizes()
        ],
    )
    runs, missing = bench_peers.run(peer_messages, text_bytes)
    ours = runs[0]
    terminal.out(f"\nPeers, {peer_messages:,} messages of {text_bytes:,} bytes each:")
    terminal.table(
        (
            "store",
            "append",
            "vs contextstore",
            "read back",
            "file bytes",
            "vs contextstore",
            "note",
        ),
        [
            (
                r.name,
                f"{r.append_s * 1000:,.0f} ms",
                f"{r.append_s / ours.append_s:,.2f}x",
                f"{r.read_s * 1000:,.1f} ms",
                f"{r.file_bytes:,}",
                f"{r.file_bytes / ours.file_bytes:,.1f}x",
                r.note,
            )
            for r in runs
        ],
    )
    for reason in missing:
        terminal.out(f'(skipped: {reason}; pip install "contextstore[bench]")')
    terminal.out("\ncontextstore's own file for 1,500 messages of mixed size (100 B to 20 KB):")
    terminal.table(
        ("page size", "file bytes", "not payload"),
        [
            (p.page_size, f"{p.file_bytes:,}", f"{p.overhead:.1%}")
            for p in benchmarks.store_page_sizes()
        ],
    )
