"""Files the commands write for the user (backups, exports, recovered stores): a place that
cannot be written is a clear error with its exit code, never an internal error; nothing but a
regular file is ever replaced; a refused export writes nothing."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from contextstore import ContextStore
from contextstore.core.errors import (
    InvalidInputError,
    ReadOnlyLocationError,
    SchemaOutdatedError,
    StorageFullError,
)
from contextstore.core.os_errors import os_error
from contextstore.interop import export_cline
from contextstore.interop.writing import write_text_atomic
from contextstore.storage.migrate import downgrade
from tests.cli.conftest import Seeded, run, seed


def _refuses_creation(folder: Path) -> bool:
    try:
        os.close(os.open(folder / "contextstore-probe", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:
        return True
    os.unlink(folder / "contextstore-probe")  # pragma: no cover - a writable /sys
    return False  # pragma: no cover


UNWRITABLE = Path("/sys")
"""A folder in which the kernel refuses new files, to root as well (sysfs)."""

needs_unwritable = pytest.mark.skipif(
    not UNWRITABLE.is_dir() or not _refuses_creation(UNWRITABLE),
    reason="needs a folder in which no file can be created (Linux's /sys)",
)


@pytest.mark.parametrize(
    ("code", "kind", "exit_code"),
    [
        (errno.EROFS, ReadOnlyLocationError, 9),
        (errno.EACCES, ReadOnlyLocationError, 9),
        (errno.ENOSPC, StorageFullError, 8),
        (errno.EDQUOT, StorageFullError, 8),
        (errno.EISDIR, InvalidInputError, 2),
        (errno.ENAMETOOLONG, InvalidInputError, 2),
    ],
)
def test_an_os_error_becomes_the_stores_error_with_its_exit_code(
    code: int, kind: type[Exception], exit_code: int
) -> None:
    error = os_error(OSError(code, os.strerror(code), "/x/y.db"), "write the backup")
    assert type(error) is kind and error.exit_code == exit_code
    assert str(error).startswith(f"could not write the backup: {os.strerror(code)} (/x/y.db)")


@needs_unwritable
@pytest.mark.parametrize(
    "command",
    [
        ["backup", str(UNWRITABLE)],
        ["backup", str(UNWRITABLE / "copy.db")],
        ["export", "gemini", "{cid}", str(UNWRITABLE / "session.jsonl")],
        ["export", "gemini", "{cid}", str(UNWRITABLE / "chat.json"), "--checkpoint"],
        ["export", "cline", "{cid}", str(UNWRITABLE / "task")],
    ],
    ids=["backup-dir", "backup-file", "gemini", "gemini-checkpoint", "cline"],
)
def test_a_place_that_cannot_be_written_is_exit_9(seeded: Seeded, command: list[str]) -> None:
    args = [part.format(cid=seeded.cid) for part in command]
    got = run("--db", seeded.db, *args)
    assert got.code == 9, got.err
    assert got.err.startswith("error: could not write") and "internal error" not in got.err
    assert "pick a location you can write" in got.err
    # the file asked for (in a folder, the backup's own name), never a temporary one
    named = got.err.split("(")[-1].split(")")[0]
    asked = next(a for a in args if a.startswith(str(UNWRITABLE)))
    assert named.startswith(asked) and not Path(named).name.startswith("."), got.err
    assert ".tmp." not in named and ".partial" not in named


@needs_unwritable
def test_recovering_into_a_place_that_cannot_be_written_is_exit_9(seeded: Seeded) -> None:
    got = run("recover", seeded.db, str(UNWRITABLE / "recovered.db"))
    assert got.code == 9, got.err
    assert got.err == (
        "error: could not write the recovered store: Permission denied "
        f"({UNWRITABLE / 'recovered.db'}); pick a location you can write.\n"
    )


def test_recovering_a_missing_file_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    """Not found (exit 3), as every command says of a database file that is not there; it
    was exit 2, as if the path were malformed."""
    got = run("recover", str(tmp_path / "missing.db"), str(tmp_path / "out.db"))
    assert got.code == 3 and f"there is no file at {tmp_path / 'missing.db'}" in got.err
    assert list(tmp_path.iterdir()) == []


def test_recovering_a_directory_is_bad_input_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    got = run("recover", str(tmp_path / "folder"), str(tmp_path / "out.db"))
    assert got.code == 2 and "is not a file; name the damaged database file" in got.err
    assert [p.name for p in tmp_path.iterdir()] == ["folder"]


URL = "postgresql://owner:s3cret-pw@db.example:5432/agents"


@pytest.mark.parametrize(
    "args",
    [("recover", URL, "out.db"), ("recover", "SEEDED", URL), ("backup", URL)],
    ids=["recover-src", "recover-dest", "backup-dest"],
)
def test_a_database_url_named_as_a_sqlite_file_is_refused_with_its_password_masked(
    seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    # Read as a path, the URL lost its '//' and the refusal printed the password: "there is
    # no file at postgresql:/owner:s3cret-pw@...", "the directory postgresql:/owner:... does
    # not exist".
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    got = run(*[seeded.db if a == "SEEDED" else a for a in args], "--db", seeded.db)
    assert got.code == InvalidInputError.exit_code, got.err
    assert "s3cret-pw" not in got.err
    assert "'postgresql://owner:***@db.example:5432/agents' is a database URL" in got.err
    assert "pg_dump" in got.err
    assert list(here.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (("recover", "", "out.db"), "Invalid value for 'SRC': is empty; name the damaged"),
        (("recover", "SEEDED", ""), "Invalid value for 'DEST': is empty; name a new file for"),
        (("recover", URL, "out.db"), "error: SRC 'postgresql://owner:***@db.example:5432/"),
        (("recover", "SEEDED", URL), "error: DEST 'postgresql://owner:***@db.example:5432/"),
        (("recover", "SEEDED", "d" * 300), "error: DEST is too long for a file path (300 bytes"),
        (("recover", "s" * 300, "out.db"), "error: SRC is too long for a file path (300 bytes"),
        (("backup", URL), "error: DEST 'postgresql://owner:***@db.example:5432/agents' is a"),
        (("backup", "d" * 300), "error: DEST is too long for a file path (300 bytes"),
    ],
    ids=[
        "recover-empty-src",
        "recover-empty-dest",
        "recover-url-src",
        "recover-url-dest",
        "recover-long-dest",
        "recover-long-src",
        "backup-url-dest",
        "backup-long-dest",
    ],
)
def test_recover_and_backup_name_their_arguments_as_their_help_does(
    seeded: Seeded,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    refusal: str,
) -> None:
    """The refusals named the library's parameters: "source must be a file path, got ''",
    "destination 'postgresql://...' is a database URL", "destination is too long"."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    command = args[0]
    usage = run(command, "--help").out
    assert (" SRC DEST" if command == "recover" else " DEST\n") in usage
    got = run(*[seeded.db if a == "SEEDED" else a for a in args], "--db", seeded.db)
    assert got.code == 2, got.err
    assert refusal in got.err
    assert "source" not in got.err and "destination" not in got.err
    assert list(here.iterdir()) == []


def test_a_backup_of_a_store_needing_migrate_refuses_a_url_as_destination(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose schema needs 'contextstore migrate' is backed up by copying its file,
    which skipped the URL check: "the directory postgresql:/owner:s3cret-pw@db.example:5432
    does not exist", the password in clear."""
    old = tmp_path / "old.db"
    with ContextStore.open(old):
        pass
    engine = create_engine(f"sqlite:///{old}")
    try:
        downgrade(engine, is_sqlite=True, revision="0012")
    finally:
        engine.dispose()
    monkeypatch.chdir(tmp_path)
    got = run("--db", str(old), "backup", URL)
    assert got.code == 2, got.err
    assert got.err == (
        "error: DEST 'postgresql://owner:***@db.example:5432/agents' is a database URL, but "
        "backup reads and writes SQLite files; name a file. A PostgreSQL database is backed up "
        "with pg_dump, restored with pg_restore and checked with pg_amcheck.\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["backup", "{pipe}", "--force"],
        ["backup", "{pipe}"],
        ["export", "gemini", "{cid}", "{pipe}", "--force"],
        ["export", "cline", "{cid}", "{folder}", "--force", "--history", "{pipe}"],
    ],
    ids=["backup-force", "backup", "gemini", "cline-history"],
)
def test_nothing_but_a_regular_file_is_replaced(
    seeded: Seeded, tmp_path: Path, command: list[str]
) -> None:
    pipe = _fifo(tmp_path)
    folder = tmp_path / "task"
    args = [p.format(cid=seeded.cid, pipe=pipe, folder=folder) for p in command]
    got = run("--db", seeded.db, *args)
    assert got.code == 2, got.err
    assert "is not a regular file" in got.err or "already exists" in got.err
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert not folder.exists()


def _files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize(
    "history", ["folder", "{broken", '{"not": "a list"}'], ids=["folder", "broken", "object"]
)
def test_an_export_into_clines_storage_with_a_bad_history_file_writes_nothing(
    seeded: Seeded, tmp_path: Path, history: str
) -> None:
    storage = tmp_path / "storage"
    (storage / "tasks").mkdir(parents=True)
    state = storage / "state"
    state.mkdir()
    history_file = state / "taskHistory.json"
    if history == "folder":
        history_file.mkdir()
    else:
        history_file.write_text(history, encoding="utf-8")
    before = _files(storage)
    got = run("--db", seeded.db, "export", "cline", seeded.cid, str(storage / "tasks" / "t1"))
    assert got.code == 2, got.err
    assert "taskHistory.json" in got.err and "internal error" not in got.err
    assert _files(storage) == before
    assert not (storage / "tasks" / "t1").exists()


def test_a_missing_history_file_for_an_import_is_refused_before_the_store_is_made(
    tmp_path: Path,
) -> None:
    task = tmp_path / "tasks" / "1700000000000"
    task.mkdir(parents=True)
    (task / "api_conversation_history.json").write_text(
        '[{"role": "user", "content": "hi"}]', encoding="utf-8"
    )
    db = tmp_path / "new.db"
    got = run(
        "--db", str(db), "import", "cline", str(task), "--history", str(tmp_path / "none.json")
    )
    assert got.code == 2 and "'--history'" in got.err and "does not exist" in got.err
    assert not db.exists()


def test_a_backup_still_opens_as_a_store(seeded: Seeded, tmp_path: Path) -> None:
    got = run("--db", seeded.db, "backup", str(tmp_path / "copy.db"))
    assert got.code == 0, got.err
    with ContextStore.open(tmp_path / "copy.db", read_only=True) as copy:
        assert copy.get_conversation(seeded.cid).id == seeded.cid


def test_a_store_that_needs_migrating_can_be_backed_up_first(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation(title="before the upgrade").id
        store.append(cid, "user", "hello")
    engine = create_engine(f"sqlite:///{db}")
    try:
        downgrade(engine, is_sqlite=True, revision="0005")
    finally:
        engine.dispose()
    before = db.read_bytes()
    assert run("--db", str(db), "conversations").code == 4  # as reads are

    got = run("--db", str(db), "backup", str(tmp_path / "copy.db"), "--json")
    assert got.code == 0, got.err
    assert got.json()["conversations"] == 1
    assert db.read_bytes() == before
    with pytest.raises(SchemaOutdatedError):
        ContextStore.open(tmp_path / "copy.db", auto_migrate=False).close()
    with ContextStore.open(tmp_path / "copy.db") as copy:  # migrates the copy
        assert copy.get_conversation(cid).title == "before the upgrade"


def test_an_empty_backup_destination_is_refused(
    seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    got = run("--db", seeded.db, "backup", "")
    assert got.code == 2 and "Invalid value for 'DEST'" in got.err
    assert list(here.iterdir()) == []


@pytest.mark.parametrize(
    "command",
    [
        ["export", "gemini", "{cid}", "{file}/session.jsonl"],
        ["export", "cline", "{cid}", "{file}/tasks/t1"],
    ],
    ids=["gemini", "cline"],
)
def test_an_export_below_a_file_names_the_file(
    seeded: Seeded, tmp_path: Path, command: list[str]
) -> None:
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine", encoding="utf-8")
    got = run("--db", seeded.db, *[p.format(cid=seeded.cid, file=blocker) for p in command])
    assert got.code == 2 and f"{blocker} is a file, not a folder" in got.err
    assert blocker.read_text(encoding="utf-8") == "mine"


# -- the store's own files are never an output ---------------------------------------------

_STORE_FILES = {
    "database": "",
    "write-ahead log": "-wal",
    "shared-memory index": "-shm",
    "rollback journal": "-journal",
    "writer lock": "-writer",
}


def _named(seeded: Seeded, suffix: str, how: str) -> str:
    """A name for the store's file with ``suffix``: as is, through a link to it, or by a
    detour through its folder's parent."""
    path = Path(seeded.db + suffix)
    if how == "link":
        link = path.parent / f"link-to{suffix or '-db'}"
        link.symlink_to(path)
        return str(link)
    if how == "detour":
        return str(path.parent / ".." / path.parent.name / path.name)
    return str(path)


def _commands(seeded: Seeded, target: str) -> dict[str, list[str]]:
    return {
        "backup": ["--db", seeded.db, "backup", target, "--force"],
        "report": ["--db", seeded.db, "report", seeded.cid, "-o", target],
        "export gemini": ["--db", seeded.db, "export", "gemini", seeded.cid, target, "--force"],
        "export cline --history": [
            "--db", seeded.db, "export", "cline", seeded.cid,
            str(Path(seeded.db).parent / "task"), "--history", target, "--force",
        ],
    }  # fmt: skip


@pytest.mark.parametrize("how", ["as is", "link", "detour"])
@pytest.mark.parametrize("what", list(_STORE_FILES))
@pytest.mark.parametrize("command", ["backup", "report", "export gemini", "export cline --history"])
def test_no_command_writes_over_the_store_it_reads(
    seeded: Seeded, command: str, what: str, how: str
) -> None:
    """Written over, the database is lost, and its write-ahead log holds commits not yet in
    it: a store held open by another process keeps its last commits there."""
    writer = seeded.store()  # another agent's store, open: the log and the lock exist
    writer.append(seeded.cid, "user", "committed, and still only in the write-ahead log")
    expected = writer.messages(seeded.cid)
    target = _named(seeded, _STORE_FILES[what], how)
    before = Path(target).read_bytes() if what != "database" and Path(target).exists() else None
    got = run(*_commands(seeded, target)[command])
    assert got.code == 2, got.err
    assert f"is the {what} of the store being read" in got.err
    assert "Nothing was written" in got.err
    if before is not None:
        assert Path(target).read_bytes() == before
    writer.close()
    with seeded.store() as store:
        assert store.messages(seeded.cid) == expected
        store.check(seeded.cid)


def test_a_cline_task_file_named_like_the_store_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "task"
    folder.mkdir()
    seeded = seed(folder / "ui_messages.json")
    got = run("--db", seeded.db, "export", "cline", seeded.cid, str(folder), "--force")
    assert got.code == 2 and "is the database of the store being read" in got.err
    with seeded.store() as store:
        assert store.messages(seeded.cid)


def test_the_api_refuses_the_store_files_and_takes_a_file_beside_them(seeded: Seeded) -> None:
    from contextstore.interop import export_gemini

    with seeded.store() as store:
        with pytest.raises(InvalidInputError, match="write-ahead log of the store being read"):
            store.backup(seeded.db + "-wal", force=True)
        with pytest.raises(InvalidInputError, match="database of the store being read"):
            export_gemini(store, seeded.cid, seeded.db, overwrite=True)
        near = Path(seeded.db + "-wal.json")  # a name that only starts like the log's
        export_gemini(store, seeded.cid, near)
        assert near.is_file()
        assert store.backup(seeded.db + ".bak").conversations == 1


def test_a_store_in_memory_has_no_files_to_protect(tmp_path: Path) -> None:
    from contextstore.interop import export_gemini

    with ContextStore.open(":memory:") as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "hello")
        out = tmp_path / ":memory:"
        export_gemini(store, cid, out)
        assert out.is_file()


def test_an_export_over_a_file_or_task_files_says_to_pass_force(
    seeded: Seeded, tmp_path: Path
) -> None:
    out = tmp_path / "session.json"
    assert run("--db", seeded.db, "export", "gemini", seeded.cid, str(out)).code == 0
    again = run("--db", seeded.db, "export", "gemini", seeded.cid, str(out))
    assert again.code == 2
    assert again.err.endswith("already exists; pass --force to replace. Nothing was written.\n")
    task = tmp_path / "task"
    assert run("--db", seeded.db, "export", "cline", seeded.cid, str(task)).code == 0
    again = run("--db", seeded.db, "export", "cline", seeded.cid, str(task))
    assert again.code == 2 and "api_conversation_history.json" in again.err
    assert again.err.endswith("; pass --force to replace. Nothing was written.\n")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["export", "gemini", "{cid}", "-"], "'OUT'"),
        (["export", "cline", "{cid}", "-"], "'OUT_DIR'"),
        (["export", "cline", "{cid}", "task", "--history", "-"], "'--history'"),
        (["backup", "-"], "'DEST'"),
        (["recover", "{db}", "-"], "'DEST'"),
        (["bench", "--json-out", "-", "--sizes", "10"], "'--json-out'"),
        (["crash-test", "--db", "-", "--kills", "1"], "'--db'"),
    ],
    ids=["export-gemini", "export-cline", "history", "backup", "recover", "bench", "crash-test"],
)
def test_a_dash_where_standard_output_cannot_go_is_refused(
    seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], named: str
) -> None:
    """``export gemini CID -`` wrote a file named ``-`` in the current folder, where
    ``report -o -`` writes to standard output: a ``-`` that cannot mean standard output is
    refused (exit 2), nothing written; ``./-`` names such a file."""
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    result = run("--db", seeded.db, *[a.format(cid=seeded.cid, db=seeded.db) for a in args])
    assert result.code == 2, result.err
    assert f"Invalid value for {named}: '-' means standard output" in result.err
    assert "'./-' for one named '-'" in result.err
    assert sorted(tmp_path.iterdir()) == before


def test_a_file_named_dash_is_written_as_dot_slash_dash(
    seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run("--db", seeded.db, "export", "gemini", seeded.cid, "./-").code == 0
    assert (tmp_path / "-").is_file()


def test_a_written_path_refuses_only_a_bare_dash() -> None:
    import click

    from contextstore.cli.common import WrittenPath

    path = WrittenPath("a backup")
    with pytest.raises(click.BadParameter, match="cannot take a backup"):
        path.convert("-", None, None)
    assert path.convert("./-", None, None) == "./-"
    assert path.convert("--", None, None) == "--"


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common umask, whatever the test runner's."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_022")
def test_exported_files_get_the_umask_and_keep_the_mode_they_had(
    seeded: Seeded, tmp_path: Path
) -> None:
    """Exports used to be 0600 (a temporary file's mode, renamed into place), and writing
    over a file with --force changed its mode to that."""
    session = tmp_path / "chats" / "session.jsonl"
    session.parent.mkdir()  # the folder of a file a command writes must exist
    assert run("--db", seeded.db, "export", "gemini", seeded.cid, str(session)).code == 0
    assert _mode(session) == 0o644
    session.chmod(0o640)
    args = ("--db", seeded.db, "export", "gemini", seeded.cid, str(session), "--force")
    assert run(*args).code == 0
    assert _mode(session) == 0o640
    checkpoint = tmp_path / "checkpoint-x.json"
    args = ("--db", seeded.db, "export", "gemini", seeded.cid, str(checkpoint), "--checkpoint")
    assert run(*args).code == 0
    assert _mode(checkpoint) == 0o644
    history = tmp_path / "storage" / "state" / "taskHistory.json"
    history.parent.mkdir(parents=True)
    history.write_text("[]")
    history.chmod(0o644)
    task = tmp_path / "storage" / "tasks" / seeded.cid
    task.parent.mkdir()
    assert run("--db", seeded.db, "export", "cline", seeded.cid, str(task)).code == 0
    written = sorted(task.iterdir())
    assert written and {_mode(p) for p in [*written, history]} == {0o644}
    history.chmod(0o664)
    (task / "api_conversation_history.json").chmod(0o600)
    assert run("--db", seeded.db, "export", "cline", seeded.cid, str(task), "--force").code == 0
    assert _mode(history) == 0o664
    assert _mode(task / "api_conversation_history.json") == 0o600
    assert {_mode(p) for p in written if p.name != "api_conversation_history.json"} == {0o644}
    assert not [p for p in tmp_path.rglob("*") if ".tmp." in p.name]


def test_a_written_file_takes_the_umask_or_the_replaced_files_mode(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "new.json", "{}")
        assert _mode(tmp_path / "new.json") == 0o640
        (tmp_path / "new.json").chmod(0o604)
        write_text_atomic(tmp_path / "new.json", "[]")
        assert _mode(tmp_path / "new.json") == 0o604
        assert (tmp_path / "new.json").read_text() == "[]"
    finally:
        os.umask(old)


MISSING_FOLDER_COMMANDS = {
    "export gemini": (["export", "gemini", "{cid}", "{missing}/s.jsonl"], "'OUT'"),
    "export gemini --checkpoint": (
        ["export", "gemini", "{cid}", "{missing}/c.json", "--checkpoint"],
        "'OUT'",
    ),
    "export cline": (["export", "cline", "{cid}", "{missing}/task"], "'OUT_DIR'"),
    "export cline --history": (
        ["export", "cline", "{cid}", "{here}/task", "--history", "{missing}/taskHistory.json"],
        "'--history'",
    ),
    "backup": (["backup", "{missing}/b.db"], "'DEST'"),
    "recover": (["recover", "{db}", "{missing}/r.db"], "'DEST'"),
    "report -o": (["report", "{cid}", "-o", "{missing}/r.html"], "'-o' / '--output'"),
    "bench --json-out": (["bench", "--json-out", "{missing}/b.json"], "'--json-out'"),
    "crash-test --db": (["crash-test", "--db", "{missing}/c.db"], "'--db'"),
}


@pytest.mark.parametrize("name", MISSING_FOLDER_COMMANDS)
def test_every_command_refuses_a_file_in_a_folder_that_is_not_there(
    seeded: Seeded, tmp_path: Path, name: str
) -> None:
    """``export gemini`` (and ``export cline`` above OUT_DIR) made every missing folder of a
    mistyped path, where ``backup`` and ``recover`` refused it without naming DEST, and
    ``export cline --history`` wrote the task files, then failed naming a temporary file.
    Each refuses it now, naming the argument and the folder, and writes nothing."""
    here = tmp_path / "here"
    here.mkdir()
    missing = here / "typo" / "deeper"
    args, flag = MISSING_FOLDER_COMMANDS[name]
    values = {"cid": seeded.cid, "db": seeded.db, "here": here, "missing": missing}
    got = run("--db", seeded.db, *[a.format(**values) for a in args])
    assert got.code == 2, got.err
    assert f"Invalid value for {flag}" in got.err, got.err
    assert f"the folder {missing} does not exist; create it first" in got.err, got.err
    assert list(here.iterdir()) == []


def test_a_library_export_cline_makes_the_history_files_folder_as_it_makes_out_dir(
    seeded: Seeded, tmp_path: Path
) -> None:
    """The Python exporters make the folders they write into (the command line refuses a
    missing one first): a history file in a missing folder failed after the task files
    were written, under an error naming its temporary file."""
    history = tmp_path / "state" / "taskHistory.json"
    task = tmp_path / "tasks" / "t1"
    with seeded.store() as store:
        report = export_cline(store, seeded.cid, task, history_path=history)
    assert history in report.files and history.is_file()
    assert (task / "api_conversation_history.json").is_file()


@needs_unwritable
def test_an_export_clines_history_file_that_cannot_be_written_is_named_not_its_temporary(
    seeded: Seeded, tmp_path: Path
) -> None:
    history = UNWRITABLE / "taskHistory.json"
    got = run("--db", seeded.db, "export", "cline", seeded.cid, str(tmp_path / "t"), "--history",
              str(history))  # fmt: skip
    assert got.code == 9, got.err
    assert f"({history})" in got.err and ".tmp." not in got.err, got.err
