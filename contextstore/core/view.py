"""The conversation the model sees, computed from the stored messages (the view rules).

In order: the cut (messages 0 and 1, then everything after the deleted range), the
effective block rewrites, the orphan filter on the first message after the cut, and the
tool pairing repair. Every function here is pure: it returns new lists and new message
dicts wherever something changes and never modifies what it was given.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from contextstore.core.overlays import BlockUpdate, Message, OverlayMap, apply_overlays
from contextstore.core.truncation import DeletedRange, visible_start
from contextstore.core.validate import plain_lists_only, plain_messages

IndexedView = Sequence[tuple[int, Message]]
"""The visible messages as ``(original message index, message)`` pairs, in order."""

RESULT_MISSING = "result missing"
"""Content of the placeholder result inserted for a tool call whose result was lost."""

VIEW_RULES = 12
"""The version of the view rules this code applies. A prepared request records the version
it was built with, so that :meth:`ContextStore.request_payload` rebuilds it by the same
rules after they change: 1 is the original set; 2 adds :func:`adopt_text_results`; 3 keeps
one result per call in a message (:func:`one_result_per_call`); 4 gives tool call ids the
Anthropic renderer's form (:func:`contextstore.renderers.anthropic.call_id`); 5 strips the
trailing whitespace of a final assistant message for Anthropic
(:func:`contextstore.renderers.anthropic.final_stripped`) and sends a tool result's
``search_result`` items to OpenAI and Gemini as text
(:func:`contextstore.core.overlays.search_result_text`), where they were dropped; 6
gives OpenAI tool call ids longer than 40 characters a short form
(:func:`contextstore.renderers.openai.call_id`); 7 sends a base64 image with the type its
data is (:func:`contextstore.core.media.sniffed_image_type`) and replaces an image (and,
for Anthropic, a base64 document) of a media type the provider refuses by a text block
saying it was left out (:func:`contextstore.core.media.left_out`); 8 does the same for a
base64 image whose data the provider cannot read: not base64, empty, or, for Anthropic and
OpenAI, beginning as none of the four image types they take
(:func:`contextstore.core.media.unreadable_image`); 9 gives an Anthropic tool call id that
an earlier message of the request already used another form
(:func:`contextstore.renderers.anthropic.repeated_call_id`); 10 sends an OpenAI tool call's
name in a form the API takes (:func:`contextstore.renderers.openai.tool_name`); 11 drops,
after a cut, a result whose id message 1 issued when the hidden message just before it
issued the id too (:func:`calls_hidden_before`): an agent that reuses ids answered
message 1's call with the hidden call's result; and Gemini names a tool result after the
call its id answered last before it (the last call of the id in the whole request named
every result, and hardening then invented a call); and when the cut hides every message
after message 1, message 1's calls get ``result missing`` placeholders in a user message
after it (:func:`calls_cut_off`): their results are hidden, not pending, and the request
ended on calls no result answered; 12 sends a tool's ``input_schema`` that holds JSON
Schema keywords outside Gemini's OpenAPI subset as ``parametersJsonSchema``
(:func:`contextstore.renderers.gemini.render_tool`), where ``parameters`` refused them, and
gives an
Anthropic plain-text document's source the ``media_type`` ``text/plain`` the API requires
(:func:`contextstore.renderers.anthropic_media.plain_text_typed`) and sends to Anthropic only
the newest ``cache_control`` breakpoints of the messages, four in a request with the system
prompt's and tools' (:func:`contextstore.renderers.anthropic_cache.newest_breakpoints`), and
a tool result flagged ``is_error`` without content a text
(:func:`contextstore.renderers.anthropic_blocks.empty_error`)."""

ORPHANS_DROPPED = "[Tool results of calls in the removed part of the conversation were dropped.]"
"""Text left in a user message whose only blocks were orphan tool results."""


def cut(
    messages: Sequence[Message],
    deleted_range: DeletedRange | None,
    overlays: OverlayMap | None = None,
) -> IndexedView:
    """Return the visible messages with their indices, rewrites applied, nothing repaired.

    This is what processors read: block positions are still those of the stored rows, so
    a proposed rewrite can name its block.
    """
    start = visible_start(deleted_range)
    indices = [*range(min(2, len(messages))), *range(start, len(messages))]
    if overlays:
        touched = {message_idx for message_idx, _ in overlays}
        return [
            (i, apply_overlays(messages[i], i, overlays) if i in touched else messages[i])
            for i in indices
        ]
    return [(i, messages[i]) for i in indices]


CutMemo = dict[int, tuple[Message, tuple[BlockUpdate, ...], Message]]
"""Rewritten messages of an earlier cut, by index: the stored message, the updates applied
to it, and the result."""


def cut_reusing(
    messages: Sequence[Message],
    deleted_range: DeletedRange | None,
    overlays: OverlayMap | None,
    previous: CutMemo,
) -> tuple[IndexedView, CutMemo]:
    """:func:`cut`, reusing the rewritten messages of an earlier cut whose stored message
    (the same object) and updates (equal ones) are unchanged; also returns what this cut
    rewrote, for the next one.

    A conversation prepared turn after turn keeps its rewrites: applying them again would
    build the same messages. The result equals :func:`cut`'s.
    """
    start = visible_start(deleted_range)
    indices = [*range(min(2, len(messages))), *range(start, len(messages))]
    if not overlays:
        return [(i, messages[i]) for i in indices], {}
    by_message: dict[int, list[BlockUpdate]] = {}
    for (message_idx, _), update in overlays.items():
        by_message.setdefault(message_idx, []).append(update)
    memo: CutMemo = {}
    view: list[tuple[int, Message]] = []
    for i in indices:
        message = messages[i]
        updates = by_message.get(i)
        if updates is None:
            view.append((i, message))
            continue
        applied = tuple(updates)
        earlier = previous.get(i)
        if earlier is not None and earlier[0] is message and earlier[1] == applied:
            result = earlier[2]
        else:
            result = apply_overlays(message, i, overlays)
        memo[i] = (message, applied, result)
        view.append((i, result))
    return view, memo


def _tool_use_ids(message: Message) -> list[str]:
    if message.get("role") != "assistant":
        return []
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [
        block["id"]
        for block in content
        if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("id")
    ]


def pending_calls(messages: Sequence[Message]) -> list[str]:
    """Ids of the tool calls in the last message when it is an assistant message.

    Such calls have no results yet: the conversation is waiting for the tools to run.
    """
    return _tool_use_ids(messages[-1]) if messages else []


def calls_hidden_before(
    messages: Sequence[Message], deleted_range: Sequence[int] | None
) -> frozenset[str]:
    """Ids of the tool calls of the hidden message just before the first one after the cut.

    The results in that first message answer these calls, even when message 1 issued the
    same ids (agents such as Kimi's number ids per tool, ``functions.read_file:0``, and so
    reuse them): :func:`drop_orphan_results` drops them. Empty without a cut, or with
    nothing after it.
    """
    start = visible_start(deleted_range)
    if start <= 2 or start >= len(messages):
        return frozenset()
    before = messages[start - 1]
    return frozenset(_tool_use_ids(before)) if isinstance(before, dict) else frozenset()


def calls_cut_off(messages: Sequence[Message], deleted_range: Sequence[int] | None) -> bool:
    """Whether the cut hides every message after message 1, so that the view ends with
    message 1 and the results of its calls, if any, are in hidden messages: lost to the
    view, not pending (view rules 11 answer them with placeholders, :func:`provider_safe`).
    False without a cut, or with a message after it."""
    start = visible_start(deleted_range)
    return 2 < len(messages) <= start


def drop_orphan_results(view: IndexedView, hidden_calls: Collection[str] = ()) -> IndexedView:
    """Remove, from the first message after a cut, results whose call is not visible.

    Cline removes every tool result of that message, including ones that still pair (and
    a summary delivered as a result); only results whose ``tool_use_id`` the visible
    assistant message before it did not issue, or the hidden message just before it did
    (``hidden_calls``, see :func:`calls_hidden_before`), are dropped here. A message left
    with no block keeps an empty list, as in Cline (see :func:`provider_safe` for the
    store's view).
    """
    if len(view) < 3 or view[2][0] <= 2:
        return view
    idx, first = view[2]
    content = first.get("content")
    if first.get("role") != "user" or not isinstance(content, list):
        return view
    issued = set(_tool_use_ids(view[1][1])).difference(hidden_calls)
    kept = [
        block
        for block in content
        if not (
            isinstance(block, dict)
            and block.get("type") == "tool_result"
            and block.get("tool_use_id") not in issued
        )
    ]
    if len(kept) == len(content):
        return view
    new_message = dict(first)
    new_message["content"] = kept
    return [*view[:2], (idx, new_message), *view[3:]]


def _results_in_order(content: list[Any], ids: list[str]) -> bool:
    position = 0
    for block in content:
        if position >= len(ids):
            break
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_result"
            and block.get("tool_use_id") == ids[position]
        ):
            position += 1
        else:
            return False
    return position == len(ids)


def _already_paired(content: Any, ids: list[str]) -> bool:
    """True when ``content`` starts with the results of ``ids`` in order and holds no other
    result: the common case, answered without rebuilding anything."""
    count = len(ids)
    if not isinstance(content, list) or len(content) < count or len(set(ids)) != count:
        return False
    for block, tool_id in zip(content, ids, strict=False):
        if not (
            isinstance(block, dict)
            and block.get("type") == "tool_result"
            and block.get("tool_use_id") == tool_id
        ):
            return False
    return not any(
        isinstance(block, dict) and block.get("type") == "tool_result" and block.get("tool_use_id")
        for block in content[count:]
    )


def _cline_leaves(blocks: list[Any], results: dict[str, Any], ids: list[str]) -> bool:
    """Whether Cline's repair leaves a user message as it is: each call id has a result,
    the blocks open with results for ``ids`` in order (up to the end of the blocks), and
    no more distinct result ids are present than ids were matched. A call id repeated in
    one message counts once per call, so ``[a, a]`` answered by one result for ``a`` is
    left as it is."""
    if any(tool_id not in results for tool_id in ids):
        return False
    matched = 0
    for block in blocks:
        if matched >= len(ids):
            break
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_result"
            and block.get("tool_use_id") == ids[matched]
        ):
            matched += 1
        else:
            return False
    return matched >= len(results)


def _paired_user_message(user: Message, ids: list[str], *, clines: bool = False) -> Message | None:
    """Return ``user`` rebuilt so that its first blocks answer ``ids``, or None if it does.

    ``clines`` decides whether to rebuild exactly as Cline does (:func:`_cline_leaves`);
    otherwise (the store's view, whose stored requests must rebuild as they were sent) a
    message answering a call id repeated in ``ids`` is rebuilt with one result per call.
    Both agree whenever the ids of ``ids`` are distinct."""
    content = user.get("content")
    if _already_paired(content, ids):
        return None
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content}] if content else []
    else:
        blocks = list(content) if isinstance(content, list) else []
    results: dict[str, Any] = {}
    others: list[Any] = []
    for block in blocks:
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_result"
            and block.get("tool_use_id")
        ):
            results[block["tool_use_id"]] = block
        else:
            others.append(block)
    if clines:
        if isinstance(content, list) and _cline_leaves(blocks, results, ids):
            return None
    elif (
        isinstance(content, list)
        and results
        and _results_in_order(blocks, ids)
        and len(results) == len(set(ids))
    ):
        return None
    rebuilt = [
        results.get(tool_id)
        or {"type": "tool_result", "tool_use_id": tool_id, "content": RESULT_MISSING}
        for tool_id in ids
    ]
    new_message = dict(user)
    new_message["content"] = rebuilt + others
    return new_message


@plain_lists_only
def ensure_tool_results_follow_tool_use(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Make every assistant ``tool_use`` be answered first thing in the next user message.

    For each assistant message with tool calls followed by a user message, the user
    message is rebuilt (when needed) as: the results for the calls in call order, a
    ``result missing`` placeholder for each lost one, then its other blocks in their
    order; results for ids the assistant never issued are dropped. Unlike Cline, a user
    message with string content keeps its text (as a text block after the results), and
    the caller's objects are never modified. Messages that need no change are returned as
    the same objects. A message Cline would not rebuild (a call id repeated in one
    assistant message, answered once) is left as it is, as there.
    """
    return _paired(plain_messages(messages), clines=True)


def _paired(messages: Sequence[Message], *, clines: bool) -> list[Message]:
    """:func:`ensure_tool_results_follow_tool_use`, or with ``clines`` false the store's
    pairing (see :func:`_paired_user_message`)."""
    out = list(messages)
    for i in range(len(out) - 1):
        ids = _tool_use_ids(out[i])
        if not ids or out[i + 1].get("role") != "user":
            continue
        rebuilt = _paired_user_message(out[i + 1], ids, clines=clines)
        if rebuilt is not None:
            out[i + 1] = rebuilt
    return out


def _without_results(user: Message) -> Message | None:
    """Drop tool results from a user message that follows no tool call (None: none there)."""
    content = user.get("content")
    if not isinstance(content, list):
        return None
    kept = [
        block
        for block in content
        if not (isinstance(block, dict) and block.get("type") == "tool_result")
    ]
    if len(kept) == len(content):
        return None
    new_message = dict(user)
    new_message["content"] = kept
    return new_message


def one_result_per_call(user: Message) -> Message | None:
    """``user`` with one tool result per ``tool_use_id``, or None when no id repeats.

    Two results for one call are refused by Anthropic ("each tool_use must have a single
    result") and by OpenAI (the second tool message answers no pending call). The one
    kept is the last written, in the place of the first (where the pairing put the
    results in call order), as Cline's repair keeps the last when it rebuilds a message.
    """
    content = user.get("content")
    if not isinstance(content, list):
        return None
    last: dict[str, Any] = {}
    count = 0
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            tool_id = block.get("tool_use_id")
            if tool_id:
                last[tool_id] = block
                count += 1
    if count == len(last):
        return None
    kept: list[Any] = []
    placed: set[str] = set()
    for block in content:
        tool_id = (
            block.get("tool_use_id")
            if isinstance(block, dict) and block.get("type") == "tool_result"
            else None
        )
        if not tool_id:
            kept.append(block)
        elif tool_id not in placed:
            placed.add(tool_id)
            kept.append(last[tool_id])
    new_message = dict(user)
    new_message["content"] = kept
    return new_message


def provider_safe(
    messages: Sequence[Message], *, rules: int = VIEW_RULES, cut_off: bool = False
) -> list[Message]:
    """The store's last view step: what Cline's repair leaves that a provider would reject.

    Tool results in a user message that follows no tool call are dropped; calls followed
    by another assistant message (a range ending on a user message can do that) get a
    user message of ``result missing`` placeholders, and so, from version 11 of the view
    rules, do the calls of the last message when ``cut_off`` (the cut hid every message
    after it, :func:`calls_cut_off`; calls of a last message with nothing hidden after it
    are pending, left as they are); from version 3, a call answered twice in one message
    keeps one result (:func:`one_result_per_call`); a message left with no block gets a
    short text saying what was dropped (providers reject empty messages). Cline's
    functions leave all five as they are.
    """
    out: list[Message] = []
    for message in messages:
        previous = out[-1] if out else None
        calls = _tool_use_ids(previous) if previous is not None else []
        if message.get("role") == "assistant" and calls:
            out.append(_placeholder_results(calls))
        elif message.get("role") == "user" and not calls:
            message = _without_results(message) or message
        elif rules >= 3 and message.get("role") == "user":
            message = one_result_per_call(message) or message
        if message.get("content") == []:
            message = {**message, "content": [{"type": "text", "text": ORPHANS_DROPPED}]}
        out.append(message)
    return _cut_off_calls_answered(out, cut_off=cut_off, rules=rules)


def _cut_off_calls_answered(out: list[Message], *, cut_off: bool, rules: int) -> list[Message]:
    """``out`` followed, when ``cut_off`` (view rules 11), by placeholders answering the
    calls of its last message (see :func:`calls_cut_off`)."""
    calls = _tool_use_ids(out[-1]) if cut_off and rules >= 11 and out else []
    return [*out, _placeholder_results(calls)] if calls else out


def _placeholder_results(calls: list[str]) -> Message:
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": tool_id, "content": RESULT_MISSING}
            for tool_id in calls
        ],
    }


TEXT_RESULT_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\[(?P<name>[^\s\]]+)(?: for [^\n]*?)?\] Result:"),
    re.compile(r"Tool \[(?P<name>[^\s\]]+)\] was not executed because"),
    re.compile(
        r"(?:Skipping tool|Tool was interrupted and not executed) due to user rejecting a "
        r"previous tool\. \[(?P<name>[^\s\]]+)"
    ),
)
"""How Cline words a tool's outcome when it writes it as a plain text block: the result
header (``[read_file for 'a.py'] Result:``), and its notes for calls it did not run."""


def _answered_call(block: Any, pending: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The pending call a user text block answers (by ``call_id``, else by its wording)."""
    if not (isinstance(block, dict) and block.get("type") == "text"):
        return None
    call_id = block.get("call_id")
    if isinstance(call_id, str) and call_id:
        for call in pending:
            if call.get("call_id") == call_id:
                return call
    text = block.get("text")
    if not isinstance(text, str):
        return None
    for pattern in TEXT_RESULT_PATTERNS:
        found = pattern.match(text)
        if found:
            return next((c for c in pending if c.get("name") == found["name"]), None)
    return None


def _with_text_results(assistant: Message, user: Message) -> Message | None:
    """``user`` with the text blocks that answer ``assistant``'s unanswered calls turned into
    their ``tool_result`` blocks (None when there are none)."""
    content = user.get("content")
    calls = assistant.get("content")
    if user.get("role") != "user" or not isinstance(content, list) or not isinstance(calls, list):
        return None
    answered = {
        b.get("tool_use_id")
        for b in content
        if isinstance(b, dict) and b.get("type") == "tool_result"
    }
    pending = [
        b
        for b in calls
        if isinstance(b, dict)
        and b.get("type") == "tool_use"
        and b.get("id")
        and b["id"] not in answered
    ]
    if not pending:
        return None
    rebuilt: list[Any] = []
    changed = False
    for block in content:
        call = _answered_call(block, pending) if pending else None
        if call is None:
            rebuilt.append(block)
            continue
        pending.remove(call)
        changed = True
        extra = {k: v for k, v in block.items() if k not in ("type", "text")}
        rebuilt.append(
            {"type": "tool_result", "tool_use_id": call["id"], "content": block["text"], **extra}
        )
    return {**user, "content": rebuilt} if changed else None


def adopt_text_results(view: IndexedView) -> IndexedView:
    """Turn the text blocks that answer a tool call into that call's ``tool_result``.

    Cline 3.5x writes a tool's output as a user ``text`` block (``[read_file for 'a.py']
    Result:...``) when it cannot map the call's id, and then sends a ``result missing``
    placeholder beside the real result. Here a user message that directly follows (in the
    stored order) an assistant message with unanswered calls has each text block that
    answers one of them (same ``call_id``, or Cline's wording naming the tool) replaced by a
    ``tool_result`` for that call, holding the same text. The stored rows are unchanged.
    """
    out = list(view)
    for position in range(len(out) - 1):
        (idx, message), (next_idx, following) = out[position], out[position + 1]
        if next_idx != idx + 1 or message.get("role") != "assistant":
            continue
        rebuilt = _with_text_results(message, following)
        if rebuilt is not None:
            out[position + 1] = (next_idx, rebuilt)
    return out


@plain_lists_only
def truncated_messages(
    messages: Sequence[Mapping[str, Any]], deleted_range: DeletedRange | None
) -> list[Message]:
    """The view without rewrites: the cut, the orphan filter, then the pairing repair.

    Messages 0 and 1 are always kept, then everything after ``deleted_range[1]``. A range
    whose end is below 2 hides nothing (it never shows message 1 twice).
    """
    history = plain_messages(messages)
    view = drop_orphan_results(
        cut(history, deleted_range), calls_hidden_before(history, deleted_range)
    )
    return ensure_tool_results_follow_tool_use([message for _, message in view])


def build_view(
    messages: Sequence[Message],
    deleted_range: DeletedRange | None,
    overlays: OverlayMap | None,
    *,
    rules: int = VIEW_RULES,
) -> list[Message]:
    """The store's view: cut, rewrites, orphan filter, pairing repair, provider safety
    (by the view rules of version ``rules``)."""
    return finish_view(
        cut(messages, deleted_range, overlays),
        rules=rules,
        hidden_calls=calls_hidden_before(messages, deleted_range),
        cut_off=calls_cut_off(messages, deleted_range),
    )


def finish_view(
    view: IndexedView,
    *,
    rules: int = VIEW_RULES,
    hidden_calls: Collection[str] = (),
    cut_off: bool = False,
) -> list[Message]:
    """``provider_safe(repair_indexed(view, rules=rules), rules=rules, cut_off=cut_off)``:
    the last view steps on a cut and rewritten view; ``hidden_calls`` as
    :func:`calls_hidden_before` and ``cut_off`` as :func:`calls_cut_off` give them (both
    from version 11 of the rules).

    A stored conversation is nearly always well formed (every call answered first thing in
    the next user message, no stray result), and then the repair steps change at most the
    message after a cut. One scan checks for that, asking of each
    message only what those steps ask (each tool call list is read once); only a view that
    needs a repair goes through the steps one by one. The result is the same either way.
    """
    filtered = drop_orphan_results(view, hidden_calls if rules >= 11 else ())
    finished = _finished_in_one_scan(filtered, rules)
    if finished is None:
        return provider_safe(repair_indexed(filtered, rules=rules), rules=rules, cut_off=cut_off)
    return _cut_off_calls_answered(finished, cut_off=cut_off, rules=rules)


def _finished_in_one_scan(view: IndexedView, rules: int) -> list[Message] | None:
    """What the repair steps and :func:`provider_safe` make of ``view`` (orphans already
    dropped), when they would change it only in the two places a cut leaves: the message
    after the cut answering calls of message 1 that it no longer holds (the pairing repair
    rebuilds it) and a message left empty (it gets the notice). None for anything else:
    then the steps run one by one."""
    out: list[Message] = []
    append = out.append
    calls: list[str] = []
    previous_idx = -2
    for idx, message in view:
        role = message.get("role")
        content = message.get("content")
        if calls:
            # The previous message called tools: this one must answer them, in order.
            if role != "user":
                return None
            if not (
                # The commonest answer, one result for one call, checked here without a call.
                len(calls) == 1
                and content.__class__ is list
                and len(content) == 1
                and isinstance(first := content[0], dict)
                and first.get("type") == "tool_result"
                and first.get("tool_use_id") == calls[0]
            ) and not _already_paired(content, calls):
                if rules >= 2 and idx == previous_idx + 1:
                    return None  # text results may be adopted first
                message = _paired_user_message(message, calls) or message
                if rules >= 3:
                    message = one_result_per_call(message) or message
            calls = []
        elif content == []:
            message = {**message, "content": [{"type": "text", "text": ORPHANS_DROPPED}]}
        elif role == "user" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    return None  # a result after no call: provider_safe drops it
        elif role == "assistant" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("id"):
                    calls.append(block["id"])
        append(message)
        previous_idx = idx
    return out


def repair_indexed(
    view: IndexedView, *, rules: int = VIEW_RULES, hidden_calls: Collection[str] = ()
) -> list[Message]:
    """Finish an already cut and rewritten view: orphan filter (``hidden_calls`` from
    version 11 of the rules), text results adopted as tool results (from version 2), then
    the pairing repair."""
    filtered = drop_orphan_results(view, hidden_calls if rules >= 11 else ())
    if rules >= 2:
        filtered = adopt_text_results(filtered)
    return _paired([message for _, message in filtered], clines=False)
