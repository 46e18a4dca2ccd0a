"""A conversation's model and context window from the command line: ``set-model``, the
imports' ``--context-window``, and what ``audit`` and ``report`` say of a window nobody set."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from contextstore import ContextStore
from contextstore.cli.common import command_line
from contextstore.cli.main import cli
from tests.cli.conftest import Seeded, run
from tests.interop.cline_factory import story

GEMINI_SESSION = (
    Path(__file__).parents[1]
    / "interop"
    / "data"
    / "gemini"
    / "session-2026-08-04T10-00-a1b2c3d4.jsonl"
)


def _task(tmp_path: Path) -> Path:
    return story(3).write(tmp_path / "tasks" / "1750000000000")


def _window(db: str, cid: str) -> int | None:
    found = {c["id"]: c for c in run("--db", db, "conversations", "--json").json()}
    window: int | None = found[cid]["context_window"]
    return window


def test_set_model_changes_the_window_and_the_model_and_prints_them(seeded: Seeded) -> None:
    done = run("--db", seeded.db, "set-model", seeded.cid, "--context-window", "64000")
    assert done.code == 0, done.err
    assert "64,000 tokens, maximum allowed size 37,000" in done.out
    assert "claude-sonnet-4-5" in done.out
    got = run("--db", seeded.db, "set-model", seeded.cid, "--model-id", "gpt-4o", "--json")
    assert got.json()["model_id"] == "gpt-4o" and got.json()["context_window"] == 64_000
    with seeded.store() as store:
        conv = store.get_conversation(seeded.cid)
    assert (conv.model_id, conv.context_window) == ("gpt-4o", 64_000)


def test_set_model_with_nothing_to_set_is_refused(seeded: Seeded) -> None:
    got = run("--db", seeded.db, "set-model", seeded.cid)
    assert got.code == 2 and "give --model-id, --context-window or both" in got.err
    assert "Traceback" not in got.err


def test_set_model_refusals_name_the_flag_and_change_nothing(seeded: Seeded) -> None:
    for args, flag in [
        (("--context-window", "0"), "--context-window"),
        (("--context-window", "2147483648"), "--context-window"),
        (("--context-window", "lots"), "--context-window"),
        (("--model-id", ""), "--model-id"),
        (("--model-id", "m" * 201), "--model-id"),
    ]:
        got = run("--db", seeded.db, "set-model", seeded.cid, *args)
        assert got.code == 2 and flag in got.err, (args, got.err)
    assert run("--db", seeded.db, "set-model", seeded.cid, "--model-id", "m" * 200).code == 0
    assert run("--db", seeded.db, "set-model", "nosuch", "--model-id", "x").code == 3
    read_only = run("--db", seeded.db, "--read-only", "set-model", seeded.cid, "--model-id", "x")
    assert read_only.code != 0 and "read-only" in read_only.err
    assert _window(seeded.db, seeded.cid) == 200_000


def test_set_model_refuses_a_blank_model_id_naming_the_flag(seeded: Seeded) -> None:
    for value in (" ", " gpt-4o", "gpt-4o\t", ""):
        got = run("--db", seeded.db, "set-model", seeded.cid, "--model-id", value)
        assert got.code == 2, (value, got.err)
        assert "Invalid value for '--model-id': the model id " in got.err, got.err
    with seeded.store() as store:
        assert store.get_conversation(seeded.cid).model_id == "claude-sonnet-4-5"


def test_import_cline_context_window_sets_it_on_new_and_earlier_imports(tmp_path: Path) -> None:
    db, task = str(tmp_path / "s.db"), _task(tmp_path)
    assert run("--db", db, "import", "cline", str(task)).code == 0
    assert _window(db, task.name) is None
    again = run("--db", db, "import", "cline", str(task), "--context-window", "200000")
    assert again.code == 0 and "unchanged" in again.out
    assert _window(db, task.name) == 200_000


def test_import_gemini_gives_gemini_clis_window_unless_told_otherwise(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    assert run("--db", db, "import", "gemini", str(GEMINI_SESSION)).code == 0
    (conv,) = run("--db", db, "conversations", "--json").json()
    assert conv["context_window"] == 1_048_576
    assert (
        run("--db", db, "import", "gemini", str(GEMINI_SESSION), "--context-window", "9000").code
        == 0
    )
    assert _window(db, conv["id"]) == 9_000


def test_a_bad_context_window_on_import_is_refused_before_a_store_is_made(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    got = run("--db", str(db), "import", "cline", str(_task(tmp_path)), "--context-window", "0")
    assert got.code == 2 and "--context-window" in got.err
    assert not db.exists()


def test_audit_says_when_the_window_is_the_default_and_its_command_sets_it(
    tmp_path: Path,
) -> None:
    db, task = str(tmp_path / "s.db"), _task(tmp_path)
    run("--db", db, "import", "cline", str(task))
    audit = run("--db", db, "audit", task.name)
    assert "128,000 tokens, maximum allowed size 98,000 (none set" in audit.out
    command = audit.out.split("set the model's with: ", 1)[1].split(")", 1)[0]
    assert shlex.split(command) == [
        "contextstore",
        "--db",
        db,
        "set-model",
        task.name,
        "--context-window",
        "TOKENS",
    ]
    argv = shlex.split(command.replace("TOKENS", "200000"))[1:]
    assert run(*argv).code == 0
    audit = run("--db", db, "audit", task.name)
    assert "200,000 tokens, maximum allowed size 160,000" in audit.out
    assert "none set" not in audit.out


def test_the_report_says_when_the_window_is_the_default(tmp_path: Path) -> None:
    db, task = str(tmp_path / "s.db"), _task(tmp_path)
    run("--db", db, "import", "cline", str(task))
    page = tmp_path / "r.html"
    assert run("--db", db, "report", task.name, "-o", str(page)).code == 0
    assert "window 128,000 tokens, none set (maximum allowed size 98,000)" in page.read_text()
    with ContextStore.open(db) as store:
        store.set_conversation_model(task.name, context_window=128_000)
    assert run("--db", db, "report", task.name, "-o", str(page)).code == 0
    assert "window 128,000 tokens (maximum allowed size 98,000)" in page.read_text()


def test_audit_run_on_the_environments_store_prints_a_command_without_db(
    tmp_path: Path,
) -> None:
    db, task = str(tmp_path / "s.db"), _task(tmp_path)
    run("--db", db, "import", "cline", str(task))
    audit = run("audit", task.name, env={"CONTEXTSTORE_DB": db})
    command = audit.out.split("set the model's with: ", 1)[1].split(")", 1)[0]
    assert command == f"contextstore set-model {task.name} --context-window TOKENS"


def test_a_suggested_command_never_shows_the_databases_password() -> None:
    with click.Context(cli, obj={"db": "postgresql+psycopg://ann:s3cret@db.example/agents"}) as ctx:
        line = command_line(ctx, "set-model", "c 1", "--context-window", "TOKENS")
    assert "s3cret" not in line
    assert shlex.split(line) == [
        "contextstore",
        "--db",
        "postgresql+psycopg://ann:***@db.example/agents",
        "set-model",
        "c 1",
        "--context-window",
        "TOKENS",
    ]
