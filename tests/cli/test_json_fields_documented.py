"""Every command with ``--json`` says its output's fields are "stable and documented": the
README's table of JSON fields has a row for each, naming every field it prints (run on a
real Cline task and a real Gemini CLI session)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import click
import pytest

from contextstore.cli import cli
from tests.cli.conftest import run
from tests.interop.real import CLINE, GEMINI, need

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
TABLE = README.split("JSON fields (`--json`):", 1)[1].split("\n\n", 2)[1]


def _rows() -> dict[str, str]:
    """Each command named in the table's first column, with its row's fields cell."""
    rows: dict[str, str] = {}
    for line in TABLE.splitlines()[2:]:
        commands, fields = line.strip("|").split("|", 1)
        for name in re.findall(r"`([^`]+)`", commands):
            rows[name] = fields
    return rows


ROWS = _rows()


def _json_commands() -> list[str]:
    """Every visible command (``export cline`` for a group's) that takes ``--json``."""
    found = []
    for name, command in sorted(cli.commands.items()):
        if command.hidden:
            continue
        subcommands = command.commands if isinstance(command, click.Group) else {"": command}
        for sub_name, sub in sorted(subcommands.items()):
            if any("--json" in getattr(p, "opts", ()) for p in sub.params):
                found.append(f"{name} {sub_name}".strip())
    return found


@pytest.mark.parametrize("command", _json_commands())
def test_every_command_with_json_has_a_row_of_fields(command: str) -> None:
    assert command in ROWS, f"README's JSON fields table has no row for `{command}`"


FREE_FORM = {"metadata", "messages", "removed", "restored", "added", "conversation"}
"""Fields whose keys are data (table names, an agent's metadata), not field names."""


def _keys(value: Any) -> set[str]:
    """Every field name in ``value``, inside lists and objects, less free-form ones."""
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value)) if value else set()
    if not isinstance(value, dict):
        return set()
    found = set(value)
    for key, inner in value.items():
        if key not in FREE_FORM:
            found |= _keys(inner)
    return found


def _undocumented(command: str, printed: Any) -> set[str]:
    return {key for key in _keys(printed) if f"`{key}`" not in ROWS[command]}


@pytest.fixture(scope="module")
def real_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    task = need(CLINE / "gmfstu-task-1769053680585")
    session = need(GEMINI / "m-gemini" / "session-2025-12-30T01-16-3f9ce747.json")
    db = str(tmp_path_factory.mktemp("json") / "j.db")
    assert run("--db", db, "import", "cline", str(task), "--json").code == 0
    assert run("--db", db, "import", "gemini", str(session), "--json").code == 0
    return db, task.name, "3f9ce747-7498-479f-9b91-936cc1549014"


def test_the_fields_printed_are_the_ones_documented(
    real_db: tuple[str, str, str], tmp_path: Path
) -> None:
    """Until 2026-12-05 the table had no row for ``import``, ``export``, ``set-model`` and
    ``show --nodes``, whose ``--help`` called their fields documented."""
    db, task, chat = real_db
    copy = tmp_path / "task"
    shutil.copytree(CLINE / task, copy)
    label = run("--db", db, "checkpoints", task, "--json").json()[3]["label"]
    runs = [
        ("import cline", ["import", "cline", str(copy), "--json"]),
        ("import gemini", ["import", "gemini", str(GEMINI / "m-gemini"), "--json"]),
        ("export cline", ["export", "cline", task, str(tmp_path / "out"), "--json"]),
        ("export gemini", ["export", "gemini", chat, str(tmp_path / "s.json"), "--json"]),
        ("set-model", ["set-model", chat, "--context-window", "1000000", "--json"]),
        ("show --nodes", ["show", task, "--nodes", "--json"]),
        ("show", ["show", task, "--json"]),
        ("conversations", ["conversations", "--json"]),
        ("fork", ["fork", task, "--at", label, "--json"]),
        ("checkpoints", ["checkpoints", task, "--json"]),
        ("requests", ["requests", task, "--json"]),
        ("search", ["search", "ActionSystem", "--json"]),
        ("rollback", ["rollback", task, "--to", label, "--dry-run", "--json"]),
        ("check", ["check", task, "--json"]),
        (
            "export gemini",
            ["export", "gemini", chat, str(tmp_path / "c.json"), "--checkpoint", "--json"],
        ),
    ]
    gaps = {}
    for command, args in runs:
        result = run("--db", db, *args)
        assert result.code == 0, (command, result.err)
        missing = _undocumented(command, result.json())
        if missing:
            gaps[command] = sorted(missing)
    assert gaps == {}


@pytest.mark.parametrize("kind", ["cline", "gemini"])
def test_the_export_json_help_describes_the_export(kind: str) -> None:
    """``export --json`` was described with the import's words ("added and skipped per task
    or file; no progress bar"): an export adds nothing and draws no bar."""
    shown = run("export", kind, "--help")
    assert shown.code == 0
    help_text = " ".join(shown.out.split())
    assert "files written, counts, what was skipped" in help_text
    assert "added and skipped" not in help_text
