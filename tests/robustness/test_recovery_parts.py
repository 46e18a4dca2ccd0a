"""The parts of recovery one by one: where a damaged history stops being trustworthy, the
page size of a file without a header, conversations whose row was lost, a WAL's commits."""

from __future__ import annotations

import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.storage import backup as backup_files
from contextstore.storage.damaged_file import BTREE_PAGE_TYPES, guess_page_size
from contextstore.storage.recovery import first_loss
from tests.conftest import assistant, user


def test_a_sound_history_has_no_first_loss() -> None:
    assert first_loss([(0, 10, True), (1, 11, True), (2, 15, True)]) is None
    assert first_loss([]) is None


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([(0, 10, True), (2, 12, True)], (12, 1)),  # a gap: message 1 is missing
        ([(0, 10, True), (1, 11, False), (2, 12, True)], (11, 1)),  # an unsound message
        ([(0, 10, True), (1, 20, True), (2, 20, True)], (21, 2)),  # a ts that does not grow
        ([(0, 10, True), (1, 20, True), (2, 15, True)], (21, 2)),  # a ts that goes back
        ([(1, 10, True)], (10, 0)),  # the first message is missing
    ],
)
def test_the_first_loss_is_the_first_message_out_of_line(
    messages: list[tuple[int, int, bool]], expected: tuple[int, int]
) -> None:
    assert first_loss(messages) == expected


@pytest.mark.parametrize("page_size", [4_096, 8_192, 16_384])
def test_the_page_size_is_guessed_from_where_b_tree_pages_start(page_size: int) -> None:
    pages = 8
    data = bytearray(page_size * pages)
    kind = next(iter(BTREE_PAGE_TYPES))
    for n in range(1, pages):
        if n not in (2, 4):  # overflow pages: their first byte is no page type
            data[n * page_size] = kind
    assert guess_page_size(bytes(data)) == page_size


def test_a_file_too_small_to_tell_gets_the_most_likely_page_size() -> None:
    assert guess_page_size(bytes(100)) == 8_192


def test_a_store_whose_conversation_rows_are_gone_comes_back_with_stubs(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with ContextStore.open(path) as store:
        cid = store.create_conversation(title="lost").id
        store.append(cid, [user("a"), assistant("b"), user("c")])
        stamps = store.message_timestamps(cid)
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA foreign_keys = OFF")
    connection.execute("DELETE FROM conversations")
    connection.commit()
    connection.close()
    report = ContextStore.recover(path, tmp_path / "recovered.db")
    assert cid in report.recreated_conversations
    with ContextStore.open(tmp_path / "recovered.db") as recovered:
        record = recovered.get_conversation(cid)
        assert (record.created_ts, record.last_ts) == (stamps[0], stamps[-1])
        assert recovered.messages(cid)[0]["content"][0]["text"] == "a"
        assert recovered.check().ok


def test_commits_still_in_the_write_ahead_log_are_recovered(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    crashed = tmp_path / "crashed.db"
    with ContextStore.open(path) as store:
        cid = store.create_conversation().id
        store.append(cid, [user(f"m{i}") if i % 2 == 0 else assistant(f"m{i}") for i in range(6)])
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size > 0  # not checkpointed yet: as after a crash
        shutil.copyfile(path, crashed)
        shutil.copyfile(wal, crashed.with_name(crashed.name + "-wal"))
    ContextStore.recover(crashed, tmp_path / "recovered.db")
    with ContextStore.open(tmp_path / "recovered.db") as recovered:
        assert len(recovered.messages(cid)) == 6


def test_backups_to_one_directory_in_one_second_get_numbered_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backup_files.time, "strftime", lambda _format: "20261201-120000")
    folder = tmp_path / "backups"
    folder.mkdir()
    with ContextStore.open(tmp_path / "store.db") as store:
        store.create_conversation()
        made = [Path(store.backup(folder).path).name for _ in range(4)]
    assert made == [
        "store-20261201-120000.db",
        "store-20261201-120000-2.db",
        "store-20261201-120000-3.db",
        "store-20261201-120000-4.db",
    ]
    assert all(stat.S_IMODE((folder / name).stat().st_mode) == 0o600 for name in made)
