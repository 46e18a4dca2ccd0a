"""The README is tested like code: its SQL runs, and every command it lists exists."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextstore.cli import cli

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def _sql_statements() -> list[str]:
    blocks = re.findall(r"```sql\n(.*?)```", README, flags=re.S)
    statements = [s.strip() for block in blocks for s in block.split(";")]
    return [
        s for s in statements if s and not all(line.startswith("--") for line in s.splitlines())
    ]


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("docs") / "demo.db"
    result = CliRunner().invoke(cli, ["--db", str(path), "demo", "--crash-kills", "0"], obj={})
    assert result.exit_code == 0, result.stderr
    return path


def _demo_excerpt() -> list[str]:
    """The lines of the README's excerpt of the demo's output, up to its crash part (whose
    counts depend on where the kills land), ids as ``ID`` and without a trailing ``...``."""
    section = README.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    excerpt = re.search(r"```text\n(.*?)```", section, flags=re.S)
    assert excerpt is not None
    lines = excerpt.group(1).split("\n== a writer killed", 1)[0].splitlines()
    return [re.sub(r"[0-9a-f]{32}", "ID", line).removesuffix("...") for line in lines if line]


def test_the_demo_prints_the_readme_excerpt_of_its_output(tmp_path: Path) -> None:
    """Each line of the excerpt begins a line the demo prints (the rollback of the
    overflowing session removed 64 rows where the README said 63)."""
    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "demo.db"), "demo", "--crash-kills", "0"], obj={}
    )
    assert result.exit_code == 0, result.stderr
    printed = [re.sub(r"[0-9a-f]{32}", "ID", line) for line in result.stdout.splitlines()]
    missing = [line for line in _demo_excerpt() if not any(p.startswith(line) for p in printed)]
    assert len(_demo_excerpt()) > 20 and missing == []


def test_the_readme_has_sql_audits() -> None:
    assert len(_sql_statements()) >= 4


@pytest.mark.parametrize("statement", _sql_statements())
def test_readme_sql_runs_in_the_sqlite3_shell_on_the_demo(demo_db: Path, statement: str) -> None:
    connection = sqlite3.connect(demo_db)
    try:
        rows = connection.execute(statement).fetchall()
    finally:
        connection.close()
    assert rows, f"no rows for:\n{statement}"


def test_the_file_read_audit_finds_the_demo_reads(demo_db: Path) -> None:
    statement = next(s for s in _sql_statements() if "read_file" in s)
    connection = sqlite3.connect(demo_db)
    reads = dict(connection.execute(statement).fetchall())
    connection.close()
    assert reads["src/report.py"] >= 2 and "tests/test_report.py" in reads


COMMAND_LINE = README.split("## Command line", 1)[1].split("\n## ", 1)[0]
VISIBLE = sorted(name for name, command in cli.commands.items() if not command.hidden)


@pytest.mark.parametrize("command", VISIBLE)
def test_every_command_is_documented_with_an_example_and_has_help(command: str) -> None:
    assert f"contextstore {command} " in COMMAND_LINE or f"contextstore {command}\n" in COMMAND_LINE
    assert cli.commands[command].help


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (name, opt)
        for name in VISIBLE
        for param in cli.commands[name].params
        for opt in getattr(param, "opts", [])
        if opt.startswith("--")
    ],
)
def test_every_option_is_documented_in_the_command_line_section(command: str, option: str) -> None:
    assert option in COMMAND_LINE, f"{command} {option} is not in README's Command line section"


def test_every_exit_code_is_documented() -> None:
    from contextstore.cli.common import CLOSED_OUTPUT_EXIT, INTERNAL_ERROR_EXIT, REFUSED_EXIT
    from contextstore.core import errors

    codes = {
        cls.exit_code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.ContextStoreError)
    }
    table = COMMAND_LINE.split("Exit codes:", 1)[1].split("\n\n", 2)[1]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    assert codes | {0, INTERNAL_ERROR_EXIT, REFUSED_EXIT, CLOSED_OUTPUT_EXIT} == documented


def test_the_library_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's library snippet, with a stand-in for the model call."""
    from types import SimpleNamespace

    section = README.split("## Library", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    usage = SimpleNamespace(input_tokens=1_200, output_tokens=80)
    namespace = {
        "TOOLS": [{"name": "read_file", "description": "Read a file", "input_schema": {}}],
        "call_the_model": lambda payload: SimpleNamespace(usage=usage, payload=payload),
    }
    exec(compile(code.group(1), "README.md", "exec"), namespace)
    assert (tmp_path / "agent.db").exists()
