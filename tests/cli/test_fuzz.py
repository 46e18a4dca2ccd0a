"""Every command, given arguments a user might mistype, ends with a documented exit code and a
message, never an internal error (exit 70) or a traceback (README "Exit codes").

Hypothesis draws a command from the CLI's own tree and, for each of its parameters, a value
from a pool of plausible mistakes (wrong types, out-of-range numbers, impossible dates, paths
that cannot be files, names too long for the file system, the seeded ids); each run gets a
fresh copy of the seeded database and its own working directory.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextstore.cli import cli
from tests.cli.conftest import Seeded, run

DOCUMENTED_EXIT_CODES = frozenset(range(10))
"""0 success, 1-9 the error classes of the README's exit-code table (70 is an internal error)."""

LEFT_OUT = frozenset({"bench", "crash-test", "serve"})
"""Commands that run for minutes or serve until stopped; their arguments have tests of their own."""

TOO_LONG = "n" * 300
"""A file name over the 255 bytes file systems allow."""


def _commands(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _commands(sub, (*path, name))
    elif path and path[0] not in LEFT_OUT:
        yield path


COMMANDS = list(_commands(cli))


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def _values(param: click.Parameter, seeded: Seeded) -> st.SearchStrategy[str]:
    """Plausible mistakes for one parameter, with a good value among them."""
    texts = ["", " ", "x", "-", "--", "%", "'", '"', "☃", "\\", "a" * 5_000, TOO_LONG]
    numbers = ["0", "-1", "1", "2", "1.5", "1e999", "nan", "99999999999999999999", "0x10"]
    moments = ["2026-13-01", "2026-12-04T03:48:14Z", "yesterday", seeded.label, "0"]
    # Not "/": an import would walk the whole file system.
    paths = [".", "out", "missing/deeper/x", f"{TOO_LONG}/x", TOO_LONG, "/dev/null"]
    name = param.name or ""
    if name in ("conversation_id", "conversation"):
        pool = [seeded.cid] * 4 + ["nosuch", ""] + texts[:3]
    elif name in ("request_id", "rollback_id"):
        pool = [str(seeded.prepared_id), str(seeded.recorded_id), *numbers]
    elif name == "crash_kills":
        pool = ["0", "-1", "x"]  # a positive count kills real child processes
    elif name == "query":
        pool = ["SELECT 1", "SELECT * FROM audit_requests", "DELETE FROM messages", *texts]
    elif isinstance(param.type, click.Choice):
        pool = [str(choice) for choice in param.type.choices] + ["bogus", ""]
    elif isinstance(param.type, click.types.IntParamType | click.types.FloatParamType):
        pool = numbers
    elif isinstance(param.type, click.Path | click.File):
        pool = [*paths, seeded.db]
    elif name in ("as_of", "to", "at"):
        pool = moments + numbers[:4]
    else:
        pool = texts + numbers[:3] + moments[:2]
    return st.sampled_from(pool)


@st.composite
def invocations(draw: st.DrawFn, seeded: Seeded) -> list[str]:
    """One command line: a command, some of its options, its arguments (maybe too few)."""
    path = draw(st.sampled_from(COMMANDS))
    args = list(path)
    for param in _command(path).params:
        if param.name in ("help", "db", "read_only"):
            continue
        if isinstance(param, click.Argument):
            count = 1 if param.nargs == 1 else draw(st.integers(0, 2))
            if draw(st.integers(0, 9)) == 0:
                continue  # a missing argument
            args += [draw(_values(param, seeded)) for _ in range(count)]
        elif isinstance(param, click.Option) and draw(st.booleans()):
            if param.is_flag:
                args.append(param.opts[0])
            else:
                args += [param.opts[0], draw(_values(param, seeded))]
    return args


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    from tests.cli.conftest import seed

    return seed(tmp_path_factory.mktemp("fuzz") / "seed.db")


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_command_line_ends_in_an_internal_error(
    template: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: st.DataObject
) -> None:
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    db = work / "cli.db"
    shutil.copy(template.db, db)
    seeded = Seeded(
        str(db),
        template.cid,
        template.label,
        template.checkpoint_ts,
        template.prepared_id,
        template.recorded_id,
    )
    (work / "notes.txt").write_text("not a database\n", encoding="utf-8")
    (work / "empty.db").touch()
    odd = [TOO_LONG, str(work), "missing.db", "notes.txt", "empty.db", "/dev/null"]
    location = data.draw(st.sampled_from([str(db)] * 6 + odd))
    read_only = ["--read-only"] if data.draw(st.booleans()) else []
    args = data.draw(invocations(seeded))
    monkeypatch.chdir(work)
    got = run("--db", location, *read_only, *args, input="")
    shown = f"contextstore --db {location} {' '.join(read_only + args)[:300]}\n{got.err[:500]}"
    assert got.code in DOCUMENTED_EXIT_CODES, shown
    assert "Traceback" not in got.out + got.err, shown
    if got.code != 0:
        assert got.err.strip(), shown  # a failure always says why
