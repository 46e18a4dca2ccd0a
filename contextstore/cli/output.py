"""Formatting, not printing: one-line summaries of messages and blocks for the tables that
:mod:`contextstore.cli.terminal` prints."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from contextstore.cli.times import format_ts
from contextstore.core.audit_records import AuditReport


def has_usage(request: Any) -> bool:
    """True when any token count was recorded for a request (a ``RequestRecord`` or an
    audit's ``RequestUsage``); one prepared here whose usage never came is a gap, not 0."""
    counts = (request.tokens_in, request.tokens_out, request.cache_writes, request.cache_reads)
    return any(value is not None for value in counts)


def clipped(text: str, width: int) -> str:
    """``text`` on one line, its first ``width`` characters and ``...`` when it goes on (so
    that a cut value never looks whole)."""
    line = text.replace("\n", " ")
    return f"{line[:width]}..." if len(line) > width else line


def summarise_block(block: Any) -> str:
    """One line for a content block: its type and the start of its text or input."""
    if not isinstance(block, dict):
        return str(block)
    kind = block.get("type")
    if kind == "text":
        return f"text: {clipped(str(block.get('text', '')), 60)}"
    if kind == "tool_use":
        arguments = clipped(json.dumps(block.get("input"), ensure_ascii=False), 40)
        return f"tool_use {block.get('name')}({arguments}) id={block.get('id')}"
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            content = " ".join(
                str(c.get("text", f"[{c.get('type')}]")) for c in content if isinstance(c, dict)
            )
        error = " error" if block.get("is_error") else ""
        return f"tool_result{error} for {block.get('tool_use_id')}: {clipped(str(content), 50)}"
    if kind == "image":
        source = block.get("source") or {}
        size = len(str(source.get("data", "")))
        return f"image {source.get('media_type', '')} ({size} base64 chars)"
    return str(kind)


SUMMARY_WIDTH = 110
"""Characters of content shown per message in the CLI's conversation tables."""


def summarise_message(message: dict[str, Any]) -> str:
    """One line for a message: its blocks summarised, cut to :data:`SUMMARY_WIDTH`."""
    content = message.get("content")
    parts = [content] if isinstance(content, str) else content or []
    summary = " | ".join(
        summarise_block({"type": "text", "text": p} if isinstance(p, str) else p) for p in parts
    )
    if len(summary) > SUMMARY_WIDTH:
        summary = summary[: SUMMARY_WIDTH - 3] + "..."
    return summary


def conversation_rows(messages: Sequence[dict[str, Any]]) -> list[tuple[int, str, str]]:
    """``(position, role, summary)`` rows for a conversation table."""
    return [(i, str(m.get("role")), summarise_message(m)) for i, m in enumerate(messages)]


TABLE_ORDER = (
    "conversations",
    "messages",
    "blocks",
    "deleted_ranges",
    "context_updates",
    "api_requests",
    "checkpoints",
    "rollbacks",
    "archived_messages",
    "archived_blocks",
    "archived_deleted_ranges",
    "archived_context_updates",
    "archived_api_requests",
    "archived_checkpoints",
)
"""The order tables are listed in when a command reports rows per table."""


def ordered_counts(counts: dict[str, int]) -> list[tuple[str, int]]:
    """``counts`` as ``(table, rows)`` pairs in :data:`TABLE_ORDER`, unknown tables last."""
    known = [(name, counts[name]) for name in TABLE_ORDER if name in counts]
    return known + sorted((k, v) for k, v in counts.items() if k not in TABLE_ORDER)


DEDUP_COLUMNS = ("time", "message", "block", "kind", "original", "rewritten", "saved")
"""The columns of an audit's de-duplication table, on the terminal and in the report."""


def dedup_rows(report: AuditReport) -> list[tuple[Any, ...]]:
    """One row per file-read rewrite of ``report``, in :data:`DEDUP_COLUMNS`."""
    return [
        (
            format_ts(d.ts),
            d.message_idx,
            d.block_idx,
            d.kind,
            d.original_chars,
            d.rewritten_chars,
            d.chars_saved,
        )
        for d in report.dedup_savings
    ]
