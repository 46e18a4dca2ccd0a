"""Two openers of one new database at once: the second finds, once it holds the migration
lock, the schema the first one made, and says so (up to date, not created).

The other opener is a real ``contextstore migrate`` process, started at the moment the
first opener has looked at the database (found no schema) and before it takes the lock:
the order two racing processes take when the second loses."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.storage import head_schema, migrate
from contextstore.storage.migrate import HEAD_REVISION
from tests.cli.conftest import run
from tests.conftest import POSTGRES_URL, new_postgres_schema

ROOT = Path(__file__).resolve().parents[2]


def _other_process_migrates(location: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "contextstore", "--db", location, "migrate"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(params=["file", "postgres"])
def new_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no schema yet: a SQLite file, or a new PostgreSQL schema."""
    if request.param == "file":
        yield str(tmp_path / "new.db")
        return
    with new_postgres_schema() as schema:
        assert POSTGRES_URL
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"


@pytest.fixture
def loses_the_race(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], list[str]]]:
    """Make the next open of ``location`` in this process find no schema, then let another
    process migrate it before this one takes the lock; returns what that process printed."""
    printed: list[str] = []
    real = migrate.refuse_unknown_revision

    def arm(location: str) -> list[str]:
        def between(current: str | None, *args: str) -> None:
            if current is None and not printed:
                printed.append(_other_process_migrates(location))
            real(current, *args)

        monkeypatch.setattr(migrate, "refuse_unknown_revision", between)
        return printed

    head_schema.forget_all()  # this process has made no schema yet, as a new process
    yield arm
    head_schema.forget_all()


def test_the_second_opener_sees_the_revision_the_first_one_made(
    new_location: str, loses_the_race: Callable[[str], list[str]]
) -> None:
    printed = loses_the_race(new_location)
    with ContextStore.open(new_location) as store:
        assert printed == [f"{new_location}: schema created at revision {HEAD_REVISION}\n"]
        assert store.revision_found == HEAD_REVISION
        conversation = store.create_conversation()
        store.append(conversation.id, "user", "written after the race")
        assert store.check().ok


def test_the_second_migrate_says_the_schema_is_up_to_date(
    new_location: str, loses_the_race: Callable[[str], list[str]]
) -> None:
    printed = loses_the_race(new_location)
    second = run("--db", new_location, "migrate")
    assert second.code == 0, second.err
    assert printed == [f"{new_location}: schema created at revision {HEAD_REVISION}\n"]
    assert second.out == f"{new_location}: schema is up to date\n"
    assert second.err == f"revision {HEAD_REVISION}; nothing to upgrade.\n"
