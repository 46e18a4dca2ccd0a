"""The benchmark command: every workload measured on every subject, in a JSON of a known shape.

Timings are never checked (they depend on the machine and its load); the shape is.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextstore import ContextStore
from contextstore.cli import cli
from contextstore.devtools import bench_data, bench_runner, bench_workloads
from contextstore.devtools.bench_subjects import (
    PEERS,
    ContextStoreSubject,
    LayoutFloor,
    peer_available,
)
from tests.conftest import POSTGRES_URL, new_postgres_schema

TINY_RUN = [
    "bench",
    "--sizes",
    "6",
    "--rounds",
    "1",
    "--chunk",
    "2",
    "--processes",
    "2",
    "--process-messages",
    "2",
]
"""A run of every workload at sizes where only the output's shape can be checked."""


def test_bench_measures_every_workload_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, [*TINY_RUN, "--json-out", str(out)], obj={})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    measured = {m["workload"] for m in report["measurements"]}
    assert measured == set(bench_runner.WORKLOADS)
    for m in report["measurements"]:
        assert m["samples"] and m["min"] <= m["median"] <= m["max"]
        assert m["ratio"] is None or m["ratio"] > 0
        assert m["sense"] == bench_runner.SENSE[m["workload"]]
    append = {m["subject"] for m in report["measurements"] if m["workload"] == "append"}
    installed = {name for name, dist, _ in PEERS if peer_available(dist) is None}
    assert append == {"raw sqlite3", "contextstore"} | installed
    assert len(installed) + len(report["skipped"]) >= len(PEERS)
    assert report["environment"]["sqlite"] and report["settings"]["sizes"] == [6]
    for workload in bench_runner.WORKLOADS:
        assert workload in result.output
    assert "x floor" in result.output


SQLITE_ONLY = {"disk", "pages"}
"""Workloads measured on SQLite only: bytes in a file, and Cline's pages."""


def test_bench_with_a_url_measures_every_workload_on_postgresql_too(tmp_path: Path) -> None:
    """``--url``: each workload but the file's bytes runs again on PostgreSQL, against raw
    psycopg, its lanes writing in the URL's database (here a schema of its own)."""
    out = tmp_path / "bench.json"
    with new_postgres_schema() as schema:
        url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
        args = [*TINY_RUN, "--no-peers", "--url", url, "--json-out", str(out)]
        result = CliRunner().invoke(cli, args, obj={})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    on_postgres = {m["workload"] for m in report["measurements"] if m["backend"] == "postgresql"}
    assert on_postgres == set(bench_runner.WORKLOADS) - SQLITE_ONLY
    memory = [m for m in report["measurements"] if m["workload"] == "memory"]
    assert {(m["backend"], m["subject"]) for m in memory} == {
        (backend, subject)
        for backend, floor in (("sqlite", "raw sqlite3"), ("postgresql", "raw psycopg"))
        for subject in (floor, "contextstore")
    }
    assert all(m["samples"][0] > 0 and m["ratio"] > 0 for m in memory)


def test_interleaved_rounds_rotate_the_order_and_drop_the_warm_up() -> None:
    calls: list[str] = []

    def lane(name: str) -> bench_runner.Lane:
        return bench_runner.Lane(name, lambda: (calls.append(name), 2)[1])

    samples = bench_runner.interleave([lane("a"), lane("b"), lane("c")], rounds=3)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert [len(s) for s in samples] == [3, 3, 3]


def test_a_bad_size_is_refused_as_a_cli_error() -> None:
    result = CliRunner().invoke(cli, ["bench", "--sizes", "ten"], obj={})
    assert result.exit_code == 2 and "sizes" in result.output
    result = CliRunner().invoke(cli, ["bench", "--workloads", "append,nope"], obj={})
    assert result.exit_code == 2 and "choose from" in result.output


def test_pages_also_measures_cline_histories_from_a_folder(tmp_path: Path) -> None:
    """``--cline-tasks`` adds one row per page size for the tasks' API histories (tasks
    without one are left out); the content is the histories' compact JSON."""
    history = [
        {"role": "user", "content": [{"type": "text", "text": "<task>fix it</task>"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    ]
    for name in ("task-1", "task-2"):
        (tmp_path / "tasks" / name).mkdir(parents=True)
        (tmp_path / "tasks" / name / "api_conversation_history.json").write_text(
            json.dumps(history)
        )
    (tmp_path / "tasks" / "ui-only").mkdir()
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        cli,
        [
            *("bench", "--workloads", "pages", "--sizes", "6", "--no-peers"),
            *("--cline-tasks", str(tmp_path / "tasks"), "--json-out", str(out)),
        ],
        obj={},
    )
    assert result.exit_code == 0, result.output
    rows = [m for m in json.loads(out.read_text())["measurements"] if "real Cline" in m["note"]]
    assert [(m["subject"], m["size"]) for m in rows] == [
        (f"{size // 1024} KiB pages", 4) for size in bench_workloads.PAGE_SIZES
    ]
    assert all(m["note"].startswith("2 real Cline histories") for m in rows)


@pytest.mark.parametrize("backend", ["file", "postgres"])
@pytest.mark.parametrize("archive", [True, False], ids=["archive", "delete"])
def test_the_layout_floor_removes_what_a_rollback_would_and_leaves_a_working_store(
    tmp_path: Path, backend: str, archive: bool
) -> None:
    """The benchmark's lane on contextstore's own tables by hand removes the newest
    messages and their blocks (archiving them when asked) and sets the message count back,
    so the store appends and renders after it."""
    with contextlib.ExitStack() as stack:
        if backend == "file":
            location = str(tmp_path / "by-hand.db")
        else:
            schema = stack.enter_context(new_postgres_schema())
            location = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
        ours = ContextStoreSubject(location)
        stack.callback(ours.close)
        ours.load(bench_data.conversation(10))
        kept = ours.store.messages(ours.conversation_id)
        ours.store.append_many(ours.conversation_id, bench_data.conversation(4, start=10))
        before = ours.store.row_counts(ours.conversation_id)
        blocks = sum(len(m["content"]) for m in ours.store.messages(ours.conversation_id)[10:])
        by_hand = LayoutFloor(ours)
        assert by_hand.remove_from(10, archive=archive) == 4
        by_hand.close()
        after = ours.store.row_counts(ours.conversation_id)
        assert before["messages"] - after["messages"] == 4
        assert before["blocks"] - after["blocks"] == blocks > 4
        assert ours.store.messages(ours.conversation_id) == kept
        with ours.store.database.read() as connection:
            archived = connection.exec_driver_sql(
                "SELECT count(*) FROM archived_messages"
            ).scalar_one()
        assert archived == (4 if archive else 0)
        ours.store.append(ours.conversation_id, "user", "and on")
        assert len(ours.store.messages(ours.conversation_id)) == 11


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--url", "sqlite:///elsewhere.db"], "give a PostgreSQL URL"),
        (["--url", "elsewhere.db"], "give a PostgreSQL URL"),
        (["--url", "mysql://someone@host/db"], "is a 'mysql' one"),
        (["--url", "postgresql://someone@127.0.0.1:1/x"], "cannot connect to it: "),
        (["--json-out", "no-such-folder/bench.json"], "no-such-folder does not exist"),
    ],
)
def test_a_bad_destination_is_refused_before_anything_is_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], said: str
) -> None:
    monkeypatch.chdir(tmp_path)
    ran: list[object] = []
    monkeypatch.setattr("contextstore.devtools.bench.run", lambda *a, **k: ran.append(a))
    result = CliRunner().invoke(cli, ["bench", "--sizes", "6", *args], obj={})
    assert result.exit_code == 2 and said in result.output, result.output
    assert "Traceback" not in result.output and ran == []


@pytest.mark.parametrize(
    ("args", "option"), [(["--kills", "0"], "--kills"), (["--max-delay", "0"], "--max-delay")]
)
def test_a_crash_campaign_of_nothing_is_refused(args: list[str], option: str) -> None:
    result = CliRunner().invoke(cli, ["crash-test", *args], obj={})
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output


def test_a_crash_campaign_refuses_an_existing_store(tmp_path: Path) -> None:
    existing = tmp_path / "mine.db"
    ContextStore.open(existing).close()
    before = existing.read_bytes()
    result = CliRunner().invoke(cli, ["crash-test", "--kills", "1", "--db", str(existing)], obj={})
    assert result.exit_code == 2 and "Invalid value for '--db'" in result.output
    assert "crash-test builds its own store" in result.output
    assert existing.read_bytes() == before


def test_the_append_feeds_continue_the_conversation_as_an_agent_would() -> None:
    """Each step's first result answers the call the history ends on: no result answers a
    call that is not there, which contextstore would have to look up in the store."""
    history = bench_data.conversation(10, final_call=True)
    feed = bench_workloads._Feed(history, 4)
    for _ in range(3):
        feed.make()
        feed.take()
    calls: set[str] = set()
    for message in history:
        for block in message["content"]:
            if block["type"] == "tool_use":
                calls.add(block["id"])
            if block["type"] == "tool_result":
                assert block["tool_use_id"] in calls, block["tool_use_id"]
    assert len(history) == 22 and history[-1]["content"][-1]["type"] == "tool_use"
