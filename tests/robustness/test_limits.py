"""The named limits and the cases issue 12 found, on every backend: refused alike with a
ContextStoreError and nothing written; NUL kept exactly where the store keeps texts."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contextstore import ContentTooLargeError, ContextStore, ContextStoreError, InvalidInputError
from contextstore.cli import cli
from contextstore.core.validate import (
    MAX_INT32,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_TEXT_BYTES,
    check_json_value,
)
from tests.conftest import assistant, tool_result, tool_use, user

CID = "c"


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _victim(store: ContextStore) -> None:
    store.create_conversation(id=CID)
    store.append(CID, [user("a"), assistant("b"), user("c"), assistant("d"), user("e")])
    store.append(CID, [assistant("f"), user("g"), assistant("h"), user("i")])


def _tool(value: Any) -> list[dict[str, Any]]:
    return [tool_use("t", name="n", a=value)]


REFUSED: dict[str, Callable[[ContextStore], Any]] = {
    "note surrogate": lambda s: s.checkpoint(CID, note="\ud800"),
    "note NUL": lambda s: s.checkpoint(CID, note="a\x00b"),
    "note over MAX_TEXT_BYTES": lambda s: s.checkpoint(
        CID, note="\u00e9" * (MAX_TEXT_BYTES // 2 + 1)
    ),
    "reason surrogate": lambda s: s.set_deleted_range(CID, 2, reason="\ud800"),
    "reason NUL": lambda s: s.set_deleted_range(CID, 2, reason="\x00"),
    "summary surrogate": lambda s: s.set_deleted_range(CID, 2, summary="\ud800"),
    "summary wrong type": lambda s: s.set_deleted_range(CID, 2, summary=5),
    "summary over MAX_TEXT_BYTES": lambda s: s.set_deleted_range(
        CID, 2, summary="s" * (MAX_TEXT_BYTES + 1)
    ),
    "keep of 40": lambda s: s.set_deleted_range(CID, 2, keep="k" * 40),
    "truncate summary surrogate": lambda s: s.truncate(CID, "half", summary="\ud800"),
    "summarizer surrogate": lambda s: s.truncate(CID, "half", summarizer=lambda m: "\ud800"),
    "system surrogate": lambda s: s.prepare_request(CID, system="\ud800"),
    "system NUL": lambda s: s.prepare_request(CID, system="a\x00"),
    "system over MAX_TEXT_BYTES": lambda s: s.prepare_request(
        CID, system="p" * (MAX_TEXT_BYTES + 1)
    ),
    "tools NaN": lambda s: s.prepare_request(
        CID, tools=[{"name": "x", "input_schema": {"a": math.nan}}]
    ),
    "pipeline wrong type": lambda s: s.prepare_request(CID, pipeline=[1]),
    "title surrogate": lambda s: s.create_conversation(title="\ud800"),
    "metadata key surrogate": lambda s: s.create_conversation(metadata={"\ud800": 1}),
    "metadata NUL": lambda s: s.create_conversation(metadata={"k": "a\x00"}),
    "metadata deep": lambda s: s.create_conversation(metadata={"k": _deep(10_000)}),
    "metadata over MAX_JSON_BYTES": lambda s: s.create_conversation(
        metadata={"k": "m" * MAX_JSON_BYTES}
    ),
    "meta surrogate": lambda s: s.append(CID, "user", "x", meta={"k": "\ud800"}),
    "meta NUL": lambda s: s.append(CID, "user", "x", meta={"k": "\x00"}),
    "meta deep": lambda s: s.append(CID, "user", "x", meta={"k": _deep(10_000)}),
    "meta bytes": lambda s: s.append(CID, "user", "x", meta={"k": b"x"}),
    "meta NaN": lambda s: s.append(CID, "user", "x", meta={"k": math.inf}),
    "text surrogate": lambda s: s.append(CID, "user", "a\ud800"),
    "block extra set": lambda s: s.append(CID, "user", [{"type": "text", "text": "x", "z": {1}}]),
    "block extra bytes": lambda s: s.append(
        CID, "user", [{"type": "text", "text": "x", "z": b"x"}]
    ),
    "block extra NaN": lambda s: s.append(
        CID, "user", [{"type": "text", "text": "x", "z": math.nan}]
    ),
    "tool input deep": lambda s: s.append(CID, "assistant", _tool(_deep(10_000))),
    "tool input surrogate": lambda s: s.append(CID, "assistant", _tool("\ud800")),
    "tool input NUL": lambda s: s.append(CID, "assistant", _tool("\x00")),
    "tool input huge int": lambda s: s.append(CID, "assistant", _tool(10**5000)),
    "tool input NaN": lambda s: s.append(CID, "assistant", _tool(math.nan)),
    "update kind wrong type": lambda s: s.add_context_update(CID, 1, 0, "x", kind=5),
    "update metadata wrong type": lambda s: s.add_context_update(CID, 1, 0, "x", metadata=[1]),
    "update base_hash wrong type": lambda s: s.add_context_update(CID, 1, 0, "x", base_hash=5),
    "update text surrogate": lambda s: s.add_context_update(CID, 1, 0, "\ud800"),
    "update metadata deep": lambda s: s.add_context_update(
        CID, 1, 0, "x", metadata={"k": _deep(10_000)}
    ),
    "request total over MAX_INT32": lambda s: s.record_request(
        CID, tokens_in=MAX_INT32, tokens_out=1
    ),
    "search surrogate": lambda s: s.search("\ud800"),
    "search NUL": lambda s: s.search("a\x00"),
    "query surrogate": lambda s: s.query("SELECT '\ud800'"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_each_case_is_refused_alike_and_writes_nothing(store: ContextStore, case: str) -> None:
    _victim(store)
    before = store.row_counts()
    with pytest.raises(ContextStoreError) as raised:
        REFUSED[case](store)
    assert isinstance(raised.value, InvalidInputError), type(raised.value)
    assert store.row_counts() == before
    str(raised.value).encode("utf-8")  # the message itself prints


def test_a_request_total_at_max_int32_truncates_and_one_past_it_is_refused(
    store: ContextStore,
) -> None:
    """A truncation stores the request's total (``tokens_in + tokens_out + cache_writes +
    cache_reads``) in its range row; each count fits an INTEGER column, but their sum did
    not, and PostgreSQL then failed every truncate and prepare_request of the conversation
    (and its audit and timeline, which add the counts in SQL) with a driver error. A total
    over the limit is refused when it is recorded, also when the counts arrive in two calls
    for one prepared request."""
    _victim(store)
    prepared = store.prepare_request(CID)
    store.record_request(CID, request_id=prepared.request_id, tokens_in=MAX_INT32 - 1)
    before = store.row_counts()
    with pytest.raises(InvalidInputError, match="2,147,483,648"):
        store.record_request(CID, request_id=prepared.request_id, cache_reads=2)
    assert store.row_counts() == before
    assert store.requests(CID)[-1].cache_reads is None
    store.record_request(CID, request_id=prepared.request_id, cache_reads=1)
    assert store.truncate(CID, keep="half").tokens_total == MAX_INT32
    assert store.prepare_request(CID).truncated
    assert store.audit(CID).requests[0].total_tokens == MAX_INT32
    assert store.timeline(CID)


def test_nul_is_kept_exactly_in_message_and_rewrite_texts(store: ContextStore) -> None:
    _victim(store)
    store.append(CID, "assistant", [{"type": "text", "text": "a\x00b"}])
    store.append(CID, "user", [tool_result("t0", "r\x00s")])
    store.add_context_update(CID, 1, 0, "u\x00v")
    messages = store.messages(CID)
    assert messages[9]["content"][0]["text"] == "a\x00b"
    assert messages[10]["content"][0]["content"] == "r\x00s"
    assert store.context_updates(CID)[-1]["text"] == "u\x00v"


@pytest.mark.parametrize("backend_case", ["at", "over"])
def test_the_depth_limit_at_n_and_n_plus_one(store: ContextStore, backend_case: str) -> None:
    """A value one container short of MAX_JSON_DEPTH with the message and metadata around it."""
    _victim(store)
    depth = MAX_JSON_DEPTH - 1 if backend_case == "at" else MAX_JSON_DEPTH
    value = {"k": _deep(depth - 1)}  # the dict holding it is one more level
    if backend_case == "at":
        store.create_conversation(metadata=value)
        store.set_conversation_metadata(CID, value)
    else:
        before = store.row_counts()
        with pytest.raises(
            InvalidInputError, match=f"more than {MAX_JSON_DEPTH} levels deep; flatten"
        ):
            store.create_conversation(metadata={"x": value})
        assert store.row_counts() == before


def test_byte_limits_count_utf8_bytes_not_characters(memory_store: ContextStore) -> None:
    _victim(memory_store)
    memory_store.checkpoint(CID, note="\u00e9" * (MAX_TEXT_BYTES // 2))
    with pytest.raises(ContentTooLargeError, match="over the limit"):
        memory_store.checkpoint(CID, note="\u00e9" * (MAX_TEXT_BYTES // 2) + "x")


def test_the_message_limit_counts_utf8_bytes(tmp_path: Path) -> None:
    overhead = len('[{"text":"","type":"text"}]') + len("{}")
    with ContextStore.open(":memory:", max_message_bytes=1_000) as store:
        store.create_conversation(id=CID)
        store.append(CID, "user", "\u00e9" * ((1_000 - overhead) // 2))
        with pytest.raises(ContentTooLargeError):
            store.append(CID, "user", "\u00e9" * ((1_000 - overhead) // 2 + 1))


def test_check_json_value_walks_without_recursion() -> None:
    check_json_value("v", {"a": [1, 2.5, None, True, "\u00e9", 10**299]})
    for bad in (_deep(100_000), {"a": {1, 2}}, [math.nan], 10**300, {"k": b""}):
        with pytest.raises(InvalidInputError):
            check_json_value("v", bad)


# -- the CLI ------------------------------------------------------------------------------


def _cli(db: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--db", str(db), *args], obj={})


@pytest.fixture
def cli_db(tmp_path: Path) -> Path:
    db = tmp_path / "cli.db"
    with ContextStore.open(db) as store:
        _victim(store)
    return db


@pytest.mark.parametrize("note", ["\ud800", "a\x00b", "n" * (MAX_TEXT_BYTES + 1)])
def test_cli_checkpoint_note_refused_without_traceback(cli_db: Path, note: str) -> None:
    result = _cli(cli_db, "checkpoint", CID, "--note", note)
    assert result.exit_code == 2, result.output
    # A lone surrogate is refused by click's own check ("Error: Invalid value for '--note'").
    assert "Traceback" not in result.output and "error:" in result.output.lower()


@pytest.mark.parametrize(
    "body",
    [
        '[{"role": "user", "content": [{"type": "text", "text": "x", "n": NaN}]}]',
        '[{"role": "user", "content": [{"type": "text", "text": "x", "n": Infinity}]}]',
        '[{"role": "user", "content": "\\ud800"}]',
        "[" * 5_000 + "]" * 5_000,
    ],
    ids=["nan", "infinity", "surrogate", "deep"],
)
def test_cli_import_of_hostile_json_is_an_answer_not_a_traceback(tmp_path: Path, body: str) -> None:
    task = tmp_path / "tasks" / "1760000000000"
    task.mkdir(parents=True)
    (task / "api_conversation_history.json").write_text(body, encoding="utf-8")
    (task / "ui_messages.json").write_text("[]", encoding="utf-8")
    db = tmp_path / "import.db"
    result = _cli(db, "import", "cline", str(task))
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    with ContextStore.open(db) as store:
        for conversation in store.list_conversations():
            for message in store.messages(conversation.id):
                assert "NaN" not in repr(message) and "\ud800" not in repr(message)
