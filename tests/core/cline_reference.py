"""Independent transcriptions of Cline's ContextManager rules, used as test oracles.

Each function follows the pseudo-code of ``reference/cline-context-manager.md`` line by
line, with JavaScript semantics where they matter, and none of the store's deliberate
differences: the conformance tests apply those on top, one by one, and say so. Nothing
here imports contextstore, so a bug in the library cannot hide in its own oracle.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

Message = dict[str, Any]

RESULT_MISSING = "result missing"

DUPLICATE_NOTICE = (
    "[[NOTE] This file read has been removed to save space in the context window. "
    "Refer to the latest file read for the most up to date version of this file.]"
)

READ_FILE_TOOL, ALTER_FILE_TOOL, FILE_MENTION = 2, 3, 4
"""Cline's ``editType`` values (section 1.3)."""

_HEADER = re.compile(r"^\[([^\s]+) for '([^']+)'\] Result:")
_FINAL = re.compile(r'(<final_file_content path="[^"]*">)[\s\S]*?(</final_file_content>)')
_MENTION = re.compile(r'<file_content path="([^"]*)">([\s\S]*?)</file_content>')


def next_truncation_range(
    messages: list[Message], current: tuple[int, int] | None, keep: str
) -> tuple[int, int]:
    """Section 4, ``getNextTruncationRange``: JavaScript's floor, ``undefined`` for -1."""
    start_of_rest = current[1] + 1 if current else 2
    rest = len(messages) - start_of_rest
    remove = {
        "none": max(rest, 0),
        "last_two": max(rest - 2, 0),
        "half": math.floor(rest / 4) * 2,
        "quarter": math.floor(rest * 3 / 4 / 2) * 2,
    }[keep]
    end = start_of_rest + remove - 1
    if 0 <= end < len(messages) and messages[end]["role"] != "assistant":
        end -= 1
    return (2, end)


def _is_result(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_result"


def ensure_tool_results_follow_tool_use(messages: list[Message]) -> list[Message]:
    """Section 5.2, ``ensureToolResultsFollowToolUse``, on a copy (Cline mutates)."""
    out = copy.deepcopy(messages)
    for i in range(len(out) - 1):
        assistant = out[i]
        content = assistant.get("content")
        if assistant.get("role") != "assistant" or not isinstance(content, list):
            continue
        ids = [
            b["id"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("id")
        ]
        if not ids:
            continue
        user = out[i + 1]
        if user.get("role") != "user":
            continue
        if not isinstance(user.get("content"), list):
            user["content"] = []
        results: dict[str, Any] = {}
        others: list[Any] = []
        for block in user["content"]:
            if _is_result(block) and block.get("tool_use_id"):
                results[block["tool_use_id"]] = block
            else:
                others.append(block)
        needs = False
        if results:
            k = 0
            for block in user["content"]:
                if k >= len(ids):
                    break
                if _is_result(block) and block.get("tool_use_id") == ids[k]:
                    k += 1
                else:
                    needs = True
                    break
            if not needs and k < len(results):
                needs = True
        for tool_id in ids:
            if tool_id not in results:
                results[tool_id] = {
                    "type": "tool_result",
                    "tool_use_id": tool_id,
                    "content": RESULT_MISSING,
                }
                needs = True
        if needs:
            out[i + 1] = {**user, "content": [results[t] for t in ids] + others}
    return out


def block_text(block: Any) -> str | None:
    """Cline's text of a block: a text block's, or a list tool result's first text item's."""
    if not isinstance(block, dict):
        return None
    if block.get("type") == "text":
        value = block.get("text")
        return value if isinstance(value, str) else None
    content = block.get("content")
    if block.get("type") == "tool_result" and isinstance(content, list) and content:
        first = content[0]
        if isinstance(first, dict) and first.get("type") == "text":
            value = first.get("text")
            return value if isinstance(value, str) else None
    return None


Overlay = dict[int, list[Any]]
"""Cline's overlay: message index -> [editType, {block index -> [(ts, text, metadata)]}]."""


def _scan(
    api: list[Message], start: int, overlay: Overlay
) -> tuple[dict[str, list[tuple[Any, ...]]], dict[int, list[str]]]:
    """Section 8.1, ``getPossibleDuplicateFileReads``."""
    reads: dict[str, list[tuple[Any, ...]]] = {}
    mention_paths: dict[int, list[str]] = {}
    for i in range(start, len(api)):
        entry = overlay.get(i)
        already: list[str] = []
        if entry:
            if entry[0] != FILE_MENTION:
                continue
            updates = next(iter(entry[1].values()), None)
            if updates:
                last = updates[-1]
                if len(last[2][0]) == len(last[2][1]):
                    continue
                already = last[2][0]
        content = api[i].get("content")
        if api[i].get("role") != "user" or not isinstance(content, list) or not content:
            continue
        first_text = block_text(content[0])
        if not first_text:
            continue
        found = False
        header = _HEADER.match(first_text)
        if header:
            tool, path = header[1], header[2]
            content_idx = 0 if len(first_text) > len(header[0]) else 1
            if tool == "read_file":
                replacement = (
                    DUPLICATE_NOTICE if content_idx == 1 else header[0] + "\n" + DUPLICATE_NOTICE
                )
                reads.setdefault(path, []).append((i, READ_FILE_TOOL, "", replacement, content_idx))
                found = True
            elif tool in ("replace_in_file", "write_to_file"):
                if _is_result(content[0]) or content_idx == 0:
                    written = first_text
                else:
                    second = content[1] if len(content) > 1 else None
                    written = (
                        second.get("text")
                        if isinstance(second, dict) and second.get("type") == "text"
                        else None
                    )
                if written:
                    final = _FINAL.search(written)
                    if final:
                        replacement = (
                            written[: final.start()]
                            + f"{final[1]} {DUPLICATE_NOTICE} {final[2]}"
                            + written[final.end() :]
                        )
                        reads.setdefault(path, []).append(
                            (i, ALTER_FILE_TOOL, "", replacement, content_idx)
                        )
                    found = True
        if not found:
            for b in range(min(3, len(content))):
                text = block_text(content[b])
                matches = list(_MENTION.finditer(text)) if text else []
                if not matches:
                    continue
                paths = []
                for match in matches:
                    paths.append(match[1])
                    if match[1] not in already:
                        notice = (
                            f'<file_content path="{match[1]}">{DUPLICATE_NOTICE}</file_content>'
                        )
                        reads.setdefault(match[1], []).append(
                            (i, FILE_MENTION, match[0], notice, b)
                        )
                mention_paths[i] = paths
                break
    return reads, mention_paths


def _apply(
    api: list[Message],
    overlay: Overlay,
    reads: dict[str, list[tuple[Any, ...]]],
    mention_paths: dict[int, list[str]],
    ts: int,
) -> tuple[bool, set[int]]:
    """Section 8.2, ``applyFileReadContextHistoryUpdates``, with fresh metadata lists
    (Cline shared them; section 14 item 2 says to fix that)."""
    did_update = False
    touched: set[int] = set()
    drafts: dict[int, list[Any]] = {}
    for path, occurrences in reads.items():
        if len(occurrences) <= 1:
            continue
        for i, kind, search, replacement, block in occurrences[:-1]:
            did_update = True
            touched.add(i)
            if kind == FILE_MENTION:
                if i not in drafts:
                    stored = overlay.get(i, [None, {}])[1].get(block)
                    if stored:
                        drafts[i] = [stored[-1][1], list(stored[-1][2][0]), block]
                    else:
                        drafts[i] = [block_text(api[i]["content"][block]), [], block]
                drafts[i][0] = drafts[i][0].replace(search, replacement, 1)
                drafts[i][1].append(path)
            else:
                entry = overlay.setdefault(i, [kind, {}])
                entry[1].setdefault(block, []).append((ts, replacement, []))
    for i, (text, replaced, block) in drafts.items():
        entry = overlay.setdefault(i, [FILE_MENTION, {}])
        entry[1].setdefault(block, []).append((ts, text, [replaced, list(mention_paths[i])]))
    return did_update, touched


def _fraction_saved(api: list[Message], start: int, overlay: Overlay, touched: set[int]) -> float:
    """Section 8.3, ``calculateContextOptimizationMetrics``."""
    saved = total = 0
    for i in [i for i in (0, 1) if i < len(api)] + list(range(start, len(api))):
        content = api[i].get("content")
        if not isinstance(content, list):
            continue
        for b, block in enumerate(content):
            text = block_text(block)
            if text is None:
                source = block.get("source") if isinstance(block, dict) else None
                if (
                    isinstance(block, dict)
                    and block.get("type") == "image"
                    and isinstance(source, dict)
                    and source.get("type") == "base64"
                ):
                    total += len(source.get("data", ""))
                continue
            updates = overlay[i][1].get(b) if i in overlay else None
            if not updates:
                total += len(text)
            elif i in touched:
                original = len(updates[-2][1]) if len(updates) > 1 else len(text)
                saved += original - len(updates[-1][1])
                total += original
            else:
                total += len(updates[-1][1])
    return saved / total if total else 0


def file_read_round(
    api: list[Message], start: int, overlay: Overlay, ts: int
) -> tuple[bool, bool, set[int], float]:
    """Section 8.4, ``attemptFileReadOptimizationCore``: one round, mutating ``overlay``.

    Returns (any update, need to truncate, touched indices, fraction saved).
    """
    reads, mention_paths = _scan(api, start, overlay)
    did_update, touched = _apply(api, overlay, reads, mention_paths, ts)
    if not did_update:
        return False, True, touched, 0.0
    fraction = _fraction_saved(api, start, overlay, touched)
    return True, fraction < 0.3, touched, fraction
