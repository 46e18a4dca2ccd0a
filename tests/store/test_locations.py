"""Where a store lives: the paths and URLs ``ContextStore.open`` takes, and those it refuses
before connecting to anything."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from contextstore import ContextStore
from contextstore.core.errors import ContextStoreError, InvalidInputError, NotFoundError
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


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
def test_a_socket_directory_written_as_libpq_writes_it_in_the_host_is_the_socket(
    scheme: str,
) -> None:
    # libpq's URL form of a Unix socket; SQLAlchemy kept the host as written and psycopg
    # looked up '%2Fvar%2Frun%2Fpostgresql' as a host name ("failed to resolve host").
    target = resolve_target(
        f"{scheme}://someone:pw@%2Fvar%2Frun%2Fpostgresql:5433/agents", Path("x")
    )
    url = make_url(target.url)
    assert url.host is None and url.query["host"] == "/var/run/postgresql"
    assert (url.username, url.password, url.port, url.database) == ("someone", "pw", 5433, "agents")


@pytest.mark.parametrize(
    ("location", "path"),
    [("store.db", Path("store.db")), ("sqlite:///dir/store.db", Path("dir/store.db"))],
)
def test_sqlite_paths_and_urls_name_a_file(location: str, path: Path) -> None:
    target = resolve_target(location, Path("unused.db"))
    assert target.is_sqlite and target.sqlite_path == path and not target.in_memory


NAMES_SQL_URLS_READ_OTHERWISE = ["a?b.db", "c%20d.db", "e#f.db", "g%3fh.db", "i&mode=rwc.db"]
"""File names with characters a URL gives a meaning: SQLAlchemy read '?' as its query and
decoded '%xx', SQLite's URIs also end a path at '#'."""


@pytest.mark.parametrize("name", NAMES_SQL_URLS_READ_OTHERWISE)
@pytest.mark.parametrize("read_only", [False, True], ids=["to-write", "read-only"])
def test_a_file_name_holding_url_characters_opens_that_file_and_creates_no_other(
    tmp_path: Path, name: str, read_only: bool
) -> None:
    # 'c%20d.db' opened (and created) 'c d.db', 'a?b.db' opened 'a': the store read "needs
    # migrate" from an empty stray file, and a write went there.
    path = tmp_path / name
    with ContextStore.open(path) as store:
        cid = store.create_conversation(title="here").id
    with ContextStore.open(path, read_only=read_only) as store:
        assert store.get_conversation(cid).title == "here"
    made = {p.name for p in tmp_path.iterdir()}
    assert {m for m in made if not m.startswith(name)} == set()
    backup = tmp_path / "copies" / name
    backup.parent.mkdir()
    with ContextStore.open(path) as store:
        store.backup(backup)
    report = ContextStore.recover(path, tmp_path / "copies" / f"r-{name}")
    assert report.conversations == 1
    with ContextStore.open(backup, read_only=True) as copy:
        assert copy.get_conversation(cid).title == "here"


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
        ("agent\x00.db", "holds a NUL character, which no file name or URL can"),
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


def _too_long(tmp_path: Path) -> list[Path]:
    """A file name, and a folder's, over the file system's 255 bytes."""
    return [tmp_path / ("a" * 300), tmp_path / ("b" * 300) / "x.db"]


def _refused_as_wrong_path(path: Path, **options: bool) -> str:
    with pytest.raises(InvalidInputError) as refused:
        ContextStore.open(path, **options)
    assert isinstance(refused.value.__cause__, OSError)
    assert str(refused.value) == (
        f"cannot use {path} as a database file: {refused.value.__cause__.strerror}; "
        "name another path."
    )
    return str(refused.value)


@pytest.mark.parametrize("read_only", [False, True])
@pytest.mark.parametrize("auto_migrate", [True, False])
def test_a_name_too_long_is_a_wrong_path_and_nothing_is_made(
    tmp_path: Path, read_only: bool, auto_migrate: bool
) -> None:
    """Not an OSError escaping: the path is named with the system's reason, in every mode."""
    for path in _too_long(tmp_path):
        said = _refused_as_wrong_path(path, read_only=read_only, auto_migrate=auto_migrate)
        assert "File name too long" in said
    assert list(tmp_path.iterdir()) == []


def test_a_store_below_a_file_or_a_loop_is_a_wrong_path_not_damage(tmp_path: Path) -> None:
    """Creating a store where the system cannot make it: the reason, not CorruptDatabaseError."""
    (tmp_path / "file").write_text("not a folder", encoding="utf-8")
    (tmp_path / "loop").symlink_to("loop")
    before = sorted(tmp_path.iterdir())
    assert "Not a directory" in _refused_as_wrong_path(tmp_path / "file" / "x.db")
    assert "symbolic links" in _refused_as_wrong_path(tmp_path / "loop" / "x.db")
    assert sorted(tmp_path.iterdir()) == before


def test_without_auto_migrate_a_missing_file_is_refused_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "typo" / "agent.db"
    with pytest.raises(NotFoundError, match=r"there is no database at .*agent\.db") as refused:
        ContextStore.open(missing, auto_migrate=False)
    assert "auto_migrate=True" in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_without_auto_migrate_an_existing_store_opens(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    with ContextStore.open(path) as store:
        store.append(store.create_conversation().id, "user", "hello")
    with ContextStore.open(path, auto_migrate=False) as store:
        [conversation] = store.list_conversations()
        assert store.messages(conversation.id) == [{"role": "user", "content": "hello"}]


def test_a_sqlite_uri_names_the_file_it_points_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "with space.db"
    url = f"sqlite:///file:{str(path).replace(' ', '%20')}?mode=rwc&uri=true"
    assert resolve_target(url, Path("unused.db")).sqlite_path == path
    with pytest.raises(NotFoundError, match="there is no database at"):
        ContextStore.open(url, auto_migrate=False)
    with ContextStore.open(url) as store:
        store.append(store.create_conversation().id, "user", "hello")
    # The file the URI names holds the store; nothing was made under a path spelled "file:".
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("with space")) == []
    with ContextStore.open(path, read_only=True) as store:
        [conversation] = store.list_conversations()
        assert store.messages(conversation.id) == [{"role": "user", "content": "hello"}]
    with ContextStore.open(url, auto_migrate=False) as store:
        assert len(store.list_conversations()) == 1


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("sqlite:///file::memory:?cache=shared&uri=true", "names an in-memory SQLite database"),
        ("sqlite:///file:/x.db?mode=memory&uri=true", "names an in-memory SQLite database"),
        ("sqlite:///file://elsewhere/x.db?uri=true", "does not name a local SQLite file"),
    ],
)
def test_sqlite_uris_contextstore_cannot_keep_a_store_in_are_refused(
    url: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match=said):
        ContextStore.open(url)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("query", ["mode=ro", "immutable=1"])
def test_a_read_only_uri_of_a_missing_file_is_not_found_and_creates_nothing(
    tmp_path: Path, query: str
) -> None:
    url = f"sqlite:///file:{tmp_path / 'missing.db'}?{query}&uri=true"
    with pytest.raises(NotFoundError, match="opens an existing file only"):
        ContextStore.open(url)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("in_memory", [True, False])
@pytest.mark.parametrize(
    ("engine_kwargs", "said"),
    [
        ([("pool_size", 5)], "got list"),
        ({1: 2}, "got a key that is not a string"),
        ({"no_such_argument": 1}, "SQLAlchemy refused the engine_kwargs given: Invalid argument"),
        # Python's TypeError ("got multiple values for keyword argument"), AttributeError
        # and KeyError until 2026-12-05:
        ({"url": "sqlite://"}, "engine_kwargs cannot set url: contextstore passes it"),
        ({"connect_args": {"timeout": 1}}, "engine_kwargs cannot set connect_args: "),
        ({"poolclass": 5}, "engine_kwargs cannot set poolclass"),
        ({"module": 5}, "SQLAlchemy refused the engine_kwargs given: 'int' object has no"),
        ({"echo": "maybe"}, "SQLAlchemy refused the engine_kwargs given: 'maybe'"),
    ],
)
def test_engine_kwargs_create_engine_refuses_are_invalid_input_and_make_no_file(
    tmp_path: Path, in_memory: bool, engine_kwargs: object, said: str
) -> None:
    location = ":memory:" if in_memory else tmp_path / "agent.db"
    if not in_memory and engine_kwargs == {"poolclass": 5}:
        said = "SQLAlchemy refused the engine_kwargs given: 'int' object has no attribute"
    with pytest.raises(InvalidInputError, match="engine_kwargs") as refused:
        ContextStore.open(location, engine_kwargs=engine_kwargs)  # type: ignore[arg-type]
    assert said in str(refused.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("engine_kwargs", "said"),
    [
        ({"isolation_level": "BOGUS"}, "ArgumentError: Invalid value 'BOGUS' for isolation_level"),
        ({"creator": 5}, "TypeError: 'int' object is not callable"),
    ],
)
def test_engine_kwargs_refused_only_when_connecting_are_invalid_input_and_leave_nothing(
    tmp_path: Path, engine_kwargs: dict[str, object], said: str
) -> None:
    """SQLAlchemy checks these at the first connection: Python's error reached the caller,
    and the new file (and the folders made for it) stayed."""
    existing = tmp_path / "existing.db"
    ContextStore.open(existing).close()
    before = existing.read_bytes()
    for location in (tmp_path / "new" / "deeper" / "agent.db", existing, ":memory:"):
        with pytest.raises(InvalidInputError) as refused:
            ContextStore.open(location, engine_kwargs=engine_kwargs)
        assert str(refused.value).startswith(
            f"SQLAlchemy refused the engine_kwargs given when it connected: {said}"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.db"]
    assert existing.read_bytes() == before


def test_engine_kwargs_sqlalchemy_takes_still_reach_it(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "agent.db", engine_kwargs={"pool_timeout": 7}) as store:
        assert store._db.engine.pool.timeout() == 7


def _other_application_file(path: Path) -> bytes:
    """A SQLite file of another application (rollback-journal mode, two tables)."""
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
    connection.execute("CREATE TABLE prefs (k TEXT, v TEXT)")
    connection.execute("INSERT INTO prefs VALUES ('a', 'b')")
    connection.commit()
    connection.close()
    return path.read_bytes()


@pytest.mark.parametrize("read_only", [False, True], ids=["to-write", "read-only"])
def test_another_applications_database_is_refused_and_left_as_it_was(
    tmp_path: Path, read_only: bool
) -> None:
    """Opened for writing it would get contextstore's 36 tables and WAL mode; to read, it
    would pass for an empty store."""
    path = tmp_path / "places.sqlite"
    before = _other_application_file(path)
    with pytest.raises(InvalidInputError) as refused:
        ContextStore.open(path, read_only=read_only)
    assert str(refused.value) == (
        f"{path} holds 2 tables of another application (moz_places, prefs) and no "
        "contextstore schema; contextstore keeps its tables only in a database of its own "
        "(or a new, empty one), so nothing was changed: name a contextstore database or a "
        "new file."
    )
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["places.sqlite"]


def test_the_cli_refuses_another_applications_database_as_a_bad_value(tmp_path: Path) -> None:
    from tests.cli.conftest import run

    path = tmp_path / "places.sqlite"
    before = _other_application_file(path)
    for args in (["migrate"], ["conversations"], ["--read-only", "conversations"]):
        got = run("--db", str(path), *args)
        assert got.code == 2 and "tables of another application" in got.err, got.err
    assert path.read_bytes() == before


def test_a_store_with_sqlites_own_tables_only_or_its_revision_lost_is_not_another_application(
    tmp_path: Path,
) -> None:
    stats_only = tmp_path / "stats.db"
    connection = sqlite3.connect(stats_only)
    connection.execute("CREATE TABLE t (x)")
    connection.execute("ANALYZE")  # sqlite_stat1
    connection.execute("DROP TABLE t")
    connection.commit()
    connection.close()
    with ContextStore.open(stats_only) as store:
        assert store.list_conversations() == []
    store_db = tmp_path / "store.db"
    with ContextStore.open(store_db) as store:
        store.create_conversation()
    connection = sqlite3.connect(store_db)
    connection.execute("DROP TABLE alembic_version")
    connection.commit()
    connection.close()
    with pytest.raises(ContextStoreError) as refused:
        ContextStore.open(store_db, auto_migrate=False)
    assert "another application" not in str(refused.value)


NO_SUCH_HOME = "~contextstore-no-such-user"
"""A ``~user`` prefix naming a user this machine does not have."""


def _no_such_home_refusal(path: str) -> str:
    return (
        f"{path} begins with {NO_SUCH_HOME}, which names no home directory on this machine "
        "(no such user, or $HOME is unset); write the path out in full."
    )


def test_a_home_of_no_user_is_a_wrong_path_not_an_internal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Path.expanduser`` raised ``RuntimeError`` ("Could not determine home directory")
    from open, backup and recover, and the CLI answered it as an internal error (exit 70)."""
    from tests.cli.conftest import run

    pwd = pytest.importorskip("pwd")
    with pytest.raises(KeyError):
        pwd.getpwnam(NO_SUCH_HOME[1:])
    monkeypatch.chdir(tmp_path)
    path = f"{NO_SUCH_HOME}/x.db"
    for location in (path, f"sqlite:///file:{path}?uri=true"):
        with pytest.raises(InvalidInputError) as refused:
            ContextStore.open(location)
        assert str(refused.value) == _no_such_home_refusal(path)
    with (
        ContextStore.open(tmp_path / "s.db") as store,
        pytest.raises(InvalidInputError, match="names no home directory"),
    ):
        store.backup(path)
    for source, destination in ((path, "out.db"), ("s.db", path)):
        with pytest.raises(InvalidInputError, match="names no home directory"):
            ContextStore.recover(source, destination)
    got = run("--db", path, "conversations")
    assert (got.code, got.err) == (2, f"error: {_no_such_home_refusal(path)}\n")
    got = run("conversations", env={"CONTEXTSTORE_DB": path})
    assert (got.code, got.err) == (2, f"error: {_no_such_home_refusal(path)}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
@pytest.mark.parametrize("kind", ["pipe", "device"])
def test_a_pipe_or_a_device_is_a_wrong_path_not_an_empty_database(
    tmp_path: Path, kind: str
) -> None:
    """A named pipe or /dev/null reads as zero bytes, and was refused as damage (exit 5) with
    "is an empty (zero-length) file ... restore a backup"."""
    from tests.cli.conftest import run

    if kind == "pipe":
        path = tmp_path / "store.db"
        os.mkfifo(path)
    else:
        path = Path(os.devnull)
    said = f"{path} is not a regular file (a device, a pipe or a socket); name a database file."
    for options in ({}, {"read_only": True}, {"auto_migrate": False}):
        with pytest.raises(InvalidInputError) as refused:
            ContextStore.open(path, **options)
        assert str(refused.value) == said
    for args in (["conversations"], ["--read-only", "conversations"], ["checkpoint", "c"]):
        got = run("--db", str(path), *args)
        assert (got.code, got.err) == (2, f"error: {said}\n")
    assert [p.name for p in tmp_path.iterdir()] == (["store.db"] if kind == "pipe" else [])


NOT_UTF8 = os.fsdecode(b"\xff.db")
"""A file name in another encoding (Latin-1's "ÿ.db"), as Python reads it from the system."""


def _not_utf8_refusal(what: str, text: str) -> str:
    return (
        f"{what} {text} is not UTF-8 text (a name in another encoding); contextstore names "
        "databases only in UTF-8: rename the file or link to it under a UTF-8 name, or name "
        "another path."
    )


@pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="file names are Unicode there")
def test_a_name_that_is_not_utf8_is_refused_before_anything_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening such a file read-only (every read command of the CLI), a PostgreSQL URL holding
    one, and recovering into one raised UnicodeEncodeError (exit 70 on the command line);
    a backup under such a name was written, and no store could open it."""
    from tests.cli.conftest import run

    monkeypatch.chdir(tmp_path)
    with ContextStore.open("s.db") as store:
        store.create_conversation()
    for location, shown_as in (
        (NOT_UTF8, "\\xff.db"),
        (f"sqlite:///{NOT_UTF8}", "sqlite:///\\xff.db"),
        ("\ud800.db", "\\ud800.db"),
        (f"postgresql://u@127.0.0.1:1/{NOT_UTF8}", "postgresql://u@127.0.0.1:1/\\xff.db"),
    ):
        for read_only in (False, True):
            with pytest.raises(InvalidInputError) as refused:
                ContextStore.open(location, read_only=read_only)
            assert str(refused.value) == _not_utf8_refusal("the store's location", shown_as)
    escaped = "\\xff.db"
    got = run("--db", NOT_UTF8, "conversations")
    said = _not_utf8_refusal("the store's location", escaped)
    assert (got.code, got.err) == (2, f"error: {said}\n")
    with pytest.raises(InvalidInputError) as refused:
        ContextStore.recover("s.db", NOT_UTF8)
    assert str(refused.value) == _not_utf8_refusal("the recovered store's file", escaped)
    got = run("--db", "s.db", "backup", NOT_UTF8)
    said = _not_utf8_refusal("the backup's file", escaped)
    assert (got.code, got.err) == (2, f"error: {said}\n")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("s.db")) == []
