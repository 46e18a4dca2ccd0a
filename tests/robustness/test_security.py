"""Security: caller strings are data, never SQL; files are private; read-only means read-only.

Injection strings go through every string parameter of the API and the CLI and must come
back exactly (or be refused with a ContextStoreError), with every table intact.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import inspect

from contextstore import ContextStore, ContextStoreError, ReadOnlyError
from contextstore.cli import cli
from contextstore.core.lineage import NodeRef
from contextstore.core.rows import MessageRow
from tests.conftest import assistant, public_names, text, tool_result, tool_use, user

INJECTIONS = [
    "'; DROP TABLE messages; --",
    '" OR 1=1 --',
    "%",
    "_",
    "%_%' OR '1'='1",
    "Robert'); DELETE FROM conversations WHERE ('1'='1",
    "\u00fcn\u00efc\u00f8d\u00e9 \u2713 \U0001d518 \U0001f642 \u202ertl",
    "nul\x00byte",
    "\\'; --",
    "$1 $$ :param ? %s %(x)s",
]


def _tables(store: ContextStore) -> set[str]:
    return set(inspect(store.database.engine).get_table_names())


def _exercise(store: ContextStore, value: str, number: int) -> None:
    """Every string parameter gets ``value``; everything must round-trip exactly."""
    cid = f"inj{number}"
    conv = store.create_conversation(
        id=cid, title=value, model_id=value, metadata={value: value, "k": [value]}
    )
    assert store.get_conversation(conv.id).title == value
    assert store.get_conversation(cid).model_id == value
    assert store.get_conversation(cid).metadata == {value: value, "k": [value]}
    sent = [
        user(value),
        assistant(text(value), tool_use(value, name=value, **{value: value})),
        user(tool_result(value, value)),
        {"role": "assistant", "content": value, value: value},
    ]
    store.append(cid, sent)
    assert store.messages(cid) == sent
    assert store.render(cid) == sent
    store.checkpoint(cid, value, note=value)
    assert [c.label for c in store.checkpoints(cid)] == [value]
    store.record_request(cid, tokens_in=1, model_id=value)
    assert store.requests(cid)[-1].model_id == value
    store.add_context_update(cid, 0, 0, value, source=value, metadata={value: value})
    updates = store.context_updates(cid)
    assert (updates[-1]["text"], updates[-1]["source"]) == (value, value)
    store.set_deleted_range(cid, 2, keep=value[:16], reason=value, summary=value)
    store.append(cid, "user", "after")
    report = store.rollback(cid, value)
    assert report.removed["messages"] == 1
    assert store.messages(cid) == sent
    with pytest.raises(ContextStoreError):
        store.get_conversation(value + "x")


@pytest.mark.parametrize("value", INJECTIONS, ids=range(len(INJECTIONS)))
def test_injection_strings_round_trip_through_every_parameter(
    store: ContextStore, value: str
) -> None:
    store.create_conversation(id="bystander")
    store.append("bystander", "user", "untouched")
    tables = _tables(store)
    assert {"messages", "conversations", "blocks"} <= tables
    counts = store.row_counts("bystander")
    try:
        _exercise(store, value, INJECTIONS.index(value))
    except ContextStoreError:
        # refusing a value (PostgreSQL text cannot hold NUL) is allowed; writing half is not
        assert "\x00" in value
        assert store.row_counts()["messages"] == counts["messages"]
    assert _tables(store) == tables
    assert store.row_counts("bystander") == counts
    assert store.messages("bystander") == [{"role": "user", "content": "untouched"}]


def test_injection_strings_through_the_cli(tmp_path: Path) -> None:
    directory = tmp_path / "it's; DROP TABLE x; --"
    directory.mkdir()
    db = directory / "a'b\" OR 1=1 %_.db"
    with ContextStore.open(db) as store:
        for number, value in enumerate(INJECTIONS[:-3]):
            store.create_conversation(id=value, title=value)
            store.append(value, [user(value), assistant(value)])
            store.checkpoint(value, value)
            store.append(value, "user", f"later {number}")
    runner = CliRunner()
    for value in INJECTIONS[:-3]:
        listed = runner.invoke(cli, ["--db", str(db), "checkpoints", value], obj={})
        assert listed.exit_code == 0, listed.output
        assert value in listed.output
        rendered = runner.invoke(cli, ["--db", str(db), "render", value, "--json"], obj={})
        assert rendered.exit_code == 0 and "later" in rendered.output
        rolled = runner.invoke(
            cli, ["--db", str(db), "rollback", value, "--to", value, "--yes"], obj={}
        )
        assert rolled.exit_code == 0, rolled.output
        missing = runner.invoke(cli, ["--db", str(db), "render", value + "'--"], obj={})
        assert missing.exit_code == 3 and "Traceback" not in missing.output
    with ContextStore.open(db) as store:
        assert len(store.list_conversations()) == len(INJECTIONS) - 3
        for value in INJECTIONS[:-3]:
            assert store.messages(value) == [user(value), assistant(value)]


def test_a_new_database_and_its_directory_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = tmp_path / "fresh" / "agent.db"
        with ContextStore.open(path) as store:
            conv = store.create_conversation()
            store.append(conv.id, "user", "hello")
            created = [path, *(p for p in path.parent.iterdir() if p.name != path.name)]
            assert len(created) >= 2, "WAL side files exist while the store is open"
            for file in created:
                assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    finally:
        os.umask(old)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def read_only_store(tmp_path: Path) -> Iterator[tuple[ContextStore, Path]]:
    path = tmp_path / "ro.db"
    with ContextStore.open(path) as writer:
        writer.create_conversation(id="c", context_window=8_192)
        writer.append("c", [user("a"), assistant("b"), user("c"), assistant("d"), user("e")])
        writer.checkpoint("c", "cp")
        prepared = writer.prepare_request("c")
        writer.record_request("c", request_id=prepared.request_id, tokens_in=7_000)
        writer.checkpoint("c", "after")
        writer.append("c", "assistant", "rolled back")
        writer.rollback("c", "after")
    with ContextStore.open(path, read_only=True) as reader:
        yield reader, path


# Every public name of ContextStore is classified here; a new method fails
# test_every_public_name_of_the_store_is_classified until it is added to one of these.
WRITES: dict[str, Callable[[ContextStore], Any]] = {
    "create_conversation": lambda s: s.create_conversation(),
    "create_subagent": lambda s: s.create_subagent("c"),
    "delete_conversation": lambda s: s.delete_conversation("c"),
    "set_auto_condense": lambda s: s.set_auto_condense("c", 0.5),
    "append": lambda s: s.append("c", "assistant", "x"),
    "append_many": lambda s: s.append_many("c", [assistant("x")]),
    "record_request": lambda s: s.record_request("c", tokens_in=1),
    "checkpoint": lambda s: s.checkpoint("c", "x"),
    "rollback": lambda s: s.rollback("c", "cp"),
    "restore": lambda s: s.restore("c", 1),
    "import_timeline": lambda s: s.import_timeline("c", [MessageRow(FUTURE, assistant("later"))]),
    "discard_imported_rows": lambda s: s.discard_imported_rows(
        "c", after=s.message_timestamps("c")[-1] - 1
    ),
    "set_conversation_metadata": lambda s: s.set_conversation_metadata("c", {"k": 1}),
    "set_conversation_model": lambda s: s.set_conversation_model("c", context_window=4_096),
    "transaction": lambda s: _append_in_a_transaction(s),
    "set_deleted_range": lambda s: s.set_deleted_range("c", 2),
    "add_context_update": lambda s: s.add_context_update("c", 0, 0, "x"),
    "prepare_request": lambda s: s.prepare_request("c"),
    "truncate": lambda s: s.truncate("c", "half"),
    "fork": lambda s: s.fork("c"),
    "run_processors": lambda s: s.run_processors("c"),
    "add_lineage": lambda s: s.add_lineage(
        "c", NodeRef.update(s.add_context_update("c", 0, 0, "y"), 0, 0), (0, 0)
    ),
}
READS: dict[str, Callable[[ContextStore], Any]] = {
    "rollback (dry run)": lambda s: s.rollback("c", "cp", dry_run=True),
    "get_conversation": lambda s: s.get_conversation("c"),
    "list_conversations": lambda s: s.list_conversations(),
    "messages": lambda s: s.messages("c"),
    "nodes": lambda s: [s.nodes("c", view="pristine"), s.nodes("c", view="active")],
    "render": lambda s: [s.render("c", format=f) for f in (None, "anthropic", "openai", "gemini")],
    "deleted_range": lambda s: s.deleted_range("c"),
    "context_updates": lambda s: s.context_updates("c"),
    "requests": lambda s: s.requests("c"),
    "request_payload": lambda s: s.request_payload("c", s.requests("c")[0].id),
    "checkpoints": lambda s: s.checkpoints("c"),
    "check": lambda s: s.check("c"),
    "backup": lambda s: s.backup(tempfile.mkdtemp()),
    "row_counts": lambda s: s.row_counts("c"),
    "audit": lambda s: s.audit("c"),
    "timeline": lambda s: s.timeline("c"),
    "checkpoint_at": lambda s: s.checkpoint_at("c", "cp"),
    "message_count": lambda s: s.message_count("c"),
    "viewed_messages": lambda s: s.viewed_messages("c"),
    "search": lambda s: s.search("a"),
    "query": lambda s: s.query("SELECT count(*) FROM messages"),
    "message_timestamps": lambda s: s.message_timestamps("c"),
    "snapshot": lambda s: _two_reads_in_a_snapshot(s),
    "source_records": lambda s: s.source_records("c"),
    "removed_source_records": lambda s: s.removed_source_records("c"),
    "lineage": lambda s: s.lineage("c", (0, 0)),
    "lineage_edges": lambda s: s.lineage_edges("c"),
    "processor_runs": lambda s: s.processor_runs("c"),
}
LIFECYCLE = {"open", "close", "database", "path", "recover"}
PUBLIC_NAME = {"rollback (dry run)": "rollback"}
"""Entries above that exercise a mode of a method classified elsewhere."""


def _append_in_a_transaction(store: ContextStore) -> None:
    with store.transaction():
        store.append("c", "assistant", "x")


"""Opening and closing, the handles beneath the store, and ``recover`` (a classmethod on files,
never on an open store): neither reads nor writes its rows."""


def _two_reads_in_a_snapshot(store: ContextStore) -> tuple[int, int]:
    with store.snapshot():
        return len(store.messages("c")), len(store.message_timestamps("c"))


def test_every_public_name_of_the_store_is_classified() -> None:
    public = public_names(ContextStore)
    reads = {PUBLIC_NAME.get(name, name) for name in READS}
    assert not set(WRITES) & (reads - set(PUBLIC_NAME.values()))
    assert public - set(WRITES) - reads - LIFECYCLE == set(), "classify the new names"
    assert set(WRITES) | reads | LIFECYCLE <= public, "remove names that are gone"


@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_read_only_store_refuses_every_write(
    read_only_store: tuple[ContextStore, Path], name: str
) -> None:
    store, path = read_only_store
    before = _digest(path)
    with pytest.raises(ReadOnlyError):
        WRITES[name](store)
    assert _digest(path) == before
    assert len(store.messages("c")) == 5


@pytest.mark.parametrize("name", sorted(READS))
def test_a_read_only_store_serves_every_read(
    read_only_store: tuple[ContextStore, Path], name: str
) -> None:
    store, path = read_only_store
    before = _digest(path)
    READS[name](store)
    assert _digest(path) == before


@pytest.mark.parametrize("name", sorted(WRITES))
def test_every_write_writes_on_a_writable_store(tmp_path: Path, name: str) -> None:
    """The classification is not vacuous: each call above does write when it may."""
    path = tmp_path / "rw.db"
    with ContextStore.open(path) as store:
        store.create_conversation(id="c", context_window=8_192)
        store.append("c", [user("a"), assistant("b"), user("c"), assistant("d"), user("e")])
        store.checkpoint("c", "cp")
        store.append("c", "user", "after the checkpoint")
        store.checkpoint("c", "after")
        store.append("c", "assistant", "rolled back")
        store.rollback("c", "after")
        if name == "discard_imported_rows":
            store.append("c", "user", "imported last")

        def state() -> Any:
            return store.row_counts(), store.list_conversations()

        before = state()
        WRITES[name](store)
        assert state() != before


FUTURE = 4_000_000_000_000
"""A ts in 2096: later than any row the tests write."""

GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_mask_secrets_on_write_never_stores_a_token(tmp_path: Path) -> None:
    assert len(GITHUB_TOKEN) == 40
    path = tmp_path / "masked.db"
    with ContextStore.open(path, mask_secrets_on_write=True) as store:
        store.create_conversation(id="c")
        store.append(
            "c",
            [
                user(f"my token is {GITHUB_TOKEN}"),
                assistant(tool_use("t1", name="bash", command=f"export GH={GITHUB_TOKEN}")),
                user(tool_result("t1", f"GH={GITHUB_TOKEN}")),
                {"role": "assistant", "content": f"using {GITHUB_TOKEN}"},
            ],
        )
        assert len(store.messages("c")) == 4
    connection = sqlite3.connect(path)
    try:
        dumped = "\n".join(connection.iterdump())
    finally:
        connection.close()
    assert "my token is" in dumped, "the messages were stored"
    assert GITHUB_TOKEN not in dumped
