"""The audit views and what ContextStore.audit, search and query return, on every backend."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextstore import ContextStore, context_window_info
from contextstore.core.errors import InvalidInputError, ReadOnlyError
from contextstore.core.rows import SourceRecordRow
from contextstore.facade.audit import snippet
from contextstore.processors import OutputTrimmer, Pipeline
from contextstore.processors.secret_text import find_secrets
from contextstore.storage import audit as audit_sql
from contextstore.storage import migrate
from tests.conftest import BACKENDS, assistant, open_backend, session, text, tool_use, user

SECRETS_TEXT = (
    "GITHUB_TOKEN=ghp_Zq8Lm2Vx7Rt4Yw1Kp9Nd3Hs6Jc5Bf0Ga2Ue7\n"
    "second=ghp_Ab3Lm2Vx7Rt4Yw1Kp9Nd3Hs6Jc5Bf0Ga2Xy9\n"
    "AWS_ACCESS_KEY_ID=AKIAQ7RZ4TBN2WXL5KPE\n"
    "DATABASE_URL=postgres://report:Hx9vTq2mLw7s@db.internal:5432/reports\n"
)


def result(tool_id: str, content: str, *, is_error: bool | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id, "content": content}
    if is_error is not None:
        block["is_error"] = is_error
    return block


@pytest.mark.parametrize(
    "window", [None, 8_192, 63_999, 64_000, 128_000, 131_072, 200_000, 200_001, 1_000_000]
)
def test_audit_requests_measure_against_cline_s_window_table(
    store: ContextStore, window: int | None
) -> None:
    info = context_window_info(window)
    cid = store.create_conversation(context_window=window).id
    store.append(cid, "user", "hi")
    just_under = (
        int(info.max_allowed_size) - 1
        if info.max_allowed_size.is_integer()
        else int(info.max_allowed_size)
    )
    store.record_request(cid, tokens_in=just_under, cost=0.25)
    store.record_request(cid, tokens_in=just_under, tokens_out=1, cache_reads=0, cost=0.5)
    first, second = store.audit(cid).requests
    assert first.context_window == info.context_window
    assert first.max_allowed_size == pytest.approx(info.max_allowed_size)
    assert (first.over_max_allowed, second.over_max_allowed) == (
        just_under >= info.max_allowed_size,
        just_under + 1 >= info.max_allowed_size,
    )
    assert second.over_max_allowed and not first.over_max_allowed
    assert second.cumulative_tokens == 2 * just_under + 1
    assert second.cumulative_cost == pytest.approx(0.75)
    assert first.percent_of_window == pytest.approx(100 * just_under / info.context_window)


def test_running_totals_are_per_conversation(store: ContextStore) -> None:
    a = store.create_conversation().id
    b = store.create_conversation().id
    for cid, tokens in ((a, 10), (b, 100), (a, 20), (b, 200)):
        store.record_request(cid, tokens_in=tokens, cost=tokens / 100)
    assert [r.cumulative_tokens for r in store.audit(a).requests] == [10, 30]
    assert [r.cumulative_tokens for r in store.audit(b).requests] == [100, 300]
    assert store.audit(b).total_cost == pytest.approx(3.0)


def test_files_read_counts_every_read_tool_spelling(store: ContextStore) -> None:
    cid = store.create_conversation().id
    calls = [
        tool_use("t1", "read_file", path="a.py"),
        tool_use("t2", "read_file", path="a.py"),
        tool_use("t3", "Read", file_path="b.py"),
        tool_use("t4", "read_file", absolute_path="/abs/c.py"),
        tool_use("t5", "write_to_file", path="a.py", content="x"),
    ]
    store.append(cid, "user", "task")
    for call in calls:
        store.append(cid, [assistant(call), user(result(call["id"], "ok"))])
    reads = {(f.path, f.tool_name): f.reads for f in store.audit(cid).file_reads}
    assert reads == {("a.py", "read_file"): 2, ("b.py", "Read"): 1, ("/abs/c.py", "read_file"): 1}
    first = store.audit(cid).file_reads[0]
    assert (first.first_message_idx, first.last_message_idx) == (1, 3)


def test_failed_tool_calls_are_the_results_marked_is_error(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, "user", "task")
    store.append(cid, [assistant(tool_use("ok", "run", cmd="true")), user(result("ok", "fine"))])
    store.append(
        cid,
        [assistant(tool_use("no", "run", cmd="x")), user(result("no", "fine", is_error=False))],
    )
    store.append(
        cid,
        [
            assistant(tool_use("bad", "run", cmd="false")),
            user(result("bad", "exit 1", is_error=True)),
        ],
    )
    (failed,) = store.audit(cid).failed_tool_calls
    assert (failed.tool_use_id, failed.tool_name, failed.error) == ("bad", "run", "exit 1")
    assert (failed.call_message_idx, failed.result_message_idx) == (5, 6)
    assert '"cmd"' in (failed.input or "") and "false" in (failed.input or "")


def test_masked_secrets_count_the_markers_by_kind(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, "user", "task")
    store.append(
        cid, [assistant(tool_use("t1", "read_file", path=".env")), user(result("t1", SECRETS_TEXT))]
    )
    store.append(cid, "assistant", "done")
    store.append(cid, "user", "thanks")
    before = store.audit(cid).masked_secrets
    store.prepare_request(cid)
    expected = Counter(f.kind for f in find_secrets(SECRETS_TEXT))
    counted = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
    assert before == []
    assert counted == {(kind, "rewrite"): n for kind, n in expected.items()}
    assert counted[("github_token", "rewrite")] == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_secrets_masked_before_storage_count_as_stored(backend: str, tmp_path: Path) -> None:
    store, cleanup = open_backend(backend, tmp_path, mask_secrets_on_write=True)
    try:
        cid = store.create_conversation().id
        store.append(cid, "user", SECRETS_TEXT)
        counted = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
    finally:
        cleanup()
    expected = Counter(f.kind for f in find_secrets(SECRETS_TEXT))
    assert counted == {(kind, "stored"): n for kind, n in expected.items()}


GITHUB = "ghp_Zq8Lm2Vx7Rt4Yw1Kp9Nd3Hs6Jc5Bf0Ga2Ue7"
AWS = "AKIAQ7RZ4TBN2WXL5KPE"
MARKER = re.compile(r"\[REDACTED:(\w+)\]")


def secrets_everywhere() -> list[dict[str, Any]]:
    """A session whose secrets sit in every place a block keeps what the model is shown:
    string content, a tool call's input, a tool result's string, its list of texts, a
    search result and a plain-text document inside it, a document's title and context, and a
    text block's citations."""
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": f"doc {GITHUB}"},
        "title": f"notes {AWS}",
        "context": f"GITHUB_TOKEN={GITHUB}",
    }
    found = {
        "type": "search_result",
        "source": "https://example.com/wiki",
        "title": f"key {AWS}",
        "content": [text(f"token {GITHUB}")],
    }
    cited = {
        "type": "char_location",
        "cited_text": f"AWS_ACCESS_KEY_ID={AWS}",
        "document_index": 0,
        "document_title": "notes",
        "start_char_index": 0,
        "end_char_index": 10,
    }
    return [
        {"role": "user", "content": f"task: GITHUB_TOKEN={GITHUB}"},
        assistant(
            "running it",
            tool_use("t1", "run", cmd=f"export GITHUB_TOKEN={GITHUB}", env={"AWS_KEY": AWS}),
        ),
        user(result("t1", [text(f"one {GITHUB}"), text(f"two {AWS}")])),
        assistant(tool_use("t2", "search", query="keys")),
        user(result("t2", [found, document]), document, "and this"),
        assistant({"type": "text", "text": f"the key {AWS}", "citations": [cited]}),
        user("thanks"),
    ]


def shown_markers(payload: dict[str, Any]) -> Counter[str]:
    """The markers in the messages of an Anthropic request, by kind."""
    return Counter(MARKER.findall(json.dumps(payload["messages"])))


@pytest.mark.parametrize("on_write", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_marker_the_model_is_shown_is_counted_once(
    backend: str, tmp_path: Path, on_write: bool
) -> None:
    """Masked on write, the markers sit in the stored blocks, many in their JSON (a call's
    input, a result's items, documents, search results, citations): each counts as
    ``stored``. Masked at prepare time by the default pipeline, each counts as ``rewrite``.
    The oracle is the request sent."""
    store, cleanup = open_backend(backend, tmp_path, mask_secrets_on_write=on_write)
    try:
        cid = store.create_conversation().id
        store.append(cid, secrets_everywhere())
        ctx = store.prepare_request(cid)
        counted = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
    finally:
        cleanup()
    masked_by = "stored" if on_write else "rewrite"
    shown = shown_markers(ctx.payload)
    assert GITHUB not in json.dumps(ctx.payload) and AWS not in json.dumps(ctx.payload)
    # All 15 secrets are shown masked, but for the cited text: masked at prepare time, the
    # block is shown as its masked text without its citations.
    assert sum(shown.values()) == (15 if on_write else 14)
    assert counted == {(kind, masked_by): n for kind, n in shown.items()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rewrite_that_carries_stored_markers_does_not_claim_them(
    backend: str, tmp_path: Path
) -> None:
    """A trimmer's rewrite of a text masked on write keeps the markers of the part it
    keeps: they were masked before they were stored."""
    store, cleanup = open_backend(backend, tmp_path, mask_secrets_on_write=True)
    try:
        cid = store.create_conversation().id
        output = f"GITHUB_TOKEN={GITHUB}\n" + "line of output\n" * 400 + f"key {AWS}\n"
        store.append(cid, [user("task"), assistant(tool_use("t1", "run", cmd="env"))])
        store.append(cid, [user(result("t1", output)), assistant("done")])
        ctx = store.prepare_request(cid, pipeline=Pipeline([OutputTrimmer(max_chars=500)]))
        (rewrite,) = store.context_updates(cid)
        counted = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
    finally:
        cleanup()
    assert rewrite["kind"] == "processor" and "omitted" in rewrite["text"]
    assert counted == {("github_token", "stored"): 1, ("aws_access_key_id", "stored"): 1}
    assert shown_markers(ctx.payload) == {"github_token": 1, "aws_access_key_id": 1}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rewrite_of_a_result_s_first_item_keeps_the_other_items_counted(
    backend: str, tmp_path: Path
) -> None:
    """The masker rewrites only the first text of a result list holding the one secret;
    the marker a later item already carried is shown too, and was there when stored."""
    store, cleanup = open_backend(backend, tmp_path)
    try:
        cid = store.create_conversation().id
        store.append(cid, [user("task"), assistant(tool_use("t1", "run", cmd="env"))])
        items = [text(f"GITHUB_TOKEN={GITHUB}"), text("AWS key: [REDACTED:aws_access_key_id]")]
        store.append(cid, [user(result("t1", items)), assistant("done")])
        ctx = store.prepare_request(cid)
        (rewrite,) = store.context_updates(cid)
        counted = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
    finally:
        cleanup()
    assert rewrite["mode"] == "text"
    assert shown_markers(ctx.payload) == {"github_token": 1, "aws_access_key_id": 1}
    assert counted == {("github_token", "rewrite"): 1, ("aws_access_key_id", "stored"): 1}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unclosed_marker_is_not_a_marker(backend: str, tmp_path: Path) -> None:
    """Text that only looks like the start of a marker counts as nothing (and does not
    break the view for the whole database on PostgreSQL)."""
    store, cleanup = open_backend(backend, tmp_path)
    try:
        cid = store.create_conversation().id
        store.append(cid, "user", "[REDACTED:github_token] and [REDACTED: not closed")
        store.append(cid, "assistant", "[REDACTED:] [REDACTED:two words] [REDACTED:x [REDACTED:y]")
        counted = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
    finally:
        cleanup()
    assert counted == {("github_token", "stored"): 1, ("y", "stored"): 1}


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_revision_0013_counts_the_markers_of_a_database_written_before_it(
    backend: str, tmp_path: Path
) -> None:
    """At 0012 the view misses the markers kept outside the text column; after the upgrade
    they count, and the downgrade brings 0012's view back."""
    store, cleanup = open_backend(backend, tmp_path, mask_secrets_on_write=True)
    try:
        cid = store.create_conversation().id
        store.append(cid, secrets_everywhere())
        shown = shown_markers(store.prepare_request(cid).payload)
        engine = store.database.engine
        is_sqlite = engine.dialect.name == "sqlite"
        store.database.close()
        migrate.downgrade(engine, is_sqlite=is_sqlite, revision="0012")
        before = sum(s.count for s in store.audit(cid).masked_secrets)
        migrate.upgrade(engine, is_sqlite=is_sqlite)
        counted = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
    finally:
        cleanup()
    assert before < sum(shown.values())
    assert counted == {(kind, "stored"): n for kind, n in shown.items()}


@pytest.mark.parametrize("on_write", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_markers_of_messages_a_truncation_hides_are_not_counted(
    backend: str, tmp_path: Path, on_write: bool
) -> None:
    """After a cut, only the markers of what the next request shows count: the hidden
    messages' were counted (six where the request showed one), and so were those of the
    orphan results the view drops from the first message after the cut."""
    store, cleanup = open_backend(backend, tmp_path, mask_secrets_on_write=on_write)
    try:
        cid = store.create_conversation().id
        store.append(cid, [user("task"), assistant("on it")])
        for i in range(6):
            call = tool_use(f"t{i}", "run", cmd="env")
            store.append(cid, [assistant(call), user(result(f"t{i}", f"GITHUB_TOKEN={GITHUB}"))])
        store.append(cid, [assistant("done"), user(f"and {AWS}")])
        first = store.prepare_request(cid)
        before = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
        store.truncate(cid, keep="half")
        start, end = store.deleted_range(cid) or (0, 0)
        ctx = store.prepare_request(cid)
        after = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
        store.truncate(cid, keep="quarter")
        last = store.prepare_request(cid)
        at_last = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
    finally:
        cleanup()
    masked_by = "stored" if on_write else "rewrite"
    assert (start, end) == (2, 6)  # message 7 holds the result of message 6's call
    assert before == {(k, masked_by): n for k, n in shown_markers(first.payload).items()}
    assert before == {("github_token", masked_by): 6, ("aws_access_key_id", masked_by): 1}
    assert after == {(k, masked_by): n for k, n in shown_markers(ctx.payload).items()}
    assert after == {("github_token", masked_by): 3, ("aws_access_key_id", masked_by): 1}
    assert at_last == {(k, masked_by): n for k, n in shown_markers(last.payload).items()}


@pytest.mark.parametrize("on_write", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_markers_of_tool_results_the_view_drops_are_not_counted(
    backend: str, tmp_path: Path, on_write: bool
) -> None:
    """A result no call asked for, one after no call at all, and the first of two results
    for one call are not sent: their markers counted as shown."""
    store, cleanup = open_backend(backend, tmp_path, mask_secrets_on_write=on_write)
    try:
        cid = store.create_conversation().id
        store.append(cid, [user("task"), assistant(tool_use("t1", "run", cmd="env"))])
        store.append(
            cid,
            [
                user(
                    result("t1", f"first GITHUB_TOKEN={GITHUB}"),
                    result("stray", f"GITHUB_TOKEN={GITHUB}"),
                    result("t1", f"second AWS_ACCESS_KEY_ID={AWS}"),
                ),
                assistant("done"),
                user(result("t1", f"late GITHUB_TOKEN={GITHUB}"), "thanks"),
            ],
        )
        ctx = store.prepare_request(cid)
        counted = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
    finally:
        cleanup()
    masked_by = "stored" if on_write else "rewrite"
    assert shown_markers(ctx.payload) == {"aws_access_key_id": 1}
    assert counted == {("aws_access_key_id", masked_by): 1}


def test_dedup_savings_are_the_characters_each_rewrite_removed(store: ContextStore) -> None:
    from contextstore.devtools import demo_data

    cid = store.create_conversation(context_window=64_000).id
    store.append(cid, [*demo_data.opening_turns(), *demo_data.long_session(8)])
    first = store.prepare_request(cid)
    store.record_request(cid, request_id=first.request_id, tokens_in=38_500, tokens_out=900)
    store.prepare_request(cid)
    savings = store.audit(cid).dedup_savings
    assert savings and {s.kind for s in savings} == {"read_file"}
    updates = {(u["message_idx"], u["block_idx"]): u for u in store.context_updates(cid)}
    originals = store.messages(cid)
    for s in savings:
        block = originals[s.message_idx]["content"][s.block_idx]
        original = block["content"][0]["text"]
        assert s.original_chars == len(original)
        assert s.rewritten_chars == len(updates[(s.message_idx, s.block_idx)]["text"])
        assert s.chars_saved == s.original_chars - s.rewritten_chars > 0
    assert store.audit(cid).chars_saved == sum(s.chars_saved for s in savings)


def test_rollbacks_report_what_they_removed_and_their_restore(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, [user("a"), assistant("b")])
    store.checkpoint(cid, "cp")
    store.append(cid, [user(text("c"), text("d")), assistant("e")])
    store.record_request(cid, tokens_in=5)
    after = store.get_conversation(cid).last_ts + 1
    store.import_timeline(cid, [SourceRecordRow(after, "test", "note", {"n": 1})])
    report = store.rollback(cid, "cp")
    (event,) = store.audit(cid).rollbacks
    # every table the rollback removed rows from, as its report says (source records too)
    assert {k: n for k, n in event.removed.items() if n} == {
        k: n for k, n in report.removed.items() if n
    }
    assert event.removed["source_records"] == 1
    assert event.total_removed == report.total_removed
    assert event.removed["messages"] == 2 and event.removed["blocks"] == 3
    assert event.rows_archived == report.total_removed and event.restored_ts is None
    assert event.target == "cp" and not event.purged
    assert report.rollback_id is not None
    restored = store.restore(cid, report.rollback_id)
    (event,) = store.audit(cid).rollbacks
    assert event.restored_ts == restored.ts


def test_truncation_events_keep_the_trigger_the_reason_and_the_summary(
    store: ContextStore,
) -> None:
    cid = store.create_conversation().id
    store.append(cid, session(6))
    store.record_request(cid, tokens_in=900, tokens_out=100, cache_reads=23)
    decision = store.truncate(cid, "half", summary="what was hidden", reason="manual: test")
    assert decision.action == "truncate" and decision.deleted_range is not None
    assert decision.tokens_total == 1_023
    (event,) = store.audit(cid).truncations
    assert (event.start_idx, event.end_idx) == decision.deleted_range
    assert (event.keep, event.reason) == ("half", "manual: test")
    assert event.tokens_total == 1_023
    assert event.summary == "what was hidden"
    store.set_deleted_range(cid, decision.deleted_range[1] + 2)
    manual = store.audit(cid).truncations[-1]
    assert manual.tokens_total is None and manual.summary is None


def test_the_timeline_lists_every_event_in_order(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, [user("a"), assistant("b"), user("c")])
    store.record_request(cid, tokens_in=5, failure="user_cancelled")
    store.checkpoint(cid, "cp", note="why")
    store.set_deleted_range(cid, 1)
    store.add_context_update(cid, 0, 0, "A")
    store.append(cid, "assistant", "d")
    store.rollback(cid, "cp")
    events = store.timeline(cid)
    assert [e.event for e in events] == [
        "message",
        "message",
        "message",
        "request",
        "checkpoint",
        "rollback",
    ]
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    assert events[3].detail == "5 tokens, failed: user_cancelled"
    assert events[4].detail == "cp: why"


def test_search_matches_text_and_tool_input_literally(store: ContextStore) -> None:
    one = store.create_conversation(title="one").id
    two = store.create_conversation(title="two").id
    store.append(one, "user", "Coverage is 100% now")
    store.append(
        one,
        [assistant(tool_use("t1", "read_file", path="src/weird_name.py")), user(result("t1", "x"))],
    )
    store.append(two, "user", "coverage 1000 lines, no percent sign")
    hits = store.search("100%")
    assert [(h.conversation_id, h.message_idx) for h in hits] == [(one, 0)]
    assert hits[0].snippet == "Coverage is 100% now" and hits[0].title == "one"
    assert {h.conversation_id for h in store.search("COVERAGE")} == {one, two}
    assert [h.type for h in store.search("weird_name")] == ["tool_use"]
    store.append(
        two, [assistant(tool_use("t2", "read_file", path="café/menu.txt")), user(result("t2", "x"))]
    )
    (accented,) = store.search("menu.txt")
    assert accented.type == "tool_use" and "café/menu.txt" in accented.snippet
    assert store.search("d_n") != [] and store.search("d%n") == []
    store.append(two, [user("saved in C:\\temp\\new"), assistant("not in C:temp")])
    assert [h.message_idx for h in store.search("C:\\temp", conversation_id=two)] == [3]
    assert [h.message_idx for h in store.search("C:temp", conversation_id=two)] == [4]
    assert len(store.search("coverage", limit=1)) == 1
    assert [h.conversation_id for h in store.search("coverage", conversation_id=two)] == [two]
    with pytest.raises(InvalidInputError):
        store.search("")
    with pytest.raises(InvalidInputError, match=r"^the search text must not contain a NUL"):
        store.search("cover\x00age")


def test_search_looks_in_a_calls_input_only_and_shows_where_it_matched(
    store: ContextStore,
) -> None:
    cid = store.create_conversation().id
    call = tool_use("t1", "read_file", path="src/a.py")
    call["thoughtSignature"] = "EoshCoghAXLI2nzy"  # opaque, kept beside the call by Gemini
    store.append(cid, [user("go"), assistant(call), user(result("t1", "x"))])
    assert store.search("EoshCoghAXLI2nzy") == []
    assert store.search("input") == []  # a key of the stored JSON, not of the input
    (hit,) = store.search("src/a.py")
    assert hit.type == "tool_use" and "src/a.py" in hit.snippet


def test_search_text_is_bounded_alike_on_every_backend(store: ContextStore) -> None:
    from contextstore.core.validate import MAX_SEARCH_LENGTH

    cid = store.create_conversation().id
    longest = "\u00e9%" * (MAX_SEARCH_LENGTH // 2)  # two UTF-8 bytes and an escape each
    store.append(cid, "user", longest)
    assert [h.conversation_id for h in store.search(longest)] == [cid]
    with pytest.raises(InvalidInputError, match=r"^the search text is 4,097 characters"):
        store.search(longest + "x")
    # Past the byte limit of any stored text as well, it is still the search's limit that
    # is named (the text's limit advised storing the text outside the conversation).
    with pytest.raises(InvalidInputError, match=r"^the search text is 1,048,577 characters, "):
        store.search("x" * (2**20 + 1))


def test_viewed_messages_mark_the_hidden_range_and_rewrites(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, [user("a"), assistant("b"), user("c"), assistant("d"), user("e")])
    store.set_deleted_range(cid, 3)
    store.add_context_update(cid, 1, 0, "B", kind="manual", source="test")
    viewed = store.viewed_messages(cid)
    assert [m.hidden for m in viewed] == [False, False, True, True, False]
    block = viewed[1].blocks[0]
    assert (block.original_text, block.effective_text, block.rewrite_source) == ("b", "B", "test")
    assert (block.rewrite_kind, viewed[0].blocks[0].rewrite_kind) == ("manual", None)
    assert not viewed[0].blocks[0].rewritten
    assert [b.type for m in viewed for b in m.blocks] == ["text"] * 5
    plain = store.create_conversation().id
    store.append(plain, "user", "a plain string")
    (only,) = store.viewed_messages(plain)[0].blocks
    assert (only.type, only.original_text, only.block_idx) == ("text", "a plain string", 0)


def test_audit_tells_prepared_requests_from_recorded_ones(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, "user", "hi")
    store.prepare_request(cid)
    store.record_request(cid, tokens_in=10)
    prepared, recorded = store.audit(cid).requests
    assert prepared.prepared is True and recorded.prepared is False


@pytest.mark.parametrize(
    ("haystack", "needle", "expected"),
    [
        ("abcdefghij", "ef", "...cdefgh..."),
        ("abcdefghij", "d", "...bcdef..."),
        ("abcdefghij", "AB", "abcd..."),
        ("abcdefghij", "ij", "...ghij"),
        ("abcdefghij", "zz", "abcd..."),
        ("ab \n\t cd", "b", "ab..."),
        ("\u0130" * 5 + "xneedley", "NEEDLE", "...\u0130xneedley"),  # lower() lengthens U+0130
        ("\u00df" * 5 + "xneedley", "needle", "...\u00dfxneedley"),
    ],
)
def test_a_snippet_is_the_match_with_context_either_side(
    haystack: str, needle: str, expected: str
) -> None:
    assert snippet(haystack, needle, context=2) == expected


# -- read-only SQL -----------------------------------------------------------------------

WRITES = [
    "INSERT INTO checkpoints (conversation_id, ts) VALUES ('x', 1)",
    "DELETE FROM messages",
    "UPDATE conversations SET title = 'owned'",
    "DROP VIEW audit_requests",
    "CREATE TABLE stolen (a INTEGER)",
]


@pytest.mark.parametrize("statement", WRITES)
def test_query_is_read_only_at_the_database_level(store: ContextStore, statement: str) -> None:
    cid = store.create_conversation(title="kept").id
    store.append(cid, "user", "hi")
    with pytest.raises(ReadOnlyError):
        store.query(statement)
    assert store.get_conversation(cid).title == "kept"
    assert store.query("SELECT COUNT(*) FROM messages").rows == [(1,)]
    store.append(cid, "assistant", "the store itself still writes")


@pytest.mark.parametrize("statement", WRITES)
def test_a_query_that_writes_is_refused_as_a_query_not_as_a_read_only_location(
    store: ContextStore, statement: str
) -> None:
    # On an in-memory store the refusal came out as ReadOnlyLocationError (exit 9), telling
    # the caller to check the permissions of a file the store does not have.
    store.create_conversation(title="kept")
    with pytest.raises(ReadOnlyError) as refused:
        store.query(statement)
    assert type(refused.value) is ReadOnlyError
    assert "queries are read-only" in str(refused.value)
    assert [c.title for c in store.list_conversations()] == ["kept"]


def test_the_store_writes_after_a_query(store: ContextStore) -> None:
    """On Python 3.10 an in-memory store refused every statement after its first query
    ("not authorized"): its sqlite3 took None as the query's authorizer, not as none."""
    conv = store.create_conversation()
    assert store.query("SELECT count(*) FROM messages").rows == [(0,)]
    store.append(conv.id, "user", "after the query")
    assert store.query("SELECT count(*) FROM messages").rows == [(1,)]


def test_query_refuses_several_statements(store: ContextStore) -> None:
    store.create_conversation(title="kept")
    for sql in ("SELECT 1; DELETE FROM conversations", "COMMIT; DELETE FROM conversations"):
        with pytest.raises((InvalidInputError, ReadOnlyError)):
            store.query(sql)
    # In the caller's terms on every backend (PostgreSQL's words were "cannot insert
    # multiple commands into a prepared statement", SQLite's another sentence).
    with pytest.raises(InvalidInputError) as refused:
        store.query("SELECT 1; SELECT 2")
    assert str(refused.value) == (
        "the query holds more than one statement; run them one at a time."
    )
    assert [c.title for c in store.list_conversations()] == ["kept"]


@pytest.mark.parametrize(
    "statement",
    [
        "COPY (SELECT id FROM conversations) TO '/tmp/contextstore-copy-probe.txt'",
        "/* export */ (copy conversations to stdout)",
        "-- a comment\n  CoPy conversations TO PROGRAM 'true'",
    ],
)
def test_query_refuses_copy_on_postgresql(tmp_path: Path, statement: str) -> None:
    # A READ ONLY transaction still lets COPY ... TO 'file' write a file on the server.
    store, cleanup = open_backend("postgres", tmp_path)
    try:
        with pytest.raises(ReadOnlyError, match="COPY is refused"):
            store.query(statement)
        assert store.query("SELECT COUNT(*) FROM conversations").rows == [(0,)]
    finally:
        cleanup()


SERVER_SIDE_WRITES = [
    # A shell command run by the server, from inside a DO block (COPY is not its first word).
    "DO $$BEGIN EXECUTE 'COPY (SELECT 1) TO PROGRAM ''touch {probe}'''; END$$",
    # A file written by the server, from a large object.
    "SELECT lo_export(lo_from_bytea(0, 'x'), '{probe}')",
    # A large object made from a server file.
    "SELECT lo_import('/etc/hostname')",
    "SELECT pg_read_file('/etc/hostname')",
    "SELECT nextval('api_requests_id_seq')",
]


@pytest.mark.parametrize("template", SERVER_SIDE_WRITES)
def test_a_postgresql_query_cannot_write_outside_the_database(
    tmp_path: Path, template: str
) -> None:
    """The query runs as pg_read_all_data: a superuser's rights to server files, programs
    and large objects are gone (in a READ ONLY transaction alone these ran, exit 0)."""
    probe = Path(f"/tmp/contextstore-probe-{tmp_path.name}")
    store, cleanup = open_backend("postgres", tmp_path)
    try:
        with pytest.raises(ReadOnlyError, match="privileges that only read"):
            store.query(template.format(probe=probe))
        assert not probe.exists()
    finally:
        probe.unlink(missing_ok=True)
        cleanup()


def test_every_table_and_view_reads_under_the_reading_role(tmp_path: Path) -> None:
    store, cleanup = open_backend("postgres", tmp_path)
    try:
        cid = store.create_conversation(title="read").id
        store.append(cid, [user("a"), assistant("b")])
        assert store.query("SELECT current_user").rows == [("pg_read_all_data",)]
        names = store.query(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() ORDER BY table_name"
        ).rows
        assert {"audit_requests", "masked_secrets", "messages"} <= {n for (n,) in names}
        for (name,) in names:
            store.query(f'SELECT * FROM "{name}"')
        assert store.query("SELECT COUNT(*) FROM visible_messages").rows == [(2,)]
    finally:
        cleanup()


def test_a_user_who_may_write_server_files_without_the_reading_role_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server older than PostgreSQL 14 has no pg_read_all_data: a superuser's query is
    refused rather than run with rights to the server's files and programs."""
    store, cleanup = open_backend("postgres", tmp_path)
    try:
        monkeypatch.setattr(audit_sql, "session_rights", lambda connection: (False, True))
        with pytest.raises(ReadOnlyError, match="queries are refused for this user"):
            store.query("SELECT 1")
        monkeypatch.setattr(audit_sql, "session_rights", lambda connection: (False, False))
        assert store.query("SELECT current_user = session_user").rows == [(True,)]
    finally:
        cleanup()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("statement", ["VACUUM", "vacuum /* all */", "VACUUM INTO '{path}'"])
def test_vacuum_is_refused_as_a_write(tmp_path: Path, backend: str, statement: str) -> None:
    """SQLite said "the query failed: cannot VACUUM from within a transaction" (exit 2)."""
    if backend == "postgres" and "INTO" in statement:
        pytest.skip("PostgreSQL has no VACUUM INTO")
    copy = tmp_path / "vacuumed.db"
    store, cleanup = open_backend(backend, tmp_path)
    try:
        with pytest.raises(ReadOnlyError, match=r"read-only \(VACUUM rewrites the database\)"):
            store.query(statement.format(path=copy))
        assert not copy.exists()
    finally:
        cleanup()


def test_query_returns_columns_and_rows(store: ContextStore) -> None:
    cid = store.create_conversation().id
    store.append(cid, [user("a"), assistant("b")])
    result = store.query("SELECT role, COUNT(*) AS n FROM messages GROUP BY role ORDER BY role")
    assert result.columns == ["role", "n"] and result.rows == [("assistant", 1), ("user", 1)]


def test_a_sqlite_file_is_unchanged_by_refused_writes_and_attach(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    with ContextStore.open(path) as store:
        store.append(store.create_conversation().id, "user", "hi")
        before = dump(path)
        for statement in [
            *WRITES,
            f"ATTACH DATABASE '{tmp_path / 'x.db'}' AS x",
            "PRAGMA query_only = OFF",
        ]:
            with contextlib.suppress(ReadOnlyError, InvalidInputError):
                store.query(statement)
        assert store.query("PRAGMA query_only").rows == [(1,)]
        assert dump(path) == before
    assert not (tmp_path / "x.db").exists()


def test_a_sqlite_file_refuses_each_write_as_read_only(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "ro.db") as store:
        store.create_conversation()
        for statement in WRITES:
            with pytest.raises(ReadOnlyError, match="queries are read-only"):
                store.query(statement)
        with pytest.raises(InvalidInputError, match=r"the query failed: .*no such table"):
            store.query("SELECT * FROM no_such_table")


def test_a_query_naming_a_missing_table_lists_the_views_there_are(store: ContextStore) -> None:
    with pytest.raises(InvalidInputError) as refused:
        store.query("SELECT * FROM file_reads")
    message = str(refused.value)
    assert message.startswith("the query failed: ") and "file_reads" in message
    views = re.search(r"The views are ([a-z_, ]+) \(README", message)
    assert views is not None
    assert {"audit_file_reads", "masked_secrets", "visible_messages"} <= set(
        views.group(1).split(", ")
    )
    with pytest.raises(InvalidInputError) as syntax:
        store.query("SELEC 1")
    assert "The views are" not in str(syntax.value)
    assert store.query("SELECT COUNT(*) FROM audit_file_reads").rows == [(0,)]


def test_a_long_query_is_not_echoed_whole_in_its_refusal(store: ContextStore) -> None:
    """SQLite quotes the token near a syntax error whole: the refusal of a query of 100,000
    characters was 100,040 characters long (one line on the command line)."""
    with pytest.raises(InvalidInputError) as refused:
        store.query("y" * 100_000)
    message = str(refused.value)
    assert message.startswith("the query failed: ") and "yyyy" in message
    assert len(message) < 1_000, len(message)


def test_the_default_database_answers_queries() -> None:
    with ContextStore.open() as store:
        store.create_conversation()
        assert store.query("SELECT COUNT(*) FROM conversations").rows == [(1,)]


def dump(path: Path) -> list[str]:
    """The database's content as SQL text, read with the sqlite3 module."""
    connection = sqlite3.connect(path)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


def test_postgres_session_settings_do_not_outlive_the_query(tmp_path: Path) -> None:
    store, cleanup = open_backend("postgres", tmp_path)
    try:
        store.query("SELECT set_config('default_transaction_read_only', 'off', false)")
        store.query("SELECT set_config('search_path', 'pg_catalog', false)")
        cid = store.create_conversation(title="after").id
        assert store.query("SHOW transaction_read_only").rows == [("on",)]
        assert store.get_conversation(cid).title == "after"
    finally:
        cleanup()


_TOOL_IDS = ("t1", "t2", "t3")


@st.composite
def _exchanges(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Alternating user/assistant messages from a task on, with calls drawn from a few ids
    (so results may answer a call of the message before, an older one, none, or the same
    call twice) and a secret in some texts and results; ``("cut", keep)`` between them."""
    steps: list[tuple[str, Any]] = [("message", user(f"task {GITHUB}"))]
    for turn in range(draw(st.integers(1, 7))):
        calls = draw(st.lists(st.sampled_from(_TOOL_IDS), max_size=2, unique=True))
        said = draw(st.sampled_from(("", f" with {AWS}")))
        blocks: list[Any] = [f"step {turn}{said}"] if draw(st.booleans()) or not calls else []
        blocks += [tool_use(f"{cid}", "run", cmd="env") for cid in calls]
        steps.append(("message", assistant(*blocks)))
        answered = draw(st.lists(st.sampled_from((*_TOOL_IDS, "stray")), max_size=3))
        secret = draw(st.sampled_from(("", f" GITHUB_TOKEN={GITHUB}", f" key {AWS}")))
        pieces: list[Any] = [result(tid, f"out {turn}{secret}") for tid in answered]
        if not pieces or draw(st.booleans()):
            pieces.append(f"go on{secret}")
        steps.append(("message", user(*pieces)))
        if draw(st.integers(0, 3)) == 0:
            steps.append(("cut", draw(st.sampled_from(("half", "quarter", "last_two")))))
    return steps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_exchanges(), on_write=st.booleans())
def test_masked_secrets_are_the_markers_of_the_request_the_next_prepare_sends(
    steps: list[tuple[str, Any]], on_write: bool
) -> None:
    """Whatever the exchange and its cuts, the audit's count of masked secrets per kind is the
    count of markers in the messages the next prepare sends (the oracle: the request)."""
    with ContextStore.open(":memory:", mask_secrets_on_write=on_write) as store:
        cid = store.create_conversation().id
        for kind, value in steps:
            if kind == "message":
                store.append(cid, [value])
            else:
                store.truncate(cid, keep=value)
        ctx = store.prepare_request(cid)
        counted = {(s.kind, s.masked_by): s.count for s in store.audit(cid).masked_secrets}
    masked_by = "stored" if on_write else "rewrite"
    assert counted == {(k, masked_by): n for k, n in shown_markers(ctx.payload).items()}


def _cut_after_reused_ids(store: ContextStore) -> str:
    """Messages 2-5 hidden; message 6 answers the hidden message 5's calls ``t0`` (an id
    message 1 issued too) and ``t2``: the view drops both results and answers message 1's
    ``t0`` with a ``result missing`` placeholder."""
    cid = store.create_conversation().id
    store.append_many(
        cid,
        [
            user("task"),
            assistant(tool_use("t0", "run", cmd="ls")),
            user(result("t0", "a.py")),
            assistant(tool_use("t1", "run", cmd="ls")),
            user(result("t1", "a.py")),
            assistant(tool_use("t0", "read_file", path="a.py"), tool_use("t2", "run")),
            user(result("t0", "contents of a.py"), result("t2", "ok"), "go on"),
            assistant("done"),
        ],
    )
    store.set_deleted_range(cid, 5)
    return cid


def test_viewed_messages_mark_what_the_view_drops_and_adds(store: ContextStore) -> None:
    """The blocks of the first message after a cut that the model never got were shown as
    sent, and the placeholder it got in their place was nowhere."""
    cid = _cut_after_reused_ids(store)
    viewed = store.viewed_messages(cid)
    after = viewed[6]
    assert not after.hidden and [b.dropped for b in after.blocks] == [True, True, False]
    placeholder = {"type": "tool_result", "tool_use_id": "t0", "content": "result missing"}
    assert after.added == [placeholder] and after.followed_by == []
    assert not any(b.dropped or m.added or m.followed_by for m in viewed[:6] for b in m.blocks)
    # What it lists as sent is what the view sends.
    sent = store.render(cid)[2]["content"]
    assert sent == after.added + [b.block for b in after.blocks if not b.dropped]


def test_viewed_messages_name_a_message_the_view_inserts(store: ContextStore) -> None:
    """A range ending on a user message leaves message 1's call followed by an assistant
    message: the view sends a user message of placeholders between them."""
    cid = store.create_conversation().id
    store.append_many(
        cid,
        [
            user("task"),
            assistant(tool_use("t0", "run")),
            user(result("t0", "ok")),
            assistant("next"),
        ],
    )
    store.set_deleted_range(cid, 2)
    viewed = store.viewed_messages(cid)
    assert [m.hidden for m in viewed] == [False, False, True, False]
    inserted = store.render(cid)[2]
    assert inserted["role"] == "user" and viewed[1].followed_by == inserted["content"]
    assert all(not m.added and not m.followed_by for m in viewed if m.index != 1)


def test_audit_rollbacks_purged_is_0_or_1_on_every_backend(store: ContextStore) -> None:
    """PostgreSQL's view gave a boolean: ``purged = 1`` failed there ("operator does not
    exist: boolean = integer"), and JSON held true/false where SQLite's held 0/1."""
    purged_id = store.create_conversation().id
    kept_id = store.create_conversation().id
    for cid in (purged_id, kept_id):
        store.append(cid, "user", "a")
        store.checkpoint(cid, "cp")
        store.append(cid, "assistant", "b")
    store.rollback(purged_id, to="cp", purge=True)
    store.rollback(kept_id, to="cp")
    rows = store.query(
        "SELECT conversation_id, purged FROM audit_rollbacks WHERE purged = 1 OR purged = 0"
    ).rows
    by_conversation = {cid: purged for cid, purged in rows}
    assert by_conversation == {purged_id: 1, kept_id: 0}
    assert all(type(p) is int for p in by_conversation.values())
    assert [r.purged for r in store.audit(purged_id).rollbacks] == [True]
