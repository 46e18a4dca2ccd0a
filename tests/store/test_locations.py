"""Where a store lives: the paths and URLs ``ContextStore.open`` takes, and those it refuses
before connecting to anything."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.core.errors import InvalidInputError
from contextstore.storage.engine import resolve_target


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://someone:pw@db.example:5433/agents",
        "postgres://someone:pw@db.example:5433/agents",
        "postgresql+psycopg://someone:pw@db.example:5433/agents",
    ],
)
def test_postgresql_urls_are_reached_through_psycopg(url: str) -> None:
    target = resolve_target(url, Path("unused.db"))
    assert target.url == "postgresql+psycopg://someone:pw@db.example:5433/agents"
    assert not target.is_sqlite and target.sqlite_path is None


@pytest.mark.parametrize(
    ("location", "path"),
    [("store.db", Path("store.db")), ("sqlite:///dir/store.db", Path("dir/store.db"))],
)
def test_sqlite_paths_and_urls_name_a_file(location: str, path: Path) -> None:
    target = resolve_target(location, Path("unused.db"))
    assert target.is_sqlite and target.sqlite_path == path and not target.in_memory


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://someone@host/db", "the database URL is a 'mysql' one"),
        ("oracle+oracledb://someone@host/db", "the database URL is a 'oracle+oracledb' one"),
        ("postgresql+asyncpg://someone@host/db", "'postgresql+asyncpg' is a PostgreSQL driver"),
        ("postgresql+psycopg2://someone@host/db", "through psycopg 3"),
    ],
)
def test_other_databases_and_drivers_are_refused_before_connecting(url: str, said: str) -> None:
    with pytest.raises(InvalidInputError, match="contextstore") as refused:
        ContextStore.open(url)
    assert said in str(refused.value)


def test_without_psycopg_a_postgresql_url_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def without_psycopg(name: str, *args: object) -> object:
        return None if name == "psycopg" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_psycopg)
    with pytest.raises(InvalidInputError, match=r'pip install "contextstore\[postgres\]"'):
        resolve_target("postgresql://someone@host/db", Path("unused.db"))


@pytest.mark.parametrize(
    ("location", "said"),
    [
        (123, "a file path or a database URL (a str or a path object), got int"),
        (b"store.db", "got bytes"),
        ("", "the store's location is empty"),
        ("  ", "the store's location is empty"),
    ],
)
def test_a_location_that_is_no_path_is_refused(location: object, said: str) -> None:
    with pytest.raises(InvalidInputError, match="location") as refused:
        ContextStore.open(location)  # type: ignore[arg-type]
    assert said in str(refused.value)


@pytest.mark.parametrize("read_only", [False, True])
def test_a_directory_is_refused_with_a_file_to_name_instead(
    tmp_path: Path, read_only: bool
) -> None:
    with pytest.raises(InvalidInputError, match="is a directory; name a database file"):
        ContextStore.open(tmp_path, read_only=read_only)
    assert list(tmp_path.iterdir()) == []
