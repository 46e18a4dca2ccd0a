"""prepare_request and truncate: Cline's context-window policy, decided and persisted as rows."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextstore import ContextStore, InvalidInputError, PayloadMismatchError
from contextstore.core.notices import FIRST_USER_REPLACEMENT, TRUNCATION_NOTICE
from contextstore.core.tokens import TiktokenCounter
from tests.cli.conftest import run
from tests.conftest import (
    StoreFactory,
    assistant,
    duplicate_reads_saving,
    file_read,
    open_backend,
    session,
    tool_result,
    tool_use,
    user,
)
from tests.store.internals import recorded_statements


def _overflow(store: ContextStore, conv_id: str, total: int) -> None:
    store.record_request(conv_id, tokens_in=total)


def test_no_usage_recorded_means_no_decision(store: ContextStore) -> None:
    conv = store.create_conversation(context_window=64_000)
    store.append(conv.id, session(10))
    ctx = store.prepare_request(conv.id)
    assert ctx.decision.action == "none" and not ctx.truncated
    assert len(ctx.messages) == 21 and ctx.request_id is not None


def test_below_the_maximum_nothing_happens_at_the_maximum_half_is_hidden(
    store: ContextStore,
) -> None:
    conv = store.create_conversation(context_window=64_000)
    store.append(conv.id, session(10))
    _overflow(store, conv.id, 36_999)
    assert store.prepare_request(conv.id).decision.action == "none"
    _overflow(store, conv.id, 37_000)
    ctx = store.prepare_request(conv.id)
    assert ctx.truncated and ctx.decision.keep == "half"
    assert ctx.deleted_range == (2, 9) == store.deleted_range(conv.id)
    assert ctx.messages[1]["content"][0]["text"] == TRUNCATION_NOTICE
    assert ctx.messages[0]["content"][0]["text"] == "<task>fix the bug</task>"


def test_a_jump_to_a_smaller_window_keeps_a_quarter(store: ContextStore) -> None:
    conv = store.create_conversation(context_window=64_000)
    store.append(conv.id, session(20))
    _overflow(store, conv.id, 80_000)
    ctx = store.prepare_request(conv.id)
    assert ctx.decision.keep == "quarter" and ctx.deleted_range == (2, 29)


def test_a_user_configured_window_is_authoritative(store: ContextStore) -> None:
    conv = store.create_conversation(model_id="deepseek-chat", context_window=1_000_000)
    store.append(conv.id, session(5))
    _overflow(store, conv.id, 900_000)
    assert store.prepare_request(conv.id).decision.action == "none"


def test_deduplication_alone_when_it_saves_thirty_percent(store: ContextStore) -> None:
    big = "x = 1\n" * 2_000
    conv = store.create_conversation(context_window=64_000)
    messages: list[dict[str, Any]] = [user("<task>t</task>"), assistant("ok")]
    for i in range(3):
        messages += [
            assistant(tool_use(f"r{i}", path="big.py")),
            user(file_read(f"r{i}", "big.py", big)),
        ]
    store.append(conv.id, messages)
    _overflow(store, conv.id, 40_000)
    ctx = store.prepare_request(conv.id)
    assert ctx.decision.action == "dedupe" and ctx.deleted_range is None
    assert ctx.decision.deduplicated == (3, 5) and ctx.decision.fraction_saved >= 0.3
    assert store.messages(conv.id)[3]["content"][0]["content"][0]["text"].endswith(big)


@pytest.mark.parametrize(
    ("percent", "action"),
    [(29, "truncate"), (30, "dedupe"), (31, "dedupe")],
    ids=["29%", "30%", "31%"],
)
def test_the_thirty_percent_rule_at_its_boundary(
    store: ContextStore, percent: int, action: str
) -> None:
    conv = store.create_conversation(context_window=64_000)
    store.append(conv.id, duplicate_reads_saving(percent))
    _overflow(store, conv.id, 37_000)
    ctx = store.prepare_request(conv.id)
    assert ctx.decision.fraction_saved == percent / 100
    assert ctx.decision.deduplicated == (2,)
    assert ctx.decision.action == action
    assert (ctx.deleted_range is None) is (action == "dedupe")
    rewrites = [(u["message_idx"], u["kind"]) for u in store.context_updates(conv.id)]
    assert (2, "read_file") in rewrites


def test_truncation_notice_and_range_land_in_one_row_set(store: ContextStore) -> None:
    conv = store.create_conversation(context_window=64_000)
    store.append(conv.id, session(10))
    _overflow(store, conv.id, 50_000)
    store.prepare_request(conv.id)
    updates = store.context_updates(conv.id)
    assert [(u["message_idx"], u["kind"]) for u in updates] == [(1, "truncation_notice")]
    ranges_ts = store.deleted_range(conv.id, as_of=updates[0]["ts"])
    assert ranges_ts == (2, 9)
    assert store.deleted_range(conv.id, as_of=updates[0]["ts"] - 1) is None


@pytest.mark.parametrize(
    ("keep", "expected_end"), [("none", 21), ("last_two", 19), ("quarter", 15), ("half", 11)]
)
def test_explicit_truncations_apply_both_notices(
    store: ContextStore, keep: str, expected_end: int
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [*session(10), assistant("done")])
    decision = store.truncate(conv.id, keep=keep, summary="we fixed the parser")
    assert decision.deleted_range == (2, expected_end)
    view = store.render(conv.id)
    assert view[0]["content"][0]["text"] == FIRST_USER_REPLACEMENT
    assert "we fixed the parser" in view[1]["content"][0]["text"]
    assert store.messages(conv.id)[0]["content"][0]["text"] == "<task>fix the bug</task>"


def test_a_summary_reaches_the_model_when_message_1_shows_no_text(store: ContextStore) -> None:
    """Message 1 a tool call alone: the notice has no block to go on, so the summary goes
    with the cue that replaces the task instead of being lost with it."""
    conv = store.create_conversation()
    store.append(
        conv.id,
        [
            user("<task>fix the bug</task>"),
            assistant(tool_use("a0", name="ls")),
            user(tool_result("a0", "files")),
            *[m for i in range(5) for m in (assistant(f"step {i}"), user(f"ok {i}"))],
        ],
    )
    store.truncate(conv.id, keep="half", summary="SUMMARY-OF-HIDDEN")
    for format in ("anthropic", "openai", "gemini"):
        rendered = json.dumps(store.render(conv.id, format=format))
        assert "SUMMARY-OF-HIDDEN" in rendered and TRUNCATION_NOTICE[:40] in rendered, format
    first = store.render(conv.id)[0]["content"][0]["text"]
    assert first.startswith(FIRST_USER_REPLACEMENT) and "SUMMARY-OF-HIDDEN" in first


@pytest.mark.parametrize(
    "second",
    [assistant(tool_use("a0", name="ls")), user("IMPORTANT: never touch prod.db")],
    ids=["tool-call-alone", "second-user-message"],
)
def test_the_notice_follows_the_cue_without_a_summary_too(
    store: ContextStore, second: dict[str, Any]
) -> None:
    """Message 1 cannot show the notice (a tool call alone, or a user's words): truncate
    without a summary puts it after the cue, as it does with one; it was nowhere."""
    conv = store.create_conversation()
    answer = [user(tool_result("a0", "files"))] if second["role"] == "assistant" else []
    turns = [m for i in range(6) for m in (assistant(f"step {i}"), user(f"ok {i}"))]
    store.append(conv.id, [user("<task>fix the bug</task>"), second, *answer, *turns])
    store.truncate(conv.id, keep="half")
    cue = f"{FIRST_USER_REPLACEMENT}\n\n{TRUNCATION_NOTICE}"
    assert store.render(conv.id)[0]["content"][0]["text"] == cue
    for format in ("anthropic", "openai", "gemini"):
        assert TRUNCATION_NOTICE[:40] in json.dumps(store.render(conv.id, format=format)), format

    def cues() -> list[str]:
        return [
            u["text"]
            for u in store.context_updates(conv.id)
            if u["kind"] == "first_user_replacement"
        ]

    assert cues() == [cue]
    # A later truncation without a summary writes no second, identical cue.
    store.append(conv.id, [m for i in range(4) for m in (assistant(f"more {i}"), user(f"k {i}"))])
    assert store.truncate(conv.id, keep="half").action == "truncate"
    assert cues() == [cue]
    # A summary replaces it; a later truncation without one keeps that summary.
    store.append(conv.id, [m for i in range(4) for m in (assistant(f"again {i}"), user(f"j {i}"))])
    store.truncate(conv.id, keep="half", summary="THE-SUMMARY")
    store.append(conv.id, [m for i in range(4) for m in (assistant(f"last {i}"), user(f"l {i}"))])
    store.truncate(conv.id, keep="half")
    assert len(cues()) == 2 and "THE-SUMMARY" in cues()[-1]
    assert "THE-SUMMARY" in store.render(conv.id)[0]["content"][0]["text"]


def test_a_prepare_s_truncation_writes_no_cue_when_message_1_shows_no_text(
    store: ContextStore,
) -> None:
    """Cline's automatic truncation leaves the task text: the notice then has no place."""
    conv = store.create_conversation(context_window=64_000)
    store.append(
        conv.id,
        [
            user("<task>fix the bug</task>"),
            assistant(tool_use("a0", name="ls")),
            user(tool_result("a0", "files")),
            *[m for i in range(6) for m in (assistant(f"step {i}"), user(f"ok {i}"))],
        ],
    )
    _overflow(store, conv.id, 50_000)
    assert store.prepare_request(conv.id).truncated
    assert store.context_updates(conv.id) == []
    assert store.render(conv.id)[0]["content"][0]["text"] == "<task>fix the bug</task>"


def test_a_later_summary_replaces_the_one_carried_by_the_cue(store: ContextStore) -> None:
    """Message 1 shows no text, so each summary goes with the cue: the second replaces the
    first there, and its summarizer reads the task message holding the first one."""
    conv = store.create_conversation()
    store.append(
        conv.id,
        [
            user("<task>fix the bug</task>"),
            assistant(tool_use("a0", name="ls")),
            user(tool_result("a0", "files")),
            *[m for i in range(4) for m in (assistant(f"step {i}"), user(f"ok {i}"))],
        ],
    )
    store.truncate(conv.id, keep="half", summary="FIRST-SUMMARY")
    store.append(conv.id, [m for i in range(6) for m in (assistant(f"more {i}"), user(f"k {i}"))])
    seen: list[list[dict[str, Any]]] = []

    def summarize(hidden: list[dict[str, Any]]) -> str:
        seen.append(hidden)
        return "SECOND-SUMMARY"

    store.truncate(conv.id, keep="half", summarizer=summarize)
    first = store.render(conv.id)[0]["content"][0]["text"]
    assert first.startswith(FIRST_USER_REPLACEMENT)
    assert "SECOND-SUMMARY" in first and "FIRST-SUMMARY" not in first
    assert seen[0][0]["role"] == "user" and "FIRST-SUMMARY" in json.dumps(seen[0][0])


def test_a_summary_follows_the_cue_when_the_task_opens_with_an_image(
    store: ContextStore,
) -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/s.png"}}
    conv = store.create_conversation()
    store.append(
        conv.id,
        [
            user(image, "<task>make it look like this</task>"),
            assistant(tool_use("a0", name="ls")),
            user(tool_result("a0", "files")),
            *[m for i in range(4) for m in (assistant(f"step {i}"), user(f"ok {i}"))],
        ],
    )
    store.truncate(conv.id, keep="half", summary="SUMMARY-OF-HIDDEN")
    first = store.render(conv.id)[0]["content"]
    assert first[0] == image
    assert first[1]["text"].startswith(FIRST_USER_REPLACEMENT)
    assert "SUMMARY-OF-HIDDEN" in first[1]["text"]


def test_a_summary_with_no_place_to_be_shown_is_refused(store: ContextStore) -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/s.png"}}
    conv = store.create_conversation()
    store.append(
        conv.id,
        [
            user(image),
            assistant(tool_use("a0", name="ls")),
            user(tool_result("a0", "files")),
            *[m for i in range(4) for m in (assistant(f"step {i}"), user(f"ok {i}"))],
        ],
    )
    before = store.row_counts()
    called: list[int] = []
    with pytest.raises(InvalidInputError, match="no place the model reads"):
        store.truncate(conv.id, keep="half", summarizer=lambda m: called.append(1) or "S")
    with pytest.raises(InvalidInputError, match="truncate without a summary"):
        store.truncate(conv.id, keep="half", summary="S")
    assert called == [] and store.row_counts() == before
    assert store.truncate(conv.id, keep="half").action == "truncate"


def test_an_explicit_truncation_reports_the_range_before_it_and_the_last_total(
    store: ContextStore,
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [*session(10), assistant("done")])
    _overflow(store, conv.id, 42_000)
    first = store.truncate(conv.id, keep="half", summary="first")
    assert (first.action, first.previous_range, first.deleted_range) == ("truncate", None, (2, 11))
    assert first.tokens_total == 42_000
    second = store.truncate(conv.id, keep="half", summary="second")
    assert (second.previous_range, second.deleted_range) == ((2, 11), (2, 15))
    assert "second" in store.render(conv.id)[1]["content"][0]["text"]
    assert "first" not in store.render(conv.id)[1]["content"][0]["text"]
    last = store.truncate(conv.id, keep="none")
    stuck = store.truncate(conv.id, keep="none")
    assert (stuck.action, stuck.keep, stuck.tokens_total) == ("none", "none", 42_000)
    assert stuck.deleted_range == stuck.previous_range == last.deleted_range
    assert stuck.reason.endswith("; nothing more can be hidden")


def test_a_summarizer_sees_the_messages_being_hidden(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(4))
    seen: list[list[dict[str, Any]]] = []

    def summarize(hidden: list[dict[str, Any]]) -> str:
        seen.append(hidden)
        return f"{len(hidden)} messages about reading files"

    store.truncate(conv.id, keep="none", summarizer=summarize)
    assert len(seen[0]) == 6
    assert "6 messages about reading files" in store.render(conv.id)[1]["content"][0]["text"]


def test_a_second_summary_is_written_from_the_first(store: ContextStore) -> None:
    """The new notice replaces the one holding the earlier summary: the summarizer reads
    that notice first, or what the first summary said would be gone from the model's view."""
    conv = store.create_conversation()
    store.append(conv.id, session(6))
    seen: list[list[dict[str, Any]]] = []

    def summarize(hidden: list[dict[str, Any]]) -> str:
        seen.append(hidden)
        return f"SUMMARY-{len(seen)}"

    store.truncate(conv.id, keep="half", summarizer=summarize)
    store.append(conv.id, session(2))
    store.truncate(conv.id, keep="half", summarizer=summarize)
    assert "SUMMARY-1" not in json.dumps(seen[0])
    earlier = seen[1][0]
    assert earlier["role"] == "assistant" and "SUMMARY-1" in json.dumps(earlier)
    assert "SUMMARY-2" in store.render(conv.id)[1]["content"][0]["text"]


def test_the_notice_never_replaces_a_users_words(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, [user("<task>fix it</task>"), user("IMPORTANT: never touch prod.db")])
    store.append(conv.id, [m for i in range(6) for m in (assistant(f"step {i}"), user(f"ok {i}"))])
    store.truncate(conv.id, keep="half")
    assert store.render(conv.id)[1]["content"][0]["text"] == "IMPORTANT: never touch prod.db"
    assert all(u["message_idx"] != 1 for u in store.context_updates(conv.id))


def test_a_failing_summarizer_writes_nothing(store: ContextStore) -> None:
    from contextstore import ContextStoreError

    conv = store.create_conversation()
    store.append(conv.id, session(4))
    before = store.row_counts()

    def broken(hidden: list[dict[str, Any]]) -> str:
        raise RuntimeError("provider down")

    with pytest.raises(ContextStoreError, match="provider down"):
        store.truncate(conv.id, keep="none", summarizer=broken)
    assert store.row_counts() == before


def test_auto_condense_threshold_and_the_summary_guard(store: ContextStore) -> None:
    conv = store.create_conversation(context_window=200_000)
    store.set_auto_condense(conv.id, 0.5)
    store.append(conv.id, [*session(10), assistant("done")])
    _overflow(store, conv.id, 99_999)
    assert store.prepare_request(conv.id).decision.action == "none"
    _overflow(store, conv.id, 100_000)
    ctx = store.prepare_request(conv.id, summarizer=lambda hidden: "summary")
    assert ctx.decision.keep == "last_two" and ctx.deleted_range == (2, 19)
    assert (ctx.decision.action, ctx.decision.previous_range, ctx.decision.tokens_total) == (
        "truncate",
        None,
        100_000,
    )
    assert ctx.decision.reason.endswith("; condensed with a summary")
    _overflow(store, conv.id, 150_000)
    guarded = store.prepare_request(conv.id, summarizer=lambda hidden: "summary of a summary")
    assert guarded.decision.action == "none" and "summarising a summary" in guarded.decision.reason
    assert (
        guarded.decision.keep,
        guarded.decision.deleted_range,
        guarded.decision.previous_range,
        guarded.decision.tokens_total,
    ) == (None, (2, 19), (2, 19), 150_000)
    with pytest.raises(InvalidInputError):
        store.set_auto_condense(conv.id, 1.5)


@pytest.mark.parametrize(
    ("fraction", "threshold", "source"),
    [
        (
            0.95,
            160_000,
            "95% of the 200,000-token window is 190,000, over the maximum allowed size, "
            "which is used instead",
        ),
        (0.8, 160_000, "80% of the 200,000-token window"),
        (0.5, 100_000, "50% of the 200,000-token window"),
    ],
)
def test_the_auto_condense_reason_names_the_threshold_applied(
    tmp_path: Path, fraction: float, threshold: int, source: str
) -> None:
    """A threshold over the maximum allowed size is capped at it: the reason names the
    tokens it compacted at and why, not the fraction it was given (95 % of the window, when
    it compacted at 160,000)."""
    db = str(tmp_path / "condense.db")
    with ContextStore.open(db) as store:
        conv = store.create_conversation(context_window=200_000)
        store.append(conv.id, [*session(10), assistant("done")])
        _overflow(store, conv.id, threshold - 1)
        below = store.prepare_request(conv.id, auto_condense=fraction, summarizer=lambda h: "S")
        assert below.decision.action == "none"
        _overflow(store, conv.id, threshold)
        ctx = store.prepare_request(conv.id, auto_condense=fraction, summarizer=lambda h: "S")
    expected = (
        f"previous request used {threshold:,} tokens, at or over the auto-condense threshold "
        f"of {threshold:,} tokens ({source}); condensed with a summary"
    )
    assert ctx.decision.action == "truncate" and ctx.decision.reason == expected
    audit = run("--db", db, "audit", conv.id, "--json").json()
    assert [t["reason"] for t in audit["truncations"]] == [expected]


def test_auto_condense_asks_for_no_summary_when_deduplication_is_enough(
    store: ContextStore,
) -> None:
    big = "x = 1\n" * 2_000
    conv = store.create_conversation(context_window=64_000)
    store.set_auto_condense(conv.id, 0.5)
    messages: list[dict[str, Any]] = [user("<task>t</task>"), assistant("ok")]
    for i in range(3):
        messages += [
            assistant(tool_use(f"r{i}", path="big.py")),
            user(file_read(f"r{i}", "big.py", big)),
        ]
    store.append(conv.id, messages)
    _overflow(store, conv.id, 40_000)
    asked: list[int] = []
    ctx = store.prepare_request(conv.id, summarizer=lambda hidden: str(asked.append(1)))
    assert ctx.decision.action == "dedupe" and asked == []


def test_a_condensed_summary_reaches_the_model_when_message_1_shows_no_text(
    store: ContextStore,
) -> None:
    conv = store.create_conversation(context_window=200_000)
    store.set_auto_condense(conv.id, 0.5)
    store.append(
        conv.id,
        [
            user("<task>fix the bug</task>"),
            assistant(tool_use("a0", name="ls")),
            user(tool_result("a0", "files")),
            *[m for i in range(8) for m in (assistant(f"step {i}"), user(f"ok {i}"))],
        ],
    )
    _overflow(store, conv.id, 100_000)
    ctx = store.prepare_request(conv.id, summarizer=lambda hidden: "THE-SUMMARY")
    assert ctx.decision.action == "truncate"
    for format in ("anthropic", "openai", "gemini"):
        assert "THE-SUMMARY" in json.dumps(store.render(conv.id, format=format)), format


def test_auto_condense_asks_no_summary_that_could_not_be_shown(store: ContextStore) -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/s.png"}}
    conv = store.create_conversation(context_window=200_000)
    store.set_auto_condense(conv.id, 0.5)
    store.append(
        conv.id,
        [
            user(image),
            assistant(tool_use("a0", name="ls")),
            user(tool_result("a0", "files")),
            *[m for i in range(8) for m in (assistant(f"step {i}"), user(f"ok {i}"))],
        ],
    )
    _overflow(store, conv.id, 100_000)
    called: list[int] = []
    ctx = store.prepare_request(conv.id, summarizer=lambda hidden: called.append(1) or "S")
    assert ctx.decision.action == "truncate" and called == []


@pytest.mark.parametrize(
    ("window", "total", "source"),
    [
        (64_000, 37_000, "75% of the 64,000-token window is 48,000, over the maximum allowed size"),
        (200_000, 150_000, "75% of the 200,000-token window)"),
    ],
)
def test_a_subagent_s_reason_names_the_threshold_applied(
    memory_store: ContextStore, window: int, total: int, source: str
) -> None:
    parent = memory_store.create_conversation(context_window=window)
    child = memory_store.create_subagent(parent.id)
    memory_store.append(child.id, session(10))
    _overflow(memory_store, child.id, total - 1)
    assert memory_store.prepare_request(child.id).decision.action == "none"
    _overflow(memory_store, child.id, total)
    reason = memory_store.prepare_request(child.id).decision.reason
    assert f"at or over its compaction threshold of {total:,} tokens (" in reason
    assert source in reason


def test_subagents_compact_at_three_quarters_with_quarter_and_stop_without_progress(
    store: ContextStore,
) -> None:
    parent = store.create_conversation(context_window=100_000)
    child = store.create_subagent(parent.id)
    assert child.parent_id == parent.id and child.context_window == 100_000
    store.append(child.id, session(10))
    _overflow(store, child.id, 74_999)
    assert store.prepare_request(child.id).decision.action == "none"
    _overflow(store, child.id, 75_000)
    first = store.prepare_request(child.id)
    assert first.decision.keep == "quarter" and first.deleted_range == (2, 15)
    assert TRUNCATION_NOTICE not in str(first.messages)
    for _ in range(5):
        _overflow(store, child.id, 90_000)
        last = store.prepare_request(child.id)
    assert last.decision.action == "none" and "no progress" in last.decision.reason


def test_a_subagent_s_settings_are_checked_by_name(store: ContextStore) -> None:
    parent = store.create_conversation(context_window=100_000).id
    for kwargs, name in [
        ({"model_id": "m" * 201}, "model_id"),
        ({"context_window": 0}, "context_window"),
        ({"title": ""}, "title"),
    ]:
        with pytest.raises(InvalidInputError, match=f"^{name} must"):
            store.create_subagent(parent, **kwargs)
    assert [c.id for c in store.list_conversations()] == [parent]
    assert store.create_subagent(parent, model_id="m" * 200).model_id == "m" * 200


def test_metadata_written_over_keeps_the_store_s_settings_unless_it_names_them(
    store: ContextStore,
) -> None:
    parent = store.create_conversation(context_window=100_000)
    child = store.create_subagent(parent.id)
    store.set_auto_condense(child.id, 0.6)
    store.set_conversation_metadata(child.id, {"importer": "its state"})
    assert store.get_conversation(child.id).metadata == {
        "importer": "its state",
        "subagent": True,
        "auto_condense": 0.6,
    }
    store.append(child.id, session(10))
    _overflow(store, child.id, 75_000)
    assert store.prepare_request(child.id).decision.keep == "quarter"  # still a subagent
    store.set_conversation_metadata(child.id, {"auto_condense": 0.9, "subagent": True})
    assert store.get_conversation(child.id).metadata == {"auto_condense": 0.9, "subagent": True}
    for bad, name in [({"auto_condense": 2}, "auto_condense"), ({"subagent": "yes"}, "subagent")]:
        with pytest.raises(InvalidInputError, match=rf"^metadata\['{name}'\] must"):
            store.set_conversation_metadata(child.id, bad)
    assert store.get_conversation(child.id).metadata == {"auto_condense": 0.9, "subagent": True}


def test_request_options_are_checked_and_rebuilt_into_the_payload(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(2))
    for bad in ("a\x00b", "x" * (store.max_message_bytes + 1)):
        with pytest.raises(InvalidInputError, match=r"^system "):
            store.prepare_request(conv.id, system=bad)
    assert store.requests(conv.id) == []
    prepared = store.prepare_request(conv.id, system="Be brief.", model="m-1", max_tokens=1_024)
    assert prepared.request_id is not None
    payload = store.request_payload(conv.id, prepared.request_id)
    assert payload == prepared.payload
    assert (payload["system"], payload["model"], payload["max_tokens"]) == (
        "Be brief.",
        "m-1",
        1_024,
    )


SYSTEM_BLOCKS = [
    {"type": "text", "text": "You are careful.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Answer briefly."},
]


def test_a_system_prompt_of_text_blocks_is_sent_stored_and_rebuilt(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(2))
    given = json.loads(json.dumps(SYSTEM_BLOCKS))
    blocks = store.prepare_request(conv.id, system=given)
    assert given == SYSTEM_BLOCKS  # the caller's list is not changed
    assert blocks.payload["system"] == SYSTEM_BLOCKS
    assert store.request_payload(conv.id, blocks.request_id) == blocks.payload
    # the fast path (renderings reused) and a payload built whole send the same
    store.prepare_cache.clear()
    store.prepare_cache.max_bytes = 100
    whole = store.prepare_request(conv.id, system=SYSTEM_BLOCKS)
    assert whole.payload == blocks.payload
    # its node is the text the model reads, the node of that text given as a string
    text = store.prepare_request(conv.id, system="You are careful.\n\nAnswer briefly.")
    hashes = {
        row[0]: row[1]
        for row in store.query("SELECT id, system_sha256 FROM api_requests").rows
        if row[0] in (blocks.request_id, whole.request_id, text.request_id)
    }
    assert len(hashes) == 3 and len(set(hashes.values())) == 1
    nodes = store.query("SELECT sha256, content, token_count FROM context_nodes").rows
    (node,) = [row for row in nodes if row[0] == hashes[blocks.request_id]]
    assert node[1] == "You are careful.\n\nAnswer briefly."
    assert node[2] == store.token_counter.count(node[1])


@pytest.mark.parametrize(
    ("system", "message"),
    [
        ([], r"^system is an empty list"),
        ([{"type": "text", "text": ""}], r"^system\[0\]\.text is blank"),
        ([{"type": "image", "source": {}}], r"^system\[0\] is 'image', not a text block"),
        ({"type": "text", "text": "a"}, r"^system must be a string or a list of text blocks"),
    ],
)
def test_a_malformed_system_prompt_is_refused_before_anything_is_written(
    store: ContextStore, system: Any, message: str
) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(1))
    with pytest.raises(InvalidInputError, match=message):
        store.prepare_request(conv.id, system=system)
    assert store.requests(conv.id) == []


NEGATIVE_ZERO_TOOLS = [
    {
        "name": "seek",
        "description": "d",
        "input_schema": {
            "type": "object",
            "properties": {"offset": {"type": "number", "default": -0.0, "enum": [-0.0, 1.5]}},
        },
    }
]


@pytest.mark.parametrize("format", ["anthropic", "openai", "gemini"])
def test_a_tool_definition_holding_negative_zero_rebuilds_to_its_payload(
    store: ContextStore, format: str
) -> None:
    """PostgreSQL's jsonb keeps -0.0 as 0.0: the payload hashed -0.0 and its rebuild,
    from the stored 0.0, failed verification (PayloadMismatchError, check --full exit 5)."""
    cid = store.create_conversation().id
    store.append(cid, "user", "hi")
    ctx = store.prepare_request(cid, tools=NEGATIVE_ZERO_TOOLS, format=format)
    assert store.request_payload(cid, ctx.request_id) == ctx.payload
    assert "-0.0" not in json.dumps(ctx.payload)  # sent as it is stored, on every backend
    assert store.check(cid, full=True).problems == ()
    assert NEGATIVE_ZERO_TOOLS[0]["input_schema"]["properties"]["offset"]["default"] == -0.0


def test_request_payload_is_rebuilt_from_rows_and_verified(store: ContextStore) -> None:
    conv = store.create_conversation(context_window=64_000)
    store.append(conv.id, session(6))
    tools = [
        {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}
    ]
    first = store.prepare_request(conv.id, system="You are careful.", tools=tools, model="m")
    store.record_request(conv.id, request_id=first.request_id, tokens_in=50_000, tokens_out=10)
    second = store.prepare_request(conv.id, system="You are careful.", tools=tools, format="openai")
    store.append(conv.id, "assistant", "later")
    assert store.request_payload(conv.id, first.request_id) == first.payload
    assert store.request_payload(conv.id, second.request_id) == second.payload
    assert (
        first.payload["system"] == "You are careful."
        and second.payload["messages"][0]["role"] == "system"
    )
    with store.database.engine.begin() as connection:
        from sqlalchemy import update

        from contextstore.storage.tables import blocks

        connection.execute(update(blocks).where(blocks.c.message_idx == 0).values(text="tampered"))
    with pytest.raises(PayloadMismatchError):
        store.request_payload(conv.id, first.request_id)


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_prepare_on_ten_thousand_messages_makes_no_tokenizer_call_and_no_per_message_query(
    backend: str, tmp_path: Any
) -> None:
    counter = TiktokenCounter()
    store, cleanup = open_backend(backend, tmp_path, token_counter=counter)
    try:
        conv = store.create_conversation(context_window=200_000)
        store.append(conv.id, [*session(5_000)[:9_999], assistant("done")])
        store.record_request(conv.id, tokens_in=170_000)
        calls = counter.calls
        with recorded_statements(store) as statements:
            ctx = store.prepare_request(conv.id)
        assert ctx.truncated and counter.calls == calls
        assert len(statements) < 30, statements
    finally:
        cleanup()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.integers(3, 25),
    totals=st.lists(st.integers(0, 150_000), min_size=1, max_size=6),
    rollback_at=st.integers(0, 5),
)
def test_properties_of_prepare_and_rollback(
    fresh_store: StoreFactory, turns: int, totals: list[int], rollback_at: int
) -> None:
    """The first two messages survive; after a cut the view starts with a user message and
    every call is paired; a rollback restores exactly the range and overlays of its checkpoint."""
    with fresh_store() as store:
        conv = store.create_conversation(context_window=64_000)
        store.append(conv.id, session(turns))
        marks = []
        for i, total in enumerate(totals):
            store.append(
                conv.id,
                [
                    assistant(f"more {i}", tool_use(f"m{i}")),
                    user(file_read(f"m{i}", "a.py", "x" * 50)),
                ],
            )
            store.record_request(conv.id, tokens_in=total)
            cp = store.checkpoint(conv.id, f"cp{i}")
            marks.append(
                (
                    cp,
                    store.deleted_range(conv.id),
                    store.context_updates(conv.id),
                    store.render(conv.id),
                )
            )
            ctx = store.prepare_request(conv.id)
            view = ctx.messages
            originals = store.messages(conv.id)
            assert view[0]["content"][0]["text"] in (
                originals[0]["content"][0]["text"],
                FIRST_USER_REPLACEMENT,
            )
            if ctx.deleted_range:
                assert view[2]["role"] == "user"
            for a, b in itertools.pairwise(view):
                ids = [
                    x["id"]
                    for x in a["content"]
                    if isinstance(x, dict) and x.get("type") == "tool_use"
                ]
                if ids:
                    got = [x.get("tool_use_id") for x in b["content"][: len(ids)]]
                    assert got == ids
        cp, range_then, updates_then, view_then = marks[rollback_at % len(marks)]
        store.rollback(conv.id, cp.ts)
        assert store.deleted_range(conv.id) == range_then
        assert store.context_updates(conv.id) == updates_then
        assert store.render(conv.id) == view_then


def test_a_retry_without_recorded_usage_does_not_truncate_twice(store: ContextStore) -> None:
    """Only the previous request counts: a prepared request with no usage decides nothing."""
    conv = store.create_conversation(context_window=64_000)
    store.append(conv.id, session(10))
    _overflow(store, conv.id, 50_000)
    first = store.prepare_request(conv.id)
    retry = store.prepare_request(conv.id)
    assert first.truncated and not retry.truncated
    assert retry.deleted_range == first.deleted_range == (2, 9)


def test_calls_waiting_for_results_render_but_cannot_be_sent(store: ContextStore) -> None:
    from contextstore import InvalidInputError

    conv = store.create_conversation()
    store.append(conv.id, [user("task"), assistant("reading", tool_use("t1", path="a.py"))])
    for format in ("anthropic", "openai", "gemini"):
        assert store.render(conv.id, format=format)
    before = store.row_counts()
    with pytest.raises(InvalidInputError, match=r"calls tools \['t1'\] whose results"):
        store.prepare_request(conv.id)
    assert store.row_counts() == before
    store.append(conv.id, "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}])
    assert store.prepare_request(conv.id).request_id is not None


def _calls_then_done() -> list[dict[str, Any]]:
    """A task, three calls each answered, then a last reply: message 1 calls a0."""
    messages = [user("<task>fix the bug</task>")]
    for i in range(3):
        messages += [assistant(f"step {i}", tool_use(f"a{i}")), user(tool_result(f"a{i}", "r"))]
    return [*messages, assistant("done")]


def test_a_cut_that_hides_message_1_s_results_answers_its_calls(store: ContextStore) -> None:
    """keep='none' hides every message after message 1, its calls' results included: they
    are lost, not pending, so the view answers them with placeholders and the request can
    be prepared (it was refused as waiting for tool results that were stored)."""
    conv = store.create_conversation()
    store.append(conv.id, _calls_then_done())
    assert store.truncate(conv.id, keep="none", summary="S").deleted_range == (2, 7)
    view = store.render(conv.id)
    assert [m["role"] for m in view] == ["user", "assistant", "user"]
    assert view[2]["content"] == [tool_result("a0", "result missing")]
    for format in ("anthropic", "openai", "gemini"):
        ctx = store.prepare_request(conv.id, format=format)
        assert ctx.request_id is not None
        assert store.request_payload(conv.id, ctx.request_id) == ctx.payload
    (viewed,) = [m for m in store.viewed_messages(conv.id) if m.index == 1]
    assert viewed.followed_by == [tool_result("a0", "result missing")]


def test_calls_after_a_cut_still_wait_for_their_results(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, _calls_then_done())
    store.truncate(conv.id, keep="half")
    store.append(conv.id, [user("go on"), assistant("reading", tool_use("b1"))])
    before = store.row_counts()
    with pytest.raises(InvalidInputError, match=r"calls tools \['b1'\] whose results"):
        store.prepare_request(conv.id)
    assert store.row_counts() == before


def test_an_empty_conversation_prepares_an_empty_request(store: ContextStore) -> None:
    conv = store.create_conversation()
    assert store.prepare_request(conv.id, format="gemini").payload == {"contents": []}


def test_a_keep_of_any_depth_is_refused_before_it_is_written_out(store: ContextStore) -> None:
    conv = store.create_conversation()
    store.append(conv.id, session(4))
    deep: list[Any] = []
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(InvalidInputError, match="unknown keep strategy"):
        store.truncate(conv.id, keep=deep)  # type: ignore[arg-type]
