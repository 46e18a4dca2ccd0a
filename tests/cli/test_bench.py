"""The benchmark command: side-by-side ratios, and the page-size choice it justifies."""

from __future__ import annotations

from click.testing import CliRunner

from contextstore.cli import cli
from contextstore.devtools import bench, bench_peers
from contextstore.storage import engine


def test_bench_reports_each_operation_against_the_baseline() -> None:
    rows = bench.run(messages=30, text_bytes=200)
    assert [r.name.split(" ")[0].rstrip(",") for r in rows] == [
        "append",
        "render",
        "prepare_request",
        "render",
    ]
    assert all(r.contextstore_s > 0 and r.baseline_s > 0 and r.ratio > 0 for r in rows)


def test_the_configured_page_size_gives_the_smallest_file_for_mixed_messages() -> None:
    measured = bench.store_page_sizes(count=600)
    smallest = min(measured, key=lambda row: row.file_bytes)
    assert smallest.page_size == engine.PAGE_SIZE


def test_bench_command_prints_ratios() -> None:
    result = CliRunner().invoke(
        cli,
        ["bench", "--messages", "20", "--text-bytes", "100", "--peer-messages", "10"],
        obj={},
    )
    assert result.exit_code == 0, result.stderr
    assert "ratio" in result.stdout and "raw sqlite3" in result.stdout
    assert "x  " in result.stdout


def test_peers_run_the_same_workload_or_say_why_not() -> None:
    runs, skipped = bench_peers.run(messages=20, size=200)
    assert runs[0].name == "contextstore" and runs[0].messages_read == 20
    assert len(runs) - 1 + len(skipped) == len(bench_peers.ADAPTERS)
    for run in runs:
        assert run.messages_read == 20 and run.file_bytes > 0 and run.append_s > 0
    assert all("not installed" in reason for reason in skipped)
