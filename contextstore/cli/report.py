"""``contextstore report CID -o FILE.html``: one self-contained HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from contextstore.cli import report_chart, report_html, terminal
from contextstore.cli.common import WrittenPath, open_store
from contextstore.cli.times import format_ts
from contextstore.core.audit_records import AuditReport, ViewedMessage
from contextstore.core.os_errors import NO_SPACE, NOT_WRITABLE, os_error
from contextstore.core.store_files import check_not_store_files

if TYPE_CHECKING:
    from contextstore.store import ContextStore


@click.command()
@click.argument("conversation_id", metavar="CID")
@click.option(
    "-o",
    "--output",
    "output",
    type=WrittenPath("the report", stdout=True, dir_okay=False, writable=True, path_type=Path),
    required=True,
    help="The HTML file to write (replaced if it exists); - writes the page to stdout.",
)
@click.option(
    "--show-secrets",
    is_flag=True,
    help=(
        "Show the stored originals with their secrets (API keys, tokens, private keys, "
        "passwords in URLs) as they are; by default every text of the page is masked as the "
        "model is shown it ([REDACTED:kind]). For an auditor on their own machine: do not "
        "send such a page on."
    ),
)
@click.pass_context
def report(ctx: click.Context, conversation_id: str, output: Path, show_secrets: bool) -> None:
    """Write an HTML report: tokens per request against the window, events, the
    conversation as the model saw it at the last request, secrets masked (--show-secrets:
    not). Needs the 'report' extra."""
    from contextstore.storage.clock import now_ms

    if not report_chart.available():
        terminal.error(report_chart.INSTALL_HINT)
        ctx.exit(1)
    to_stdout = str(output) == "-"
    store = open_store(ctx, auto_migrate=False)
    if not to_stdout:
        check_not_store_files([output], store.path)
    audit = store.audit(conversation_id)
    events = store.timeline(conversation_id)
    last = audit.requests[-1] if audit.requests else None
    if last is not None and last.prepared:
        # what it sent: by the view rules it was prepared with, which may be older
        messages = store.viewed_messages(conversation_id, request_id=last.request_id)
    else:
        messages = store.viewed_messages(conversation_id, as_of=last.ts if last else None)
    if not show_secrets:
        from contextstore.cli.report_mask import (
            ReportMasker,
            masked_events,
            masked_messages,
            masked_report,
        )

        masker = ReportMasker.of(store.pipeline)
        audit = masked_report(audit, masker, _error_texts(store, conversation_id, audit, messages))
        events = masked_events(events, masker)
        messages = masked_messages(messages, masker)
    page = report_html.build(
        audit,
        events,
        messages,
        report_chart.render_svg(audit, events),
        generated_at=format_ts(now_ms()),
        later=store.message_count(conversation_id) - len(messages),
        secrets_masked=not show_secrets,
    )
    if to_stdout:
        terminal.document(page)
    else:
        _write(output, page)
    terminal.note(
        f"report of {conversation_id}: {len(audit.requests)} requests, {len(events)} events, "
        f"{len(messages)} messages ({len(page.encode('utf-8')):,} bytes)"
    )


def _error_texts(
    store: ContextStore, conversation_id: str, audit: AuditReport, messages: list[ViewedMessage]
) -> dict[tuple[int, str | None], str]:
    """The whole texts of the failed calls' results, masked whole before the page cuts them:
    from the messages on the page, else (a failure after the last request whose text the
    audit cut) from every stored message."""
    from contextstore.cli.report_mask import FAILED_ERROR_CHARS, error_texts

    texts = error_texts((m.index, [b.block for b in m.blocks]) for m in messages)
    cut = [
        f
        for f in audit.failed_tool_calls
        if (f.result_message_idx, f.tool_use_id) not in texts and len(f.error) >= FAILED_ERROR_CHARS
    ]
    if not cut:
        return texts
    stored = store.messages(conversation_id)
    return error_texts((index, m.get("content")) for index, m in enumerate(stored))


def _write(output: Path, page: str) -> None:
    """Write the page to ``output`` and print its path."""
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        if exc.errno in NO_SPACE | NOT_WRITABLE:
            raise os_error(exc, "write the report") from exc
        raise click.BadParameter(
            f"cannot write {output}: {exc.strerror or exc}", param_hint="'-o' / '--output'"
        ) from exc
    terminal.out(str(output))
