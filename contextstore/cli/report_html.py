"""The HTML report: one self-contained file (inline CSS and SVG, no script, no network).

Sections: the key numbers; the chart (:mod:`contextstore.cli.report_chart`); a timeline of
events; the conversation as the model saw it at the last request, hidden ranges folded
(``<details>``), the tool results the view left out folded too, the placeholders it sent in
their place marked, and each rewrite beside its original (each distinct inline image embedded
once; thinking, documents and server tool blocks shown by what they hold, encrypted data
left out); the audit tables, the failed tool calls with their calls' inputs. It renders
the texts it is given: the report masks their secrets first
(:mod:`contextstore.cli.report_mask`), and the header says whether it did.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from contextstore.cli.output import DEDUP_COLUMNS, dedup_rows, has_usage, ordered_counts
from contextstore.cli.report_conversation import conversation, escape, indented, isolated, preview
from contextstore.cli.times import format_ts
from contextstore.core.audit_records import (
    REMOVED_NOTHING,
    AuditReport,
    FailedToolCall,
    RequestUsage,
    TimelineEvent,
    ViewedMessage,
)

CSS = """
:root { --ink: #1d2330; --muted: #5b6475; --line: #d9dee7; --soft: #f4f6fa;
        --user: #eef4ff; --assistant: #f3f8f1; --hidden: #fbf3e6; --rewrite: #fdecec; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1100px; padding: 24px; color: var(--ink);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 32px 0 8px; }
.meta { color: var(--muted); margin: 0 0 16px; }
.numbers { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr));
           gap: 8px; }
.numbers div { background: var(--soft); border-radius: 6px; padding: 8px 10px; }
.numbers b { display: block; font-size: 18px; }
table { border-collapse: collapse; width: 100%; margin: 4px 0 8px; }
th, td { text-align: left; border-bottom: 1px solid var(--line); padding: 4px 8px;
         vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.event-truncation td:nth-child(2) { color: #c0392b; font-weight: 600; }
tr.event-rollback td:nth-child(2) { color: #7d3c98; font-weight: 600; }
tr.event-checkpoint td:nth-child(2) { color: #2e8b57; font-weight: 600; }
.chart svg { width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; }
.message { border: 1px solid var(--line); border-radius: 6px; margin: 8px 0; padding: 6px 10px; }
.message.user { background: var(--user); } .message.assistant { background: var(--assistant); }
.message > header { color: var(--muted); font-size: 12px; margin-bottom: 4px; }
pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0; font: 12px/1.4
      ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
details.hidden-range { background: var(--hidden); border: 1px dashed #d9a441;
                       border-radius: 6px; padding: 6px 10px; margin: 8px 0; }
details.hidden-range > summary { cursor: pointer; font-weight: 600; }
details.dropped { background: var(--hidden); border: 1px dashed #d9a441; border-radius: 4px;
                  padding: 2px 8px; margin: 4px 0; }
details.dropped > summary { cursor: pointer; color: var(--muted); font-size: 12px; }
.block.added { border-left: 3px solid #d9a441; padding-left: 6px; }
.rewrite { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
.rewrite > div { background: white; border: 1px solid var(--line); border-radius: 4px;
                 padding: 4px 8px; }
.rewrite > div.effective { background: var(--rewrite); }
.rewrite h4 { margin: 0; font-size: 11px; text-transform: uppercase; color: var(--muted); }
.tool { color: var(--muted); font-size: 12px; }
img.inline { max-width: 240px; border: 1px solid var(--line); }
"""


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], css: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            numeric = isinstance(cell, int | float) and not isinstance(cell, bool)
            value = f"{cell:,}" if isinstance(cell, int) and not isinstance(cell, bool) else cell
            cls = ' class="num"' if numeric else ""
            cells.append(f"<td{cls}>{escape('' if value is None else str(value))}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    if not rows:
        return '<p class="meta">none</p>'
    return f'<table class="{css}"><tr>{head}</tr>{"".join(body)}</table>'


def _numbers(report: AuditReport) -> str:
    items = [
        ("requests", f"{len(report.requests):,}"),
        ("total cost", f"{report.total_cost:.4f}"),
        ("peak context", f"{report.peak_tokens:,} tokens"),
        ("of its window, at most", f"{report.peak_percent_of_window:.1f} %"),
        ("truncations", f"{len(report.truncations):,}"),
        ("saved by de-duplication", f"{report.chars_saved:,} chars"),
        ("secrets masked", f"{sum(s.count for s in report.masked_secrets):,}"),
        ("failed tool calls", f"{len(report.failed_tool_calls):,}"),
        ("checkpoints", f"{len(report.checkpoints):,}"),
        ("rollbacks", f"{len(report.rollbacks):,}"),
    ]
    cells = "".join(f"<div><b>{escape(v)}</b>{escape(k)}</div>" for k, v in items)
    return f'<div class="numbers">{cells}</div>'


def _timeline_rows(events: Sequence[TimelineEvent]) -> Iterator[tuple[str, str, str]]:
    """Events as rows; a run of consecutive messages becomes one row."""
    run: list[TimelineEvent] = []

    def flush() -> Iterator[tuple[str, str, str]]:
        if not run:
            return
        first, last = run[0], run[-1]
        span = (
            f"message {first.ref_id}" if len(run) == 1 else f"messages {first.ref_id}-{last.ref_id}"
        )
        yield (format_ts(first.ts), "message", f"{span} appended")
        run.clear()

    for event in events:
        if event.event == "message":
            run.append(event)
            continue
        yield from flush()
        yield (format_ts(event.ts), event.event, event.detail)
    yield from flush()


def _timeline(events: Sequence[TimelineEvent]) -> str:
    rows = list(_timeline_rows(events))
    if not rows:
        return '<p class="meta">none</p>'
    body = "".join(
        f'<tr class="event-{escape(kind)}"><td>{escape(ts)}</td><td>{escape(kind)}</td>'
        f"<td>{escape(detail)}</td></tr>"
        for ts, kind, detail in rows
    )
    return (
        f'<table class="timeline"><tr><th>time</th><th>event</th><th>detail</th></tr>{body}</table>'
    )


FAILED_INPUT_CHARS = 1_000
"""Characters of a failed call's input shown in the failed calls' table (a call that
wrote a file holds the whole file)."""


def _failed_calls(calls: Sequence[FailedToolCall]) -> str:
    """The failed tool calls: where the error came, what was called (the tool, the call's
    message and id, its input) and the error (the first 300 characters of the result)."""
    if not calls:
        return '<p class="meta">none</p>'
    rows = []
    for f in calls:
        if f.call_message_idx is None:
            call = f"not stored ({isolated(f.tool_use_id or '')})"
        else:
            call = f"#{f.call_message_idx} ({isolated(f.tool_use_id or '')})"
        arguments = (
            ""
            if f.input is None
            else f"<pre>{preview(indented(f.input), FAILED_INPUT_CHARS)}</pre>"
        )
        rows.append(
            f'<tr><td class="num">{f.result_message_idx:,}</td>'
            f"<td>{escape(f.tool_name or '')}</td><td>{call}</td>"
            f"<td>{arguments}</td><td><pre>{preview(f.error)}</pre></td></tr>"
        )
    head = "".join(f"<th>{h}</th>" for h in ("message", "tool", "call", "input", "error"))
    return f'<table class="failed-calls"><tr>{head}</tr>{"".join(rows)}</table>'


def _audit_tables(report: AuditReport) -> str:
    sections = [
        (
            "Truncations",
            _table(
                ("time", "hidden", "keep", "triggered by (tokens)", "messages", "reason"),
                [
                    (
                        format_ts(t.ts),
                        f"{t.start_idx}-{t.end_idx}",
                        t.keep,
                        t.tokens_total,
                        t.messages_hidden,
                        t.reason,
                    )
                    for t in report.truncations
                ],
            ),
        ),
        (
            "Requests",
            _table(
                ("id", "time", "total tokens", "% of window", "cost", "running cost", "failure"),
                [
                    (
                        r.request_id,
                        format_ts(r.ts),
                        r.total_tokens if has_usage(r) else None,
                        f"{r.percent_of_window:.1f}" if has_usage(r) else "",
                        "" if r.cost is None else f"{r.cost:.4f}",
                        f"{r.cumulative_cost:.4f}",
                        r.failure or "",
                    )
                    for r in report.requests
                ],
            ),
        ),
        (
            "Files read",
            _table(
                ("path", "tool", "reads"),
                [(f.path, f.tool_name, f.reads) for f in report.file_reads],
            ),
        ),
        (
            "De-duplication",
            _table(DEDUP_COLUMNS, dedup_rows(report)),
        ),
        (
            "Masked secrets",
            _table(
                ("kind", "masked by", "count"),
                [(s.kind, s.masked_by, s.count) for s in report.masked_secrets],
            ),
        ),
        (
            "Failed tool calls",
            _failed_calls(report.failed_tool_calls),
        ),
        (
            "Checkpoints",
            _table(
                ("id", "time", "label", "git", "note"),
                [
                    (c.id, format_ts(c.ts), c.label or "", c.git_hash or "", c.note or "")
                    for c in report.checkpoints
                ],
            ),
        ),
        (
            "Rollbacks",
            _table(
                ("id", "ran", "to", "target", "removed", "kept", "restored"),
                [
                    (
                        r.rollback_id,
                        format_ts(r.ran_at),
                        format_ts(r.cutoff_ts),
                        r.target if r.target is not None else "(import)",
                        ", ".join(f"{n} {t}" for t, n in ordered_counts(r.removed) if n)
                        or REMOVED_NOTHING,
                        "purged" if r.purged else f"{r.rows_archived} archived",
                        format_ts(r.restored_ts),
                    )
                    for r in report.rollbacks
                ],
            ),
        ),
    ]
    return "".join(f"<h3>{escape(title)}</h3>{body}" for title, body in sections)


def _secrets_line(masked: bool) -> str:
    """The header's line saying whether the page's texts have their secrets masked."""
    if masked:
        return (
            '<p class="meta secrets">Secrets masked: the API keys, tokens, private keys and '
            "passwords the store's secret masker finds in any text of this page, the originals "
            "included, read <code>[REDACTED:kind]</code> (the database keeps them; "
            "<code>report --show-secrets</code> writes them).</p>"
        )
    return (
        '<p class="meta secrets unmasked"><b>Secrets NOT masked</b> (written with '
        "<code>--show-secrets</code>): the originals below show every credential they hold. "
        "Do not send this file on.</p>"
    )


def _later(count: int, conversation_id: str) -> str:
    """A note that messages stored after the last request are not on the page (the answer
    to that request among them), and where to read them."""
    if count <= 0:
        return ""
    what = "message" if count == 1 else "messages"
    return (
        f'<p class="meta later">{count:,} later {what}, stored after that request (its '
        f"answer among them), not shown here: <code>contextstore show "
        f"{escape(conversation_id)}</code> lists every message.</p>"
    )


def _rules(last: RequestUsage | None, conversation_id: str) -> str:
    """A note saying by which view rules the conversation section shows the messages: those
    the last request was prepared with, or this version's when it was recorded only."""
    if last is None:
        return ""
    if last.prepared:
        return (
            f'<p class="meta rules">By the view rules request {last.request_id} was prepared '
            f"with, as <code>contextstore request {escape(conversation_id)} {last.request_id} "
            "--payload</code> rebuilds what it sent (they may be older than this "
            "version's).</p>"
        )
    return (
        f'<p class="meta rules">Request {last.request_id} was recorded, not prepared here: '
        "the messages are shown by this version's view rules, and the agent may have sent "
        "them otherwise.</p>"
    )


def build(
    report: AuditReport,
    events: Sequence[TimelineEvent],
    messages: Sequence[ViewedMessage],
    chart_svg: str,
    *,
    generated_at: str,
    later: int = 0,
    secrets_masked: bool = True,
) -> str:
    """The whole report as one HTML document; ``later`` messages, stored after the last
    request (its answer among them), are counted below the conversation, not shown.
    ``secrets_masked`` says whether the caller masked the texts it gives (the header says
    which the page holds; this function masks nothing)."""
    conv = report.conversation
    title = conv.title or conv.id
    last = report.requests[-1] if report.requests else None
    moment = f"at request {last.request_id} ({format_ts(last.ts)})" if last else "now (no requests)"
    fork = ""
    if conv.parent_id is not None:
        at = "" if conv.forked_at_ts is None else f" at {escape(format_ts(conv.forked_at_ts))}"
        fork = f" (forked from {isolated(conv.parent_id)}{at})"
    meta = (
        f"conversation {isolated(conv.id)}{fork} · "
        f"model {isolated(conv.model_id or 'unknown')} · "
        f"window {report.context_window:,} tokens{'' if conv.context_window else ', none set'} "
        f"(maximum allowed size {report.max_allowed_size:,.0f}) · generated "
        f"{escape(generated_at)}"
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>contextstore report: {escape(title)}</title><style>{CSS}</style></head><body>"
        f'<header><h1>{escape(title)}</h1><p class="meta">{meta}</p>'
        f"{_secrets_line(secrets_masked)}</header>"
        f'<section id="numbers">{_numbers(report)}</section>'
        f'<section id="chart" class="chart"><h2>Context tokens per request</h2>{chart_svg}'
        "</section>"
        f'<section id="timeline"><h2>Timeline</h2>{_timeline(events)}</section>'
        f'<section id="conversation"><h2>The conversation as the model saw it {escape(moment)}'
        f"</h2>{_rules(last, conv.id)}{conversation(messages)}{_later(later, conv.id)}"
        "</section>"
        f'<section id="audit"><h2>Audit</h2>{_audit_tables(report)}</section>'
        "</body></html>\n"
    )
