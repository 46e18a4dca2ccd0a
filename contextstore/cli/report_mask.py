"""The report's data with its secrets masked, before the page is built from it.

A report is a file people mail and attach: it must not carry the credentials the store
keeps from the model. Every text the page shows from stored rows (a block's original and
its rewrite, hidden messages, tool results the view left out, tool call inputs, the
conversation's title, checkpoint labels and notes, truncation reasons, request failures,
rollback targets, the timeline's and the chart's lines, failed calls' inputs and errors)
goes through the store's own masker (:func:`~contextstore.processors.secret_text.mask_text`,
:func:`~contextstore.processors.secret_text.mask_value`,
:func:`~contextstore.processors.secrets.mask_block`), with the confidence and patterns of
the store's :class:`~contextstore.processors.secrets.SecretMasker`. Ids, names, kinds and
numbers are kept: they pair and name things, as the masker keeps them in the view.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any

from contextstore.core.audit_records import (
    AuditReport,
    FailedToolCall,
    TimelineEvent,
    ViewedBlock,
    ViewedMessage,
)
from contextstore.core.overlays import block_text, result_items_text
from contextstore.processors.pipeline import Pipeline
from contextstore.processors.secret_text import mask_text, mask_value
from contextstore.processors.secrets import SecretMasker, mask_block


class ReportMasker:
    """Masks the texts, JSON values and blocks of a report as ``masker`` masks the view."""

    def __init__(self, masker: SecretMasker) -> None:
        self.confidence = masker.confidence
        self.patterns = masker.patterns

    @classmethod
    def of(cls, pipeline: Pipeline | None) -> ReportMasker:
        """The masker of ``pipeline`` (its first :class:`SecretMasker`), else the default
        one: a store that masks nothing for the model still gets a masked report."""
        found = next(
            (p for p in (pipeline.processors if pipeline else ()) if isinstance(p, SecretMasker)),
            None,
        )
        return cls(found or SecretMasker())

    def text(self, value: str | None) -> str | None:
        """``value`` with every secret replaced by its ``[REDACTED:kind]`` marker."""
        if value is None:
            return None
        return mask_text(value, confidence=self.confidence, patterns=self.patterns)[0]

    def value(self, value: Any) -> Any:
        """A JSON value (a tool call's input) with its secrets masked."""
        return mask_value(value, confidence=self.confidence, patterns=self.patterns)

    def block(self, block: dict[str, Any]) -> dict[str, Any]:
        """A content block with its secrets masked, a thinking block's text included (the
        page is read, never sent back)."""
        return mask_block(block, confidence=self.confidence, patterns=self.patterns, thinking=True)

    def json_text(self, value: str | None) -> str | None:
        """A JSON document held as text (a failed call's input) masked as a value, so that
        a password under a password-like key is masked too; as a text when it is not JSON."""
        if value is None:
            return None
        try:
            parsed = json.loads(value)
        except ValueError:
            return self.text(value)
        return json.dumps(self.value(parsed), ensure_ascii=False)


def masked_messages(messages: Sequence[ViewedMessage], masker: ReportMasker) -> list[ViewedMessage]:
    """``messages`` with every block, original and rewrite masked (hidden ones too)."""
    return [
        dataclasses.replace(
            m,
            blocks=[_masked_block(b, masker) for b in m.blocks],
            added=[masker.block(b) for b in m.added],
            followed_by=[masker.block(b) for b in m.followed_by],
        )
        for m in messages
    ]


def _masked_block(block: ViewedBlock, masker: ReportMasker) -> ViewedBlock:
    """``block`` masked: its row, its original text (the masked row's, which is masking the
    original: each text is scanned once) and its rewrite."""
    masked = masker.block(block.block)
    original = None if block.original_text is None else block_text(masked)
    if original is None:
        original = masker.text(block.original_text)
    effective = block.effective_text
    if effective is not None:
        effective = original if effective == block.original_text else masker.text(effective)
    return dataclasses.replace(
        block,
        block=masked,
        original_text=original,
        effective_text=effective,
        rewrite_source=masker.text(block.rewrite_source),
    )


def masked_events(events: Sequence[TimelineEvent], masker: ReportMasker) -> list[TimelineEvent]:
    """Timeline events with their details masked (a checkpoint's label and note, a
    rollback's target, a request's failure)."""
    return [dataclasses.replace(e, detail=masker.text(e.detail) or "") for e in events]


def masked_report(
    report: AuditReport,
    masker: ReportMasker,
    errors: dict[tuple[int, str | None], str] | None = None,
) -> AuditReport:
    """``report`` with the texts the page shows masked. ``errors`` (:func:`error_texts`)
    gives the failed results' whole texts where the caller has them: each is masked whole,
    then cut to the audit's 300 characters (masked after the cut, a credential the cut
    shortens would no longer be recognised, and show in part)."""
    conversation = dataclasses.replace(
        report.conversation, title=masker.text(report.conversation.title)
    )
    return dataclasses.replace(
        report,
        conversation=conversation,
        requests=[dataclasses.replace(r, failure=masker.text(r.failure)) for r in report.requests],
        truncations=[
            dataclasses.replace(
                t, reason=masker.text(t.reason) or "", summary=masker.text(t.summary)
            )
            for t in report.truncations
        ],
        file_reads=[
            dataclasses.replace(f, path=masker.text(f.path) or "") for f in report.file_reads
        ],
        failed_tool_calls=[_failed(f, masker, errors or {}) for f in report.failed_tool_calls],
        checkpoints=[
            dataclasses.replace(c, label=masker.text(c.label), note=masker.text(c.note))
            for c in report.checkpoints
        ],
        rollbacks=[dataclasses.replace(r, target=masker.text(r.target)) for r in report.rollbacks],
    )


FAILED_ERROR_CHARS = 300
"""The characters of a failed call's result the audit gives (``audit_failed_tool_calls``)."""


def _failed(
    call: FailedToolCall, masker: ReportMasker, errors: dict[tuple[int, str | None], str]
) -> FailedToolCall:
    whole = errors.get((call.result_message_idx, call.tool_use_id))
    error = masker.text(call.error if whole is None else whole) or ""
    return dataclasses.replace(
        call, input=masker.json_text(call.input), error=_clipped(error, FAILED_ERROR_CHARS)
    )


def _clipped(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, or just past a ``[REDACTED:kind]`` marker the
    cut would split (a marker cut short no longer says what kind of secret was there)."""
    opened = text.rfind("[REDACTED:", 0, limit)
    closed = text.find("]", opened) if opened >= 0 else -1
    return text[: max(limit, closed + 1)]


def error_texts(messages: Iterable[tuple[int, Any]]) -> dict[tuple[int, str | None], str]:
    """The whole text of every error result of ``messages`` (each message's index and its
    content), by result message and call id, as the ``blocks.text`` column holds it (the
    texts of a list joined by line breaks): what :func:`masked_report` masks before cutting
    it to the audit's 300 characters."""
    found: dict[tuple[int, str | None], str] = {}
    for index, content in messages:
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            text = block.get("content")
            if isinstance(text, list):
                text = result_items_text(text)
            if block.get("is_error") and isinstance(text, str):
                found[(index, block.get("tool_use_id"))] = text
    return found
