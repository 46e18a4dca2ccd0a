"""File-read de-duplication (Cline's context rewriting) as an overlay-aware planner."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contextstore.core.errors import InvalidInputError
from contextstore.core.file_reads import (
    ALL_PATHS,
    REPLACED_PATHS,
    DedupePlan,
    optimize_file_reads,
    plan_file_read_dedupe,
)
from contextstore.core.notices import DUPLICATE_FILE_READ_NOTICE as NOTICE
from contextstore.core.overlays import BlockUpdate, UpdateKind, apply_overlays, text_hash
from tests.conftest import duplicate_reads_saving

Message = dict[str, Any]
Overlay = dict[tuple[int, int], BlockUpdate]

TASK = "<task>do it</task>"
FIRST_REPLY = "ok"
REPLY = "done"


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def header(tool: str, path: str) -> str:
    return f"[{tool} for '{path}'] Result:"


def xml_read(path: str, body: str) -> list[dict[str, Any]]:
    return [text(f"{header('read_file', path)}\n{body}")]


def old_read(path: str, body: str) -> list[dict[str, Any]]:
    return [text(header("read_file", path)), text(body)]


def native_read(path: str, body: str, *, as_string: bool = False) -> list[dict[str, Any]]:
    result = f"{header('read_file', path)}\n{body}"
    content: Any = result if as_string else [text(result)]
    return [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content}]


def write_result(tool: str, path: str, body: str) -> str:
    return (
        f"{header(tool, path)}\nThe content was successfully saved to {path}.\n\n"
        f'<final_file_content path="{path}">\n{body}\n</final_file_content>\n\nIMPORTANT: ok'
    )


def mention(path: str, body: str) -> str:
    return f'<file_content path="{path}">\n{body}\n</file_content>'


def history(*user_contents: Any) -> list[Message]:
    """Task and first reply, then each user content followed by an assistant reply.

    The n-th user content lands at index 2 + 2 * n.
    """
    messages: list[Message] = [
        {"role": "user", "content": [text(TASK)]},
        {"role": "assistant", "content": [text(FIRST_REPLY)]},
    ]
    for content in user_contents:
        messages.append({"role": "user", "content": content})
        messages.append({"role": "assistant", "content": [text(REPLY)]})
    return messages


def overlay_of(*plans: DedupePlan) -> Overlay:
    """The effective overlay after storing the given rounds in order."""
    return {update.address: update for plan in plans for update in plan.updates}


def shown(messages: list[Message], overlay: Overlay, idx: int) -> Any:
    return apply_overlays(messages[idx], idx, overlay)["content"]


# --- Detection forms ------------------------------------------------------------------------


def test_xml_text_form_keeps_header_and_replaces_the_content() -> None:
    messages = history(xml_read("a.py", "v1"), xml_read("a.py", "v2"))
    plan = plan_file_read_dedupe(messages, 2, {})
    assert plan.touched == (2,)
    (update,) = plan.updates
    assert update.address == (2, 0)
    assert update.kind == UpdateKind.READ_FILE
    assert update.text == f"{header('read_file', 'a.py')}\n{NOTICE}"
    assert update.source == "file_read_dedupe"
    assert update.base_hash == text_hash(messages[2]["content"][0]["text"])
    assert dict(update.metadata) == {}


def test_old_form_header_alone_in_block_zero_content_in_block_one() -> None:
    messages = history(old_read("a.py", "v1"), old_read("a.py", "v2"))
    (update,) = plan_file_read_dedupe(messages, 2, {}).updates
    assert update.address == (2, 1)
    assert update.text == NOTICE
    assert update.base_hash == text_hash("v1")


def test_native_tool_result_with_list_content() -> None:
    messages = history(native_read("a.py", "v1"), native_read("a.py", "v2"))
    plan = plan_file_read_dedupe(messages, 2, {})
    (update,) = plan.updates
    assert update.address == (2, 0)
    block = shown(messages, overlay_of(plan), 2)[0]
    assert block["content"][0]["text"] == f"{header('read_file', 'a.py')}\n{NOTICE}"


def test_native_tool_result_with_string_content_is_read_too() -> None:
    # Cline ignored string tool results; reading them is a deliberate fix.
    messages = history(native_read("a.py", "v1", as_string=True), native_read("a.py", "v2"))
    plan = plan_file_read_dedupe(messages, 2, {})
    assert plan.touched == (2,)
    block = shown(messages, overlay_of(plan), 2)[0]
    assert block["content"] == f"{header('read_file', 'a.py')}\n{NOTICE}"


@pytest.mark.parametrize("tool", ["write_to_file", "replace_in_file"])
def test_write_results_replace_final_file_content_with_spaces_inside_the_tags(tool: str) -> None:
    messages = history([text(write_result(tool, "a.py", "v1"))], xml_read("a.py", "v2"))
    (update,) = plan_file_read_dedupe(messages, 2, {}).updates
    assert update.kind == UpdateKind.ALTER_FILE
    assert update.address == (2, 0)
    assert update.text == (
        f"{header(tool, 'a.py')}\nThe content was successfully saved to a.py.\n\n"
        f'<final_file_content path="a.py"> {NOTICE} </final_file_content>\n\nIMPORTANT: ok'
    )


def test_a_newer_write_supersedes_an_older_read() -> None:
    messages = history(xml_read("a.py", "v1"), [text(write_result("write_to_file", "a.py", "v2"))])
    (update,) = plan_file_read_dedupe(messages, 2, {}).updates
    assert (update.address, update.kind) == ((2, 0), UpdateKind.READ_FILE)


def test_rejected_write_is_not_an_occurrence_and_stops_the_mention_scan() -> None:
    rejected = [
        text(f"{header('write_to_file', 'a.py')}\nThe user denied this operation."),
        text(mention("b.py", "B1")),
    ]
    later = [text("<feedback/>"), text(mention("b.py", "B2"))]
    messages = history(rejected, xml_read("a.py", "v"), later)
    assert plan_file_read_dedupe(messages, 2, {}).updates == ()


def test_other_tool_results_do_not_stop_the_mention_scan() -> None:
    command = [text(f"{header('execute_command', 'ls')}\nok"), text(mention("b.py", "B1"))]
    later = [text("<feedback/>"), text(mention("b.py", "B2"))]
    plan = plan_file_read_dedupe(history(command, later), 2, {})
    assert [u.address for u in plan.updates] == [(2, 1)]


def test_only_user_messages_from_start_are_scanned() -> None:
    messages = history(xml_read("a.py", "v1"), xml_read("a.py", "v2"), xml_read("a.py", "v3"))
    messages[3] = {"role": "assistant", "content": xml_read("a.py", "assistant")}
    plan = plan_file_read_dedupe(messages, 4, {})
    assert plan.touched == (4,)


def test_nothing_to_deduplicate_needs_truncation() -> None:
    plan = plan_file_read_dedupe(history(xml_read("a.py", "v1"), xml_read("b.py", "v2")), 2, {})
    assert plan == DedupePlan(updates=(), touched=(), fraction_saved=0.0, need_to_truncate=True)


# --- File mentions --------------------------------------------------------------------------


def mention_history() -> list[Message]:
    both = [text("<feedback>look</feedback>"), text(mention("a.py", "A1") + mention("b.py", "B1"))]
    again_a = [text("x"), text("y"), text(mention("a.py", "A2"))]
    return history(both, again_a)


def test_mentions_in_blocks_zero_to_two_with_several_paths() -> None:
    messages = mention_history()
    (update,) = plan_file_read_dedupe(messages, 2, {}).updates
    assert update.address == (2, 1)
    assert update.kind == UpdateKind.FILE_MENTION
    notice_a = f'<file_content path="a.py">{NOTICE}</file_content>'
    assert update.text == notice_a + mention("b.py", "B1")
    assert update.metadata == {REPLACED_PATHS: ["a.py"], ALL_PATHS: ["a.py", "b.py"]}
    assert update.base_hash == text_hash(messages[2]["content"][1]["text"])


def test_mentions_after_block_two_are_ignored() -> None:
    late = [text("x"), text("y"), text("z"), text(mention("a.py", "A2"))]
    messages = history([text(mention("a.py", "A1"))], late)
    assert plan_file_read_dedupe(messages, 2, {}).updates == ()


def test_mention_scan_needs_text_in_block_zero_as_in_cline() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "i"}}
    messages = history([image, text(mention("a.py", "A1"))], [text(mention("a.py", "A2"))])
    assert plan_file_read_dedupe(messages, 2, {}).updates == ()


def test_round_two_skips_paths_already_replaced_and_builds_on_the_current_text() -> None:
    messages = mention_history()
    round_1 = plan_file_read_dedupe(messages, 2, {})
    messages += history([text("<f/>"), text(mention("b.py", "B2") + mention("a.py", "A3"))])[2:]
    round_2 = plan_file_read_dedupe(messages, 2, overlay_of(round_1))
    by_address = {u.address: u for u in round_2.updates}
    assert sorted(by_address) == [(2, 1), (4, 2)]
    first = by_address[(2, 1)]
    notice_a = f'<file_content path="a.py">{NOTICE}</file_content>'
    notice_b = f'<file_content path="b.py">{NOTICE}</file_content>'
    assert first.text == notice_a + notice_b
    assert first.metadata == {REPLACED_PATHS: ["a.py", "b.py"], ALL_PATHS: ["a.py", "b.py"]}
    assert first.base_hash == text_hash(round_1.updates[0].text)
    assert by_address[(4, 2)].metadata == {REPLACED_PATHS: ["a.py"], ALL_PATHS: ["a.py"]}


def test_a_mention_message_with_every_path_replaced_is_skipped() -> None:
    messages = mention_history()
    messages += history([text("<f/>"), text(mention("b.py", "B2") + mention("a.py", "A3"))])[2:]
    round_1 = plan_file_read_dedupe(messages, 2, {})
    assert round_1.updates[0].metadata[REPLACED_PATHS] == ["a.py", "b.py"]
    messages += history([text(mention("a.py", "A4") + mention("b.py", "B4"))])[2:]
    round_2 = plan_file_read_dedupe(messages, 2, overlay_of(round_1))
    assert round_2.touched == (6,)  # 2 and 4 had every path replaced in round 1


def test_dollar_patterns_in_paths_are_replaced_literally() -> None:
    path = "src/$&/$'x$$.ts"
    messages = history([text(mention(path, "v1") + "tail")], [text(mention(path, "v2"))])
    (update,) = plan_file_read_dedupe(messages, 2, {}).updates
    assert update.text == f'<file_content path="{path}">{NOTICE}</file_content>tail'


def test_metadata_lists_are_never_shared() -> None:
    messages = history(
        [text(mention("a.py", "1"))], [text(mention("a.py", "2"))], [text(mention("a.py", "3"))]
    )
    round_1 = plan_file_read_dedupe(messages, 2, {})
    first, second = round_1.updates
    assert first.metadata[REPLACED_PATHS] is not second.metadata[REPLACED_PATHS]
    assert first.metadata[ALL_PATHS] is not second.metadata[ALL_PATHS]
    assert first.metadata[REPLACED_PATHS] is not first.metadata[ALL_PATHS]
    overlay = overlay_of(round_1)
    stored = copy.deepcopy(overlay)
    messages += history([text(mention("a.py", "4"))])[2:]
    round_2 = plan_file_read_dedupe(messages, 2, overlay)
    assert overlay == stored
    assert round_2.touched == (6,)


def test_malformed_mention_metadata_is_refused() -> None:
    messages = mention_history()
    bad = BlockUpdate(2, 1, UpdateKind.FILE_MENTION, "x", metadata={REPLACED_PATHS: "a.py"})
    with pytest.raises(InvalidInputError, match="replaced_paths"):
        plan_file_read_dedupe(messages, 2, {(2, 1): bad})


# --- Rounds ---------------------------------------------------------------------------------


def test_reads_at_2_4_6_then_8_in_a_second_round_edit_6() -> None:
    messages = history(*(xml_read("a.py", f"v{n}") for n in range(3)))
    round_1 = plan_file_read_dedupe(messages, 2, {})
    assert round_1.touched == (2, 4)
    messages += history(xml_read("a.py", "v3"))[2:]
    round_2 = plan_file_read_dedupe(messages, 2, overlay_of(round_1))
    assert round_2.touched == (6,)


def test_a_message_with_any_other_update_is_never_rescanned() -> None:
    messages = history(xml_read("a.py", "v1"), xml_read("a.py", "v2"))
    masked = BlockUpdate(2, 0, UpdateKind.PROCESSOR, "[masked]", source="secrets")
    assert plan_file_read_dedupe(messages, 2, {(2, 0): masked}).updates == ()


@pytest.mark.parametrize("kind", [UpdateKind.PROCESSOR, UpdateKind.MANUAL])
def test_a_read_rewritten_by_a_processor_or_by_hand_is_read_as_it_is_shown(kind: str) -> None:
    messages = history(xml_read("a.py", "v1   "), xml_read("a.py", "v2"))
    distilled = f"{header('read_file', 'a.py')}\nv1"
    rewrite = BlockUpdate(2, 0, kind, distilled, source="distill")
    plan = plan_file_read_dedupe(messages, 2, {(2, 0): rewrite})
    assert [update.address for update in plan.updates] == [(2, 0)]
    assert plan.updates[0].kind == UpdateKind.READ_FILE
    assert plan.updates[0].base_hash == text_hash(distilled)


@pytest.mark.parametrize("kind", [UpdateKind.TRUNCATION_NOTICE, UpdateKind.FIRST_USER_REPLACEMENT])
def test_a_message_the_context_manager_rewrote_is_never_rescanned(kind: str) -> None:
    messages = history(xml_read("a.py", "v1"), xml_read("a.py", "v2"))
    notice = BlockUpdate(2, 0, kind, f"{header('read_file', 'a.py')}\nv1", source="cm")
    assert plan_file_read_dedupe(messages, 2, {(2, 0): notice}).updates == ()


def test_a_read_that_already_shows_the_notice_gets_no_new_update() -> None:
    messages = history(*(xml_read("a.py", f"v{n}") for n in range(3)))
    round_1 = plan_file_read_dedupe(messages, 2, {})
    over = {
        address: BlockUpdate(*address, UpdateKind.PROCESSOR, update.text, source="distill")
        for address, update in overlay_of(round_1).items()
    }
    assert plan_file_read_dedupe(messages, 2, over).updates == ()


def test_a_mention_that_already_shows_the_notice_is_not_replaced_again() -> None:
    notice = f'<file_content path="a.py">{NOTICE}</file_content>'
    messages = history([text(f"see {notice}")], [text(f"see {mention('a.py', 'v2')}")])
    rewrite = BlockUpdate(2, 0, UpdateKind.PROCESSOR, f"see {notice}", source="distill")
    assert plan_file_read_dedupe(messages, 2, {(2, 0): rewrite}).updates == ()


def test_hidden_messages_never_count_as_occurrences() -> None:
    messages = history(*(xml_read("a.py", f"v{n}") for n in range(3)))
    assert plan_file_read_dedupe(messages, 5, {}).touched == ()
    assert plan_file_read_dedupe(messages, 3, {}).touched == (4,)


@pytest.mark.parametrize("bad", [1, 0, -1, "2", True])
def test_start_below_two_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="start"):
        plan_file_read_dedupe(history(), bad, {})


# --- Savings metric and the 30 % rule ---------------------------------------------------------


def test_a_big_duplicated_file_saves_enough_to_skip_truncation() -> None:
    body = "x" * 10_000
    plan = plan_file_read_dedupe(history(xml_read("a.py", body), xml_read("a.py", body)), 2, {})
    assert plan.fraction_saved > 0.3
    assert plan.need_to_truncate is False


def test_small_files_can_save_negative_characters_and_still_need_truncation() -> None:
    messages = history(xml_read("a.py", "v1"), xml_read("a.py", "v2"))
    plan = plan_file_read_dedupe(messages, 2, {})
    orig = len(messages[2]["content"][0]["text"])
    new = len(plan.updates[0].text)
    newest = len(messages[4]["content"][0]["text"])
    total = len(TASK) + len(FIRST_REPLY) + orig + len(REPLY) + newest + len(REPLY)
    assert plan.fraction_saved == pytest.approx((orig - new) / total)
    assert plan.fraction_saved < 0
    assert plan.need_to_truncate is True


def test_metric_counts_messages_0_1_and_the_visible_rest_with_images_but_not_strings() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "i" * 50},
    }
    body = "y" * 300
    hidden = xml_read("b.py", "hidden: outside the metric")
    messages = history(hidden, xml_read("a.py", body), xml_read("a.py", body))
    messages[0]["content"].append(image)
    messages[1] = {"role": "assistant", "content": "a string reply counts nothing"}
    plan = plan_file_read_dedupe(messages, 4, {})
    read = len(messages[4]["content"][0]["text"])
    total = len(TASK) + 50 + read + len(REPLY) + read + len(REPLY)
    saved = read - len(plan.updates[0].text)
    assert plan.fraction_saved == pytest.approx(saved / total)


def test_metric_counts_the_current_text_of_blocks_rewritten_earlier() -> None:
    body = "z" * 1_000
    messages = history(*(xml_read("a.py", body) for _ in range(3)))
    round_1 = plan_file_read_dedupe(messages[:6], 2, {})
    round_2 = plan_file_read_dedupe(messages, 2, overlay_of(round_1))
    notice_len = len(round_1.updates[0].text)
    read = len(messages[2]["content"][0]["text"])
    replies = len(FIRST_REPLY) + 3 * len(REPLY)
    total = len(TASK) + replies + notice_len + read + read
    assert round_2.fraction_saved == pytest.approx((read - notice_len) / total)


# --- In-memory variant ------------------------------------------------------------------------


def test_optimize_file_reads_returns_the_rewritten_view() -> None:
    messages = history(*(xml_read("a.py", "v" * 500) for _ in range(3)))
    result = optimize_file_reads(messages, (2, 3))
    assert result.changed is True
    assert result.indices == (4,)
    assert len(result.messages) == 2 + len(messages) - 4
    assert result.messages[2]["content"][0]["text"].endswith(NOTICE)
    assert result.messages[4] == messages[6]
    assert result.messages[4] is not messages[6]
    assert result.need_to_truncate is (result.fraction_saved < 0.3)


def test_optimize_file_reads_without_changes_returns_a_new_equal_cut_view() -> None:
    messages = history(xml_read("a.py", "v1"), xml_read("b.py", "v2"))
    result = optimize_file_reads(messages)
    assert (result.changed, result.indices, result.fraction_saved) == (False, (), 0.0)
    assert result.messages == messages
    assert result.messages is not messages
    assert all(a is not b for a, b in zip(result.messages, messages, strict=True))
    assert result.need_to_truncate is True


def test_nothing_is_mutated() -> None:
    messages = (
        mention_history()
        + history(
            xml_read("a.py", "1"),
            native_read("a.py", "2"),
            native_read("a.py", "3", as_string=True),
        )[2:]
    )
    overlay = overlay_of(plan_file_read_dedupe(messages[:6], 2, {}))
    snapshot = copy.deepcopy(messages), copy.deepcopy(overlay)
    plan_file_read_dedupe(messages, 2, overlay)
    result = optimize_file_reads(messages, [2, 3])
    result.messages[0]["content"][0]["text"] = "changed"
    assert (messages, overlay) == snapshot


# --- The 30 % boundary, on histories built to save exactly 29, 30 and 31 % ------------------


@pytest.mark.parametrize(
    ("percent", "truncate"), [(29, True), (30, False), (31, False)], ids=["29%", "30%", "31%"]
)
def test_at_least_thirty_percent_saved_means_no_truncation(percent: int, truncate: bool) -> None:
    messages = duplicate_reads_saving(percent)
    plan = plan_file_read_dedupe(messages, 2, {})
    assert plan.touched == (2,)
    assert plan.fraction_saved == percent / 100
    assert plan.need_to_truncate is truncate
    result = optimize_file_reads(messages)
    assert (result.changed, result.indices) == (True, (2,))
    assert result.fraction_saved == percent / 100
    assert result.need_to_truncate is truncate


# --- Forms and metric details that mutation testing found unchecked --------------------------


def _old_write(tool: str, path: str, body: str) -> list[dict[str, Any]]:
    """The old form of a write result: the header alone in block 0, the result in block 1."""
    result = write_result(tool, path, body).split("\n", 1)[1]
    return [text(header(tool, path)), text(result)]


@pytest.mark.parametrize("tool", ["write_to_file", "replace_in_file"])
def test_an_old_form_write_result_is_rewritten_in_block_one(tool: str) -> None:
    messages = history(_old_write(tool, "a.py", "v1"), xml_read("a.py", "v2"))
    (update,) = plan_file_read_dedupe(messages, 2, {}).updates
    assert (update.address, update.kind) == ((2, 1), UpdateKind.ALTER_FILE)
    assert f'<final_file_content path="a.py"> {NOTICE} </final_file_content>' in update.text
    assert update.text.startswith("The content was successfully saved to a.py.")
    assert update.base_hash == text_hash(messages[2]["content"][1]["text"])


@pytest.mark.parametrize(
    "second",
    [
        {"type": "image", "source": {"type": "url", "url": "https://x.invalid/a.png"}},
        {"type": "text", "text": 5},
        "not a block",
    ],
    ids=["image", "text without a string", "not a dict"],
)
def test_an_old_form_write_without_readable_text_in_block_one_is_no_occurrence(
    second: Any,
) -> None:
    messages = history([text(header("write_to_file", "a.py")), second], xml_read("a.py", "v2"))
    assert plan_file_read_dedupe(messages, 2, {}).updates == ()


def test_a_write_result_inside_a_tool_result_is_read_from_its_text() -> None:
    result = {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [text(write_result("write_to_file", "a.py", "v1"))],
    }
    messages = history([result], xml_read("a.py", "v2"))
    (update,) = plan_file_read_dedupe(messages, 2, {}).updates
    assert (update.address, update.kind) == ((2, 0), UpdateKind.ALTER_FILE)


def test_the_metric_sums_every_rewrite_and_counts_blocks_after_an_image() -> None:
    body = "q" * 400
    url_image = {"type": "image", "source": {"type": "url", "url": "https://x.invalid/i.png"}}
    odd_image = {"type": "image", "source": {"type": "base64", "data": 7}}
    messages = history(
        xml_read("a.py", body),
        xml_read("b.py", body),
        [url_image, odd_image, "junk", text("after the images")],
        xml_read("a.py", body),
        xml_read("b.py", body),
    )
    plan = plan_file_read_dedupe(messages, 2, {})
    assert plan.touched == (2, 4)
    read = len(messages[2]["content"][0]["text"])
    saved = 2 * (read - len(plan.updates[0].text))
    total = len(TASK) + len(FIRST_REPLY) + 4 * read + len("after the images") + 5 * len(REPLY)
    assert plan.fraction_saved == saved / total


def test_a_history_of_one_message_plans_nothing() -> None:
    only = [{"role": "user", "content": [text(TASK)]}]
    assert plan_file_read_dedupe(only, 2, {}) == DedupePlan((), (), 0.0, True)
    assert optimize_file_reads(only).messages == only


def test_every_update_records_the_source_it_was_planned_with() -> None:
    messages = history(
        xml_read("a.py", "v1"), mention_history()[2]["content"], xml_read("a.py", "v2")
    )
    messages += mention_history()[4:]
    default = plan_file_read_dedupe(messages, 2, {})
    custom = plan_file_read_dedupe(messages, 2, {}, source="my_rule")
    assert len(default.updates) >= 2
    assert {u.source for u in default.updates} == {"file_read_dedupe"}
    assert {u.source for u in custom.updates} == {"my_rule"}
