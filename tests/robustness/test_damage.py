"""Damaged files are named, checked, backed up from and recovered (README "Guarantees")."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.core.errors import (
    ConversationNotFoundError,
    CorruptDatabaseError,
    IntegrityViolationError,
    InvalidInputError,
    NotFoundError,
)
from contextstore.facade.maintenance import MAX_REPORTED_PROBLEMS
from contextstore.storage import damaged_file
from tests.cli.conftest import run
from tests.robustness.damage import (
    overwrite_header,
    overwrite_middle_page,
    seed_store,
    seeded_file,
    truncate,
)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _engine_damage(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return [row[0] for row in connection.execute("PRAGMA integrity_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    finally:
        connection.close()


# -- open ---------------------------------------------------------------------------------


def _text_file(path: Path) -> None:
    path.write_text("name,value\nnot,a database\n" * 50)


def _zero_length(path: Path) -> None:
    path.write_bytes(b"")


DAMAGE: dict[str, Callable[[Path], object]] = {
    "text file": _text_file,
    "overwritten header": overwrite_header,
    "truncated": truncate,
    "zero-length": _zero_length,
}


@pytest.mark.parametrize("read_only", [False, True])
@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_open_names_a_damaged_file_and_leaves_it_alone(
    tmp_path: Path, kind: str, read_only: bool
) -> None:
    path = tmp_path / "store.db"
    if kind != "text file":
        seeded_file(path, conversations=1, messages=30)
    DAMAGE[kind](path)
    before = _digest(path)
    with pytest.raises(CorruptDatabaseError) as caught:
        ContextStore.open(path, read_only=read_only)
    message = str(caught.value)
    assert str(path) in message
    assert ("zero-length" in message) if kind == "zero-length" else ("recover" in message)
    assert caught.value.exit_code == 5
    assert _digest(path) == before
    assert not path.with_name("store.db-wal").exists()


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_the_cli_exits_5_with_what_to_do(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "store.db"
    if kind != "text file":
        seeded_file(path, conversations=1, messages=30)
    DAMAGE[kind](path)
    got = run("--db", str(path), "conversations")
    assert got.code == 5, got.err
    assert got.err.startswith("error: ") and got.err.count("\n") == 1
    assert "contextstore recover" in got.err or "zero-length" in got.err
    assert "ContextStore.recover" not in got.err


def test_a_missing_path_becomes_a_store_and_never_exists_empty(tmp_path: Path) -> None:
    path = tmp_path / "new" / "store.db"
    with ContextStore.open(path) as store:
        assert path.stat().st_size > 0
        store.create_conversation()
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in path.parent.iterdir() if not p.name.startswith("store.db")) == []
    with ContextStore.open(path) as store:
        assert len(store.list_conversations()) == 1


def _orphaned_wal(tmp_path: Path) -> Path:
    """A database's write-ahead log, holding committed pages, beside a missing file."""
    seeded = seeded_file(tmp_path / "moved.db", conversations=1, messages=6)
    connection = sqlite3.connect(seeded.path)
    try:
        connection.execute("PRAGMA wal_autocheckpoint = 0")
        connection.execute("UPDATE conversations SET title = 'in the log'")
        connection.commit()
        wal = seeded.path.with_name("moved.db-wal").read_bytes()
    finally:
        connection.close()
    missing = tmp_path / "store.db"
    missing.with_name("store.db-wal").write_bytes(wal)
    return missing


@pytest.mark.parametrize(
    "args", [["conversations"], ["check"], ["import", "gemini", "{chat}"]], ids=lambda a: a[0]
)
def test_a_write_ahead_log_without_its_database_is_named_and_left_alone(
    tmp_path: Path, args: list[str]
) -> None:
    missing = _orphaned_wal(tmp_path)
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "parts": [{"text": "hi"}]}]))
    wal = missing.with_name("store.db-wal")
    before = _digest(wal)
    got = run("--db", str(missing), *(str(chat) if a == "{chat}" else a for a in args))
    assert got.code == 5, got.err
    assert got.err.count("\n") == 1
    assert f"its write-ahead log {wal} is there" in got.err and "move" in got.err
    assert not missing.exists() and not missing.with_name("store.db-shm").exists()
    assert _digest(wal) == before


def test_a_page_overwritten_in_the_middle_opens_but_check_finds_it(tmp_path: Path) -> None:
    seeded = seeded_file(tmp_path / "store.db")
    overwrite_middle_page(seeded.path)
    assert _engine_damage(seeded.path) != ["ok"]  # SQLite itself sees the damage
    with ContextStore.open(seeded.path) as store:  # open does not read every page
        report = store.check(raise_on_problems=False)
        assert not report.ok and report.corrupt and report.integrity == "quick_check"
        assert store.check(full=True, raise_on_problems=False).integrity == "integrity_check"
        with pytest.raises(CorruptDatabaseError, match="contextstore recover"):
            store.check()
    got = run("--db", str(seeded.path), "check")
    assert got.code == 5 and "integrity" in got.out and "recover" in got.err
    got = run("--db", str(seeded.path), "check", "--json", "--full")
    assert got.code == 5
    answer = json.loads(got.out)
    assert answer["ok"] is False and answer["integrity"] == "integrity_check"
    assert any(p["check"] == "integrity" for p in answer["problems"])


def test_reads_that_reach_a_damaged_page_raise_corrupt_database_error(tmp_path: Path) -> None:
    seeded = seeded_file(tmp_path / "store.db")
    overwrite_middle_page(seeded.path)
    with ContextStore.open(seeded.path) as store:
        failed = 0
        for cid in seeded.conversations:
            try:
                store.render(cid)
                store.messages(cid)
            except CorruptDatabaseError:
                failed += 1
        assert failed >= 1
        store.create_conversation()  # the store goes on working where it can


def test_an_audit_that_reaches_a_value_that_is_not_json_names_the_damage(
    tmp_path: Path,
) -> None:
    """The audit's views read block data with SQLite's JSON functions, whose "malformed
    JSON" ended `audit` and `report` in an internal error (exit 70) where `show` names the
    damaged row (exit 5)."""
    seeded = seeded_file(tmp_path / "store.db", conversations=1, messages=4)
    cid = seeded.conversations[0]
    _break(seeded.path, BREAKS["render"], cid)
    with ContextStore.open(seeded.path) as store, pytest.raises(CorruptDatabaseError) as damaged:
        store.audit(cid)
    assert str(damaged.value).startswith(
        "the database holds a value that is not valid JSON (malformed JSON); 'contextstore "
        "check' shows where; "
    )
    for command in (["audit", cid], ["report", cid, "-o", str(tmp_path / "r.html")]):
        got = run("--db", str(seeded.path), *command)
        assert got.code == 5, got.err
        assert got.err.startswith("error: the database holds a value that is not valid JSON")
    query = run("--db", str(seeded.path), "sql", "SELECT json_extract('{bad', '$')")
    assert query.code == 2 and query.err == "error: the query failed: malformed JSON.\n"


# -- check: the store's invariants ---------------------------------------------------------

BREAKS: dict[str, str] = {
    "message_count": "UPDATE conversations SET message_count = message_count + 1 WHERE id = :c",
    "message_idx": "DELETE FROM blocks WHERE conversation_id = :c AND message_idx = 5; "
    "DELETE FROM messages WHERE conversation_id = :c AND idx = 5",
    "message_ts": "UPDATE messages SET ts = 3 WHERE conversation_id = :c AND idx = 4",
    "clock": "UPDATE conversations SET last_ts = created_ts WHERE id = :c",
    "block_owner": "INSERT INTO blocks (conversation_id, message_idx, block_idx, type, data, "
    "node_type, token_count) VALUES (:c, 900, 0, 'text', '{}', 'user_prompt', 1)",
    "block_idx": "UPDATE blocks SET block_idx = 3 WHERE conversation_id = :c AND message_idx = 7",
    # The newest message's blocks: every render still reads (it skips the message).
    "message_blocks": "DELETE FROM blocks WHERE conversation_id = :c AND message_idx = 19",
    "update_target": "UPDATE context_updates SET block_idx = 9 WHERE conversation_id = :c",
    "range_bounds": "UPDATE conversations SET last_ts = last_ts + 1 WHERE id = :c; "
    "INSERT INTO deleted_ranges (conversation_id, ts, start_idx, end_idx, keep, reason) "
    "SELECT :c, last_ts, 2, 1, 'none', 'shrunk' FROM conversations WHERE id = :c",
    "request_options": "UPDATE api_requests SET options_sha256 = 'ff' WHERE conversation_id = :c "
    "AND options_sha256 IS NOT NULL",
    "archive_rollback": "UPDATE archived_messages SET rollback_id = 900 WHERE conversation_id = :c",
    "owner": "INSERT INTO checkpoints (conversation_id, ts, label) VALUES ('ghost', 1, 'x')",
    "parent": "UPDATE conversations SET parent_id = 'ghost' WHERE id = :c",
    "token_counts": "UPDATE messages SET token_count = -1 WHERE conversation_id = :c AND idx = 0",
    "json": "UPDATE messages SET meta = 'not json' WHERE conversation_id = :c AND idx = 0",
    "render": "UPDATE blocks SET data = '[1, 2' WHERE conversation_id = :c AND message_idx = 0",
}


def _break(path: Path, sql: str, cid: str) -> None:
    connection = sqlite3.connect(path)  # foreign keys off: damage a careless tool could do
    try:
        for statement in sql.split("; "):
            connection.execute(statement.replace(":c", "?"), (cid,) * statement.count(":c"))
        connection.commit()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_file(tmp_path_factory.mktemp("healthy") / "store.db", messages=20).path


@pytest.mark.parametrize("invariant", sorted(BREAKS))
def test_check_names_each_broken_invariant(healthy: Path, tmp_path: Path, invariant: str) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(healthy.read_bytes())
    with ContextStore.open(path) as store:
        first, second = [c.id for c in store.list_conversations()][:2]
        assert store.check().ok
    _break(path, BREAKS[invariant], first)
    with ContextStore.open(path, read_only=True) as store:
        assert invariant in store.check(raise_on_problems=False).checks
        found = store.check(raise_on_problems=False).problems
        assert invariant in {p.check for p in found}, found
        assert not any(p.check == "integrity" for p in found)
        with pytest.raises(IntegrityViolationError) as caught:
            store.check()
        assert not isinstance(caught.value, CorruptDatabaseError)
        message = str(caught.value)
        assert message.startswith(f"{len(found)} broken invariant(s): ") and "None" not in message
        assert ("more)" in message) == (len(found) > MAX_REPORTED_PROBLEMS)
        if invariant != "owner":
            assert first in {p.conversation_id for p in found}
            assert store.check(second).ok
            assert not store.check(first, raise_on_problems=False).ok
    got = run("--db", str(path), "check", "--json")
    assert got.code == 5 and invariant in {p["check"] for p in got.json()["problems"]}


def test_check_is_ok_on_every_backend_and_scoped_to_a_conversation(store: ContextStore) -> None:
    ids = seed_store(store, conversations=2, messages=8)
    report = store.check()
    assert report.ok and report.conversations_checked == 2
    assert report.integrity == ("skipped" if report.backend == "postgresql" else "quick_check")
    assert {"message_count", "message_idx", "range_bounds", "render"} <= set(report.checks)
    assert ("integrity" in report.checks) == (report.backend == "sqlite")
    assert report.conversation_id is None
    scoped = store.check(ids[0])
    assert scoped.conversations_checked == 1 and scoped.conversation_id == ids[0]
    with pytest.raises(ConversationNotFoundError):
        store.check("no-such-conversation")


def test_check_finds_broken_counts_on_postgresql_too(store: ContextStore) -> None:
    if store.database.is_sqlite:
        pytest.skip("the SQLite cases are above; this one edits rows through the engine")
    from sqlalchemy import text

    (cid,) = seed_store(store, conversations=1, messages=6)
    with store.database.engine.begin() as connection:
        connection.execute(
            text("UPDATE conversations SET message_count = 99 WHERE id = :c"), {"c": cid}
        )
        connection.execute(
            text("UPDATE messages SET token_count = -5 WHERE conversation_id = :c AND idx = 1"),
            {"c": cid},
        )
    found = {p.check for p in store.check(raise_on_problems=False).problems}
    assert {"message_count", "token_counts"} <= found
    with pytest.raises(IntegrityViolationError, match="message_count"):
        store.check(cid)


def test_a_full_check_rebuilds_each_prepared_payload_and_names_one_that_changed(
    store: ContextStore,
) -> None:
    # A block edited by hand after a request was sent: `request ID --payload` failed
    # (exit 5) while `check --full` said ok.
    cid = store.create_conversation(context_window=200_000).id
    store.append(cid, "user", "Read the config.")
    sent = store.prepare_request(cid, system="Be brief.")
    store.record_request(cid, tokens_in=10, tokens_out=2)  # usage only: nothing to compare
    store.append(cid, "assistant", "It sets the port.")
    kept = store.prepare_request(cid, system="Be brief.")
    assert store.check(full=True).ok and "payloads" in store.check(full=True).checks
    assert "payloads" not in store.check().checks

    def edit(connection: Any) -> None:
        connection.exec_driver_sql(
            "UPDATE blocks SET text = 'Read the secrets.' "
            f"WHERE conversation_id = '{cid}' AND message_idx = 0"
        )

    store.database.write(edit)
    store.render_cache.clear()
    assert store.check().ok  # every invariant holds: only the payloads tell
    report = store.check(full=True, raise_on_problems=False)
    assert [(p.check, p.conversation_id) for p in report.problems] == [
        ("payloads", cid),
        ("payloads", cid),
    ]
    assert [p.detail.split(":")[0] for p in report.problems] == [
        f"request {sent.request_id}",
        f"request {kept.request_id}",
    ]
    with pytest.raises(IntegrityViolationError, match="no longer matches the payload hash st"):
        store.check(cid, full=True)
    assert report.problems[0].detail.endswith("the payload hash stored when it was sent")


def test_a_full_check_names_a_prepared_request_it_cannot_rebuild_and_why(
    store: ContextStore,
) -> None:
    cid = store.create_conversation().id
    store.append(cid, "user", "Read the config.")
    sent = store.prepare_request(cid)
    raise_rules = (
        "UPDATE request_options SET data = json_set(data, '$.view_rules', 99)"
        if store.database.is_sqlite
        else "UPDATE request_options SET data = jsonb_set(data::jsonb, '{view_rules}', '99')"
    )
    store.database.write(lambda connection: connection.exec_driver_sql(raise_rules))
    (problem,) = store.check(full=True, raise_on_problems=False).problems
    assert problem.check == "payloads" and problem.conversation_id == cid
    assert problem.detail.startswith(f"request {sent.request_id}: the options of request")
    assert "view rules 99" in problem.detail


# -- backup ---------------------------------------------------------------------------------


def test_backup_is_consistent_while_a_writer_appends(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    stop = threading.Event()
    with ContextStore.open(path) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "first")
        written: list[int] = []

        def writer() -> None:
            with ContextStore.open(path) as other:
                while not stop.is_set():
                    written.append(other.append(cid, "assistant", "x " * 2_000).index)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            while len(written) < 5:
                stop.wait(0.01)
            results = [store.backup(tmp_path / f"copy-{n}.db") for n in range(3)]
        finally:
            stop.set()
            thread.join()
    for result in results:
        with ContextStore.open(result.path, read_only=True) as copy:
            assert copy.check().ok
            assert len(copy.messages(cid)) == copy.message_count(cid) >= 6
    assert not list(tmp_path.glob(".*partial*"))


def test_backup_to_a_directory_names_a_new_file_and_never_overwrites(tmp_path: Path) -> None:
    seeded = seeded_file(tmp_path / "store.db", conversations=1, messages=6)
    folder = tmp_path / "backups"
    folder.mkdir()
    with ContextStore.open(seeded.path) as store:
        first = store.backup(folder)
        second = store.backup(folder)
        assert Path(first.path).parent == folder and first.path != second.path
        assert Path(first.path).name.startswith("store-") and first.conversations == 1
        existing = tmp_path / "existing.db"
        existing.write_bytes(b"keep me")
        with pytest.raises(InvalidInputError, match="force"):
            store.backup(existing)
        assert existing.read_bytes() == b"keep me"
        replaced = store.backup(existing, force=True)
        with pytest.raises(InvalidInputError, match="database of the store being read"):
            store.backup(seeded.path, force=True)
    with ContextStore.open(replaced.path, read_only=True) as copy:
        assert copy.messages(seeded.conversations[0]) == seeded.views[seeded.conversations[0]]
    got = run("--db", str(seeded.path), "backup", str(existing))
    assert got.code == 2 and "--force" in got.err
    got = run("--db", str(seeded.path), "backup", str(folder), "--json")
    assert got.code == 0 and Path(got.json()["path"]).exists()
    # A device is said to be no file at once: it was "already exists ... pass --force",
    # and with --force, "not a regular file".
    got = run("--db", str(seeded.path), "backup", os.devnull)
    assert got.code == 2 and got.err == (
        f"error: {os.devnull} is not a regular file (a folder, a device, a pipe or a socket); "
        "name a file to write. Nothing was written.\n"
    )


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal", "-writer"])
def test_a_copy_named_as_a_file_beside_another_database_is_refused(
    tmp_path: Path, suffix: str
) -> None:
    # backup bk/x.db-wal beside bk/x.db succeeded, and the next open of bk/x.db took the
    # copy for its own log (or deleted it): the backup was lost.
    seeded = seeded_file(tmp_path / "store.db", conversations=1, messages=4)
    folder = tmp_path / "bk"
    folder.mkdir()
    other = seeded_file(folder / "x.db", conversations=1, messages=2)
    target = folder / f"x.db{suffix}"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    refused = f"named as .*x.db's .* Name the file without the '{suffix}'"
    with ContextStore.open(seeded.path) as store:
        with pytest.raises(InvalidInputError, match=refused):
            store.backup(target)
        alone = tmp_path / "alone"
        alone.mkdir()
        assert Path(store.backup(alone / suffix).path).name == suffix  # the suffix and no name
    got = run("--db", str(seeded.path), "backup", str(target))
    assert got.code == 2 and "Nothing was written" in got.err
    with pytest.raises(InvalidInputError, match=f"without the '{suffix}' ending"):
        ContextStore.recover(seeded.path, folder / f"r.db{suffix}")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    with ContextStore.open(folder / "x.db", read_only=True) as kept:
        assert kept.messages(other.conversations[0]) == other.views[other.conversations[0]]


@pytest.mark.parametrize("needs_migrate", [False, True], ids=["current", "needs-migrate"])
def test_a_backup_destination_ending_in_a_separator_must_be_a_directory(
    tmp_path: Path, needs_migrate: bool
) -> None:
    seeded = seeded_file(tmp_path / "store.db", conversations=1, messages=4)
    if needs_migrate:
        with contextlib.closing(sqlite3.connect(seeded.path)) as connection:
            connection.execute("UPDATE alembic_version SET version_num = '0011'")
            connection.commit()
    existing = tmp_path / "existing.db"
    existing.write_bytes(b"keep me")
    got = run("--db", str(seeded.path), "backup", f"{tmp_path / 'backups'}/")
    assert got.code == 2 and "backups/ does not exist" in got.err, got.err
    assert not (tmp_path / "backups").exists()
    got = run("--db", str(seeded.path), "backup", f"{existing}/", "--force")
    assert got.code == 2 and "existing.db/ is a file, not a directory" in got.err, got.err
    assert existing.read_bytes() == b"keep me"
    (tmp_path / "backups").mkdir()
    got = run("--db", str(seeded.path), "backup", f"{tmp_path / 'backups'}/", "--json")
    assert got.code == 0, got.err
    assert Path(got.json()["path"]).parent == tmp_path / "backups"


@pytest.mark.parametrize("table", ["blocks", "conversations"])
def test_a_backup_of_a_store_with_a_damaged_page_is_refused_with_what_to_do(
    tmp_path: Path, table: str
) -> None:
    seeded = seeded_file(tmp_path / "store.db", conversations=4, messages=40)
    overwrite_middle_page(seeded.path, table=table)
    before = _digest(seeded.path)
    folder = tmp_path / "backups"
    folder.mkdir()
    got = run("--db", str(seeded.path), "backup", str(folder / "copy.db"))
    assert got.code == 5, got.err
    assert got.err.startswith("error: the backup copy fails SQLite's check (")
    assert got.err.count("\n") == 1 and "contextstore recover SRC DEST" in got.err
    assert list(folder.iterdir()) == []
    assert _digest(seeded.path) == before


def test_backup_of_a_memory_store_and_refusal_on_postgresql(
    store: ContextStore, tmp_path: Path
) -> None:
    seed_store(store, conversations=1, messages=4)
    if store.database.is_sqlite:
        result = store.backup(tmp_path / "copy.db")
        with ContextStore.open(result.path) as copy:
            assert copy.check().ok and len(copy.list_conversations()) == 1
    else:
        with pytest.raises(InvalidInputError, match="pg_dump"):
            store.backup(tmp_path / "copy.db")
        assert not (tmp_path / "copy.db").exists()


# -- recover --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["middle page", "truncated", "overwritten header"])
def test_recover_salvages_what_is_readable_into_a_store_that_passes_check(
    tmp_path: Path, kind: str
) -> None:
    seeded = seeded_file(tmp_path / "store.db", conversations=4, messages=40)
    damage = {
        "middle page": overwrite_middle_page,
        "truncated": truncate,
        "overwritten header": overwrite_header,
    }[kind]
    damage(seeded.path)
    before = _digest(seeded.path)
    report = ContextStore.recover(seeded.path, tmp_path / "recovered.db")
    assert _digest(seeded.path) == before  # the damaged file is never written
    assert report.notes == () or all(not n.startswith("check:") for n in report.notes)
    with ContextStore.open(tmp_path / "recovered.db") as store:
        assert store.check(full=True).ok
        recovered = {c.id: store.messages(c.id) for c in store.list_conversations()}
        store.append(seeded.conversations[0], "user", "life goes on")  # a working store
    kept = 0
    for cid, original in seeded.views.items():
        got = recovered.get(cid, [])
        assert got == original[: len(got)]  # a prefix of what was there: a history that existed
        kept += len(got)
        if cid not in report.damaged_conversations:
            assert got == original
    total = sum(len(v) for v in seeded.views.values())
    assert "the schema revision could not be read; assumed the current one" not in report.notes
    unreadable = sorted({t.unreadable for t in report.tables})
    if kind == "overwritten header":
        assert report.header_repaired and report.complete and kept == total
        assert unreadable == [0]
    else:
        assert not report.complete and report.damaged_conversations and 0 < kept < total
        assert report.lost_rows > 0 or any(t.unreadable < 0 for t in report.tables)
        # a lost tail is counted as -1 (unknown), rows skipped inside a table one by one
        assert unreadable[0] == (-1 if kind == "truncated" else 0) and unreadable[-1] >= 0
        assert kind == "truncated" or unreadable[-1] > 0


def test_recover_reads_past_a_damaged_page_of_a_table_without_rowids(tmp_path: Path) -> None:
    """``messages`` has no rowids (revision 0012): its scan goes on past a damaged page
    with the next conversation the other tables name. The conversations whose messages
    were on the page keep a prefix of their history; the others come back whole."""
    seeded = seeded_file(tmp_path / "store.db", conversations=6, messages=60)
    overwrite_middle_page(seeded.path, table="messages")
    report = ContextStore.recover(seeded.path, tmp_path / "recovered.db")
    with ContextStore.open(tmp_path / "recovered.db") as store:
        # A conversation whose newest messages were lost keeps nothing after its last
        # message: its requests prepared from the lost ones went with them (check --full
        # rebuilds each payload kept).
        assert store.check(full=True).ok
        recovered = {c.id: store.messages(c.id) for c in store.list_conversations()}
        for cid in report.damaged_conversations:
            stamps = store.message_timestamps(cid)
            last = stamps[-1] if stamps else -1
            assert all(r.ts <= last for r in store.requests(cid))
    whole = 0
    for cid, original in seeded.views.items():
        got = recovered.get(cid, [])
        assert got == original[: len(got)]
        whole += got == original
        if cid not in report.damaged_conversations:
            assert got == original
    assert report.damaged_conversations and whole >= 2
    (messages,) = [t for t in report.tables if t.table == "messages"]
    assert messages.unreadable == -1
    assert any(n.startswith("messages: rows on damaged pages") for n in report.notes)
    ordered = sorted(seeded.conversations)
    assert recovered.get(ordered[-1]) == seeded.views[ordered[-1]]  # past the damaged page


def test_the_key_order_scan_reads_each_readable_row_once_in_key_order(tmp_path: Path) -> None:
    """``scan_by_key`` on an intact ``messages`` table reads every row once, in key order,
    numbered 1..n in place of rowids, and reports no loss. Past a damaged page it reads on
    conversation by conversation: no row twice, every conversation a prefix of its own
    rows, and nothing lost but the damaged page's run of keys and the rest of the
    conversation that run ends in; conversations after the last one known are found too."""
    path = tmp_path / "store.db"
    with ContextStore.open(path) as store:
        # Ids that sort below "None" and below any index read as text: a scan that went on
        # from a wrong point would pass over them.
        ids = {store.create_conversation(id=f"{n}-damage").id for n in range(6)}
        for cid in sorted(ids):
            roles = ("user", "assistant")
            store.append(cid, [{"role": roles[i % 2], "content": f"{i}"} for i in range(300)])
    select = "SELECT conversation_id, idx, ts FROM messages ORDER BY conversation_id, idx"
    with contextlib.closing(sqlite3.connect(path)) as connection:
        original = connection.execute(select).fetchall()
        assert damaged_file.key_columns(connection, "messages") == ["conversation_id", "idx"]
        intact = damaged_file.scan_by_key(connection, "messages", ["idx", "ts"], set())
    assert not intact.keyed_loss
    assert intact.rows == [(n, idx, ts) for n, (_, idx, ts) in enumerate(original, start=1)]

    overwrite_middle_page(path, table="messages")
    with contextlib.closing(sqlite3.connect(path)) as connection:
        key = ["conversation_id", "idx", "ts"]
        scan = damaged_file.scan_by_key(connection, "messages", key, ids)
    assert scan.keyed_loss
    assert [row[0] for row in scan.rows] == list(range(1, len(scan.rows) + 1))
    got = [row[1:] for row in scan.rows]
    assert len(set(got)) == len(got) and got == sorted(got)
    for cid in ids:
        theirs = [r for r in original if r[0] == cid]
        mine = [r for r in got if r[0] == cid]
        assert mine == theirs[: len(mine)]
    # A page holds a run of keys: what is lost is that run and the rest of the last
    # conversation it touches, so the missing rows are one run ending with a conversation.
    missing = [n for n, row in enumerate(original) if row not in set(got)]
    assert missing and missing == list(range(missing[0], missing[-1] + 1))
    assert original[missing[-1] + 1][0] != original[missing[-1]][0]  # the middle page is not
    # in the last conversation, which comes back whole
    # A conversation no other table names is still found when it sorts after the last one
    # named: the scan reads on from there.
    with contextlib.closing(sqlite3.connect(path)) as connection:
        unnamed = damaged_file.scan_by_key(connection, "messages", key, ids - {max(ids)})
    assert unnamed.rows == scan.rows


def test_recover_refuses_an_existing_destination_and_a_missing_source(tmp_path: Path) -> None:
    seeded = seeded_file(tmp_path / "store.db", conversations=1, messages=4)
    (tmp_path / "taken.db").write_bytes(b"mine")
    with pytest.raises(InvalidInputError, match="already exists"):
        ContextStore.recover(seeded.path, tmp_path / "taken.db")
    assert (tmp_path / "taken.db").read_bytes() == b"mine"
    with pytest.raises(NotFoundError, match="there is no file at"):
        ContextStore.recover(tmp_path / "missing.db", tmp_path / "new.db")
    assert not (tmp_path / "new.db").exists()


def test_recover_refuses_a_file_a_newer_version_wrote_and_says_so(tmp_path: Path) -> None:
    seeded = seeded_file(tmp_path / "store.db", conversations=1, messages=4)
    with contextlib.closing(sqlite3.connect(seeded.path)) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999'")
        connection.commit()
    before = _digest(seeded.path)
    files = sorted(tmp_path.iterdir())
    got = run("recover", str(seeded.path), str(tmp_path / "new.db"))
    assert got.code == 4, got.err
    assert got.err == (
        f"error: {seeded.path} is at revision 9999, which this version of contextstore does "
        "not know (it was written by a newer version); upgrade contextstore.\n"
    )
    assert _digest(seeded.path) == before
    assert sorted(tmp_path.iterdir()) == files


def test_recover_on_the_command_line_reports_per_table(tmp_path: Path) -> None:
    seeded = seeded_file(tmp_path / "store.db", conversations=4, messages=40)
    overwrite_middle_page(seeded.path)
    got = run("recover", str(seeded.path), str(tmp_path / "new.db"), "--json")
    assert got.code == 0, got.err
    answer = got.json()
    assert answer["complete"] is False and answer["lost_rows"] > 0
    assert {t["table"] for t in answer["tables"]} >= {"conversations", "messages", "blocks"}
    got = run("--db", str(tmp_path / "new.db"), "check")
    assert got.code == 0 and "ok" in got.out
    got = run("recover", str(seeded.path), str(tmp_path / "other.db"))
    assert got.code == 0 and "messages" in got.out and "lost rows" in got.err


def test_a_backup_of_a_memory_store_into_a_directory_is_named_contextstore(
    tmp_path: Path,
) -> None:
    with ContextStore.open(":memory:") as store:
        store.create_conversation()
        made = store.backup(tmp_path)
    assert Path(made.path).parent == tmp_path
    assert Path(made.path).name.startswith("contextstore-") and made.conversations == 1
