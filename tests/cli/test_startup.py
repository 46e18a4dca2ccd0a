"""Start-up of the command line: ``--help`` and ``COMMAND --help`` import only what they show.

Every command's module imported the store (SQLAlchemy, the pydantic content models, the
processors), so ``contextstore --help`` took as long to start as a command reading a store.
These tests count modules, never seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from contextstore import ContextStore
from contextstore.cli import cli
from contextstore.cli.main import COMMANDS, LazyGroup

HEAVY = (
    "sqlalchemy",
    "alembic",
    "pydantic",
    "tiktoken",
    "psycopg",
    "uvicorn",
    "contextstore.store",
    "contextstore.facade",
    "contextstore.processors",
    "contextstore.renderers",
    "contextstore.storage.tables",
    "contextstore.interop.cline_import",
    "contextstore.interop.gemini_import",
)
"""What a command's help needs none of: the store, its drivers, models and pipelines."""

_PROBE = """
import contextlib, io, json, sys
import contextstore.cli

sys.argv = ["contextstore", *sys.argv[1:]]
shown = io.StringIO()
code = 0
try:
    with contextlib.redirect_stdout(shown):
        contextstore.cli.main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "help": shown.getvalue(), "modules": sorted(sys.modules)}))
"""


def _probe(*args: str) -> tuple[int, str, set[str]]:
    """Run the command line with ``args`` in a new interpreter; return its exit code, what
    it printed, and the modules it imported."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen = json.loads(done.stdout)
    return seen["code"], seen["help"], set(seen["modules"])


def _heavy(modules: set[str]) -> list[str]:
    return [h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in modules)]


def test_help_imports_no_command_and_nothing_heavy() -> None:
    code, shown, modules = _probe("--help")
    assert code == 0 and "conversations" in shown and "set-model" in shown
    assert _heavy(modules) == []
    assert {entry.module for entry in COMMANDS.values()} & modules == set()


_NESTED = [("import", "cline"), ("import", "gemini"), ("export", "cline"), ("export", "gemini")]


@pytest.mark.parametrize("words", [(name,) for name in COMMANDS] + _NESTED, ids=" ".join)
def test_a_commands_help_imports_nothing_heavy(words: tuple[str, ...]) -> None:
    code, shown, modules = _probe(*words, "--help")
    assert code == 0 and shown.startswith(f"Usage: contextstore {' '.join(words)} [OPTIONS]")
    assert _heavy(modules) == []


def test_the_probe_sees_what_a_command_imports(tmp_path: Path) -> None:
    code, _, modules = _probe("--db", str(tmp_path / "new.db"), "conversations")
    assert code == 3  # no database there
    assert "contextstore.cli.history" in modules
    code, _, modules = _probe("--db", str(tmp_path / "new.db"), "migrate")
    assert code == 0 and {"sqlalchemy", "contextstore.store"} <= modules


def test_reading_a_store_loads_no_content_models(tmp_path: Path) -> None:
    """The pydantic models that check appended blocks load with the first block that needs
    one, not with the store: the commands that read never do."""
    db = tmp_path / "small.db"
    with ContextStore.open(db) as store:
        conv = store.create_conversation(model_id="claude-sonnet-4-5")
        store.append(conv.id, "user", [{"type": "text", "text": "<task>fix it</task>"}])
        store.checkpoint(conv.id, label="start")
    for words in (
        ("conversations",),
        ("show", conv.id),
        ("checkpoints", conv.id),
        ("requests", conv.id),
        ("audit", conv.id),
    ):
        code, _, modules = _probe("--db", str(db), *words)
        assert code == 0 and "contextstore.store" in modules, words
        assert [m for m in modules if m.split(".")[0] == "pydantic"] == [], words


def test_a_block_that_needs_its_model_is_still_checked_by_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHECKED_BY_ITS_MODEL], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split("\n")[:2] == ["False", "True"], done.stderr
    assert "image" in done.stdout


_CHECKED_BY_ITS_MODEL = """
import sys
from contextstore.core.content import validate_block
from contextstore.core.errors import InvalidMessageError

print("pydantic" in sys.modules)
try:
    validate_block({"type": "image", "source": {"type": "base64"}}, "content[0]")
except InvalidMessageError as exc:
    print("pydantic" in sys.modules)
    print(exc)
"""


def test_the_table_says_of_each_command_what_its_help_says() -> None:
    """:data:`COMMANDS` holds each command's first paragraph of help, from which the list
    of ``contextstore --help`` is made before the command's module is imported: edit it
    with the command's docstring."""
    for name, entry in COMMANDS.items():
        command = cli.commands[name]
        assert (command.name, command.hidden, command.short_help) == (name, entry.hidden, None)
        if not entry.hidden:
            first = " ".join((command.help or "").partition("\n\n")[0].split())
            assert entry.summary == first, name


def _root_help(group: click.Group, width: int) -> str:
    ctx = click.Context(group, info_name="contextstore", terminal_width=width)
    return group.get_help(ctx)


def test_the_list_of_commands_is_the_same_before_and_after_they_are_imported() -> None:
    fresh = LazyGroup(name=cli.name, params=cli.params, callback=cli.callback, help=cli.help)
    widths = (40, 80, 200)
    listed = [_root_help(fresh, width) for width in widths]
    assert len(fresh.commands) == len(COMMANDS) and "show" in fresh.commands
    loaded = dict(fresh.commands.items())
    assert sorted(loaded) == sorted(COMMANDS)
    assert listed == [_root_help(fresh, width) for width in widths]


def test_a_command_imported_on_use_has_the_store_options() -> None:
    fresh = LazyGroup(name=cli.name, params=cli.params, callback=cli.callback, help=cli.help)
    for name in ("show", "import", "import-cline", "bench"):
        command = fresh.commands[name]
        options = {opt for p in command.params for opt in p.opts}
        assert ("--db" in options) == (name != "bench"), name
    cline = fresh.commands["import"].commands["cline"]  # type: ignore[attr-defined]
    assert "--db" in {opt for p in cline.params for opt in p.opts}


_INTERRUPTED_WHILE_A_COMMAND_LOADS = """
import sys
import contextstore.cli


class Interrupted:
    def find_spec(self, name, path=None, target=None):
        if name == "contextstore.cli.history":
            raise KeyboardInterrupt  # Ctrl-C while the command's modules load
        return None


sys.meta_path.insert(0, Interrupted())
sys.argv = ["contextstore", "conversations"]
contextstore.cli.main()
"""


def test_ctrl_c_while_a_command_loads_ends_as_ctrl_c_does_later() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_WHILE_A_COMMAND_LOADS],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.strip() == "Aborted!"
