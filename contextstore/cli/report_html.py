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

import html
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from contextstore.cli.output import DEDUP_COLUMNS, dedup_rows, has_usage, ordered_counts
from contextstore.cli.times import format_ts
from contextstore.core.audit_records import (
    REMOVED_NOTHING,
    AuditReport,
    FailedToolCall,
    RequestUsage,
    TimelineEvent,
    ViewedBlock,
    ViewedMessage,
)
from contextstore.core.overlays import block_text
from contextstore.core.server_tools import CONTAINER_UPLOAD

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

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _symbol(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures: ␀ for NUL, ␛ for ESC
    return "\u2421" if code == 0x7F else f"\\x{code:02x}"


def escape(value: str) -> str:
    """``value`` as HTML text or an attribute's value: markup characters and quotes escaped,
    and every control character but tab, line feed and carriage return shown as a symbol, as
    a terminal shows them (a browser drops a NUL and draws an ESC as nothing)."""
    return html.escape(_CONTROL.sub(_symbol, value))


PREVIEW_CHARS = 4_000
"""Characters of a block shown before the rest is cut (the database keeps everything)."""


HIDDEN_PREVIEW_CHARS = 500
"""Characters of a block of a message hidden by truncation shown before the rest is cut: the
visible messages are bounded by the window, the hidden ones grow with the conversation (a
report of 10,000 messages, 9,000 of them hidden, was 25 MB, 20 MB of it the hidden range)."""


def _text(value: str | None, limit: int = PREVIEW_CHARS) -> str:
    if value is None:
        return ""
    if len(value) > limit:
        cut = len(value) - limit
        value = f"{value[:limit]}\n... [{cut:,} more characters in the database]"
    return escape(value)


def _isolated(value: object) -> str:
    """Stored text inside a line of the page's own words (a model id, a tool call's id),
    escaped and isolated (``<bdi>``): a right-to-left override it holds, left open, would
    otherwise reorder the words and numbers after it on the line ("window 200,000" shown as
    "000,002 wodniw")."""
    return f"<bdi>{escape(str(value))}</bdi>"


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


REPEATED_IMAGE_CHARS = 10_000
"""An inline image of at least this many base64 characters is embedded once, at its first
showing, and a repeat links to it; a smaller one (an icon) is embedded at every showing, where
it costs about what a link would."""


class _Page:
    """What the page has shown so far: each distinct inline image (of
    :data:`REPEATED_IMAGE_CHARS` or more) is embedded once, at its first showing, and a
    repeat links to it (a screenshot sent again made the file grow by its whole size at
    every showing); and how much of a block the current message shows."""

    def __init__(self) -> None:
        self.images: dict[tuple[str, str], tuple[str, int]] = {}
        self.message = 0
        self.limit = PREVIEW_CHARS


def _image(data: dict[str, Any], page: _Page) -> str:
    """An image block: inline when its bytes are in the row (base64), once per distinct
    image; by URL or file id, named (the page fetches nothing)."""
    source = data.get("source") or {}
    media = str(source.get("media_type", ""))
    kind = source.get("type")
    if kind == "base64" and media.startswith("image/"):
        key = (media, str(source.get("data", "")))
        inline = f'alt="image" src="data:{escape(media)};base64,{escape(key[1])}"'
        if len(key[1]) < REPEATED_IMAGE_CHARS:
            return f'<img class="inline" {inline}>'
        shown = page.images.get(key)
        if shown is not None:
            anchor, message = shown
            return (
                f'<div class="tool"><a href="#{anchor}">image {escape(media)}: the one shown '
                f"in #{message}</a> (embedded once)</div>"
            )
        anchor = f"image-{len(page.images) + 1}"
        page.images[key] = (anchor, page.message)
        return f'<img class="inline" id="{anchor}" {inline}>'
    what = f"image {escape(media)}" if media else "image"
    return f'<div class="tool">{what} {_source(source)}</div>'


def _source(source: Any) -> str:
    """Where a non-inline image's or document's content is: its URL (as text: the page
    fetches nothing) or its file id."""
    if not isinstance(source, dict):
        return ""
    kind = source.get("type")
    if kind == "url":
        return f"at {_isolated(source.get('url', ''))} (not fetched)"
    if kind == "file":
        return f"file {_isolated(source.get('file_id', ''))}"
    if kind == "base64":
        size = len(str(source.get("data", ""))) * 3 // 4
        return f"(about {size:,} bytes, not embedded)"
    return f"({escape(str(kind))} source)"


def _document(data: dict[str, Any], page: _Page) -> str:
    """A document: its title, context and text (a plain-text or content source), or what
    it is and where (a PDF's bytes are not embedded; a URL is not fetched)."""
    source = data.get("source") or {}
    media = source.get("media_type") if isinstance(source, dict) else None
    head = "document"
    if data.get("title"):
        head += f" {_isolated(data['title'])}"
    if media:
        head += f", {escape(str(media))}"
    kind = source.get("type") if isinstance(source, dict) else None
    body = ""
    if kind == "text":
        body = f"<pre>{_text(str(source.get('data', '')), page.limit)}</pre>"
    elif kind == "content":
        content = source.get("content")
        items = [{"type": "text", "text": content}] if isinstance(content, str) else content
        body = "".join(_result_item(item, page) for item in items or [])
    else:
        head += f" {_source(source)}"
    context = ""
    if data.get("context"):
        context = (
            f'<div class="tool">context</div><pre>{_text(str(data["context"]), page.limit)}</pre>'
        )
    return f'<div class="tool">{head}</div>{context}{body}'


def _search_result(data: dict[str, Any], page: _Page) -> str:
    """A search result given in a tool result: its title, source and texts."""
    texts = "".join(
        f"<pre>{_text(str(item.get('text', '')), page.limit)}</pre>"
        for item in data.get("content") or []
        if isinstance(item, dict)
    )
    return (
        f'<div class="tool">search result {_isolated(data.get("title", ""))} from '
        f"{_isolated(data.get('source', ''))}</div>{texts}"
    )


def _without_secrets(value: Any) -> Any:
    """``value`` with its encrypted fields (``encrypted_content``, ``encrypted_index``) left
    out: opaque to a reader, sent back verbatim, often long."""
    if isinstance(value, dict):
        return {
            k: f"[{len(str(v)):,} encrypted characters]"
            if k.startswith("encrypted")
            else _without_secrets(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_without_secrets(v) for v in value]
    return value


def _json(value: Any, page: _Page) -> str:
    return f"<pre>{_text(json.dumps(value, indent=2, ensure_ascii=False), page.limit)}</pre>"


def _result_item(item: Any, page: _Page) -> str:
    """One item of a tool result held as a list (or of a document's content), after the
    one its text is read from."""
    kind = item.get("type") if isinstance(item, dict) else None
    if kind == "text" and isinstance(item.get("text"), str):
        return f"<pre>{_text(item['text'], page.limit)}</pre>"
    if kind == "image":
        return _image(item, page)
    if kind == "document":
        return _document(item, page)
    if kind == "search_result":
        return _search_result(item, page)
    return f'<div class="tool">{escape(str(kind))} item</div>'


def _more_items(data: dict[str, Any]) -> list[Any]:
    """The items of a tool result's content besides the one :func:`block_text` reads (its
    first, when that is text): a second text, a screenshot. Its text shows only the first
    item's, so these were missing from the page."""
    content = data.get("content")
    if not isinstance(content, list):
        return []
    return content[1:] if block_text(data) is not None else content


def _thinking(data: dict[str, Any], page: _Page) -> str:
    """Thinking as text, and whether it goes back to the model; redacted thinking by its
    size only (the provider encrypted it: it is sent back as stored, never read)."""
    if data.get("type") == "redacted_thinking":
        size = len(str(data.get("data", "")))
        return (
            f'<div class="tool">redacted thinking: {size:,} characters the provider '
            "encrypted, sent back as stored (not shown)</div>"
        )
    sent = "" if data.get("signature") else ", no signature: the Anthropic format leaves it out"
    thought = _text(str(data.get("thinking", "")), page.limit)
    return f'<div class="tool">thinking{sent}</div><pre>{thought}</pre>'


def _other(block: ViewedBlock, page: _Page) -> str:
    """A block with no text of its own: thinking, a document, a server tool's call or
    result, shown by what it holds rather than by its type alone."""
    data = block.block
    if block.type in {"thinking", "redacted_thinking"}:
        return _thinking(data, page)
    if block.type == "server_tool_use":
        return (
            f'<div class="tool">server tool call {_isolated(data.get("name"))} '
            f"(id {_isolated(data.get('id'))})</div>{_json(data.get('input'), page)}"
        )
    if block.type == CONTAINER_UPLOAD:
        return f'<div class="tool">container upload {_source({**data, "type": "file"})}</div>'
    shown = {k: v for k, v in data.items() if k not in {"type", "tool_use_id", "cache_control"}}
    what = escape(block.type)
    if "tool_use_id" in data:
        what += f" for {_isolated(data.get('tool_use_id'))}"
    return f'<div class="tool">{what}</div>{_json(_without_secrets(shown), page)}'


def _indented(document: str) -> str:
    """A JSON document held as text, indented to be read (as it is when not JSON)."""
    try:
        return json.dumps(json.loads(document), indent=2, ensure_ascii=False)
    except ValueError:
        return document


def _beside(original: str, block: ViewedBlock, page: _Page) -> str:
    """A rewritten block's original (``original``, as the page shows it) beside what the
    model was shown in its place (a tool call's input as indented JSON)."""
    how = f"{_isolated(block.rewrite_kind)} by {_isolated(block.rewrite_source)}"
    shown = block.effective_text
    if block.type == "tool_use" and shown is not None:
        shown = _indented(shown)
    return (
        f'<div class="rewrite"><div class="original"><h4>original</h4>{original}</div>'
        f'<div class="effective"><h4>shown to the model ({how})</h4>'
        f"<pre>{_text(shown, page.limit)}</pre></div></div>"
    )


def _block(block: ViewedBlock, page: _Page) -> str:
    data = block.block
    if block.type == "tool_use":
        arguments = json.dumps(data.get("input"), indent=2, ensure_ascii=False)
        shown = f"<pre>{_text(arguments, page.limit)}</pre>"
        body = (
            f'<div class="tool">tool call {_isolated(data.get("name"))} '
            f"(id {_isolated(data.get('id'))})</div>"
            f"{_beside(shown, block, page) if block.rewritten else shown}"
        )
    elif block.type in {"image", "document"}:
        body = _image(data, page) if block.type == "image" else _document(data, page)
        if block.rewritten:
            body = _beside(body, block, page)
    elif block.type != "tool_result" and block.original_text is block.effective_text is None:
        body = _other(block, page)
    else:
        prefix = ""
        if block.type == "tool_result":
            error = " (error)" if data.get("is_error") else ""
            prefix = (
                f'<div class="tool">tool result for {_isolated(data.get("tool_use_id"))}'
                f"{error}</div>"
            )
        if block.rewritten:
            original = f"<pre>{_text(block.original_text, page.limit)}</pre>"
            body = f"{prefix}{_beside(original, block, page)}"
        elif block.original_text is None and block.type == "tool_result":
            body = prefix  # no text: its items (a screenshot) follow
        else:
            body = f"{prefix}<pre>{_text(block.original_text, page.limit)}</pre>"
        if block.type == "tool_result":
            body += "".join(_result_item(item, page) for item in _more_items(data))
    if block.dropped:
        return (
            f'<details class="dropped block {escape(block.type)}"><summary>{escape(block.type)} '
            "not sent: the view's tool pairing left it out (no visible call it answers, or "
            "a second result for one call)</summary>"
            f"{body}</details>"
        )
    return f'<div class="block {escape(block.type)}">{body}</div>'


def _added(block: dict[str, Any]) -> str:
    """A block the view sent that no stored row holds (a ``result missing`` placeholder)."""
    kind = str(block.get("type"))
    what = escape(kind)
    if kind == "tool_result":
        what = f"tool result for {_isolated(block.get('tool_use_id'))}"
    return (
        f'<div class="block added {escape(kind)}"><div class="tool">{what}, added by the '
        f"view (not stored)</div><pre>{_text(block_text(block))}</pre></div>"
    )


def _message(message: ViewedMessage, page: _Page) -> str:
    page.message = message.index
    page.limit = HIDDEN_PREVIEW_CHARS if message.hidden else PREVIEW_CHARS
    rewritten = sum(1 for b in message.blocks if b.rewritten)
    dropped = sum(1 for b in message.blocks if b.dropped)
    note = f", {rewritten} block{'s' if rewritten != 1 else ''} rewritten" if rewritten else ""
    if dropped:
        note += f", {dropped} block{'s' if dropped != 1 else ''} not sent"
    if message.added:
        note += f", {len(message.added)} added by the view"
    blocks = "".join(_added(b) for b in message.added) + "".join(
        _block(b, page) for b in message.blocks
    )
    article = (
        f'<article class="message {escape(message.role)}" id="m{message.index}">'
        f"<header>#{message.index} {escape(message.role)}{note}</header>{blocks}</article>"
    )
    if not message.followed_by:
        return article
    return (
        f'{article}<article class="message user added" id="m{message.index}-added">'
        f"<header>user, added by the view after #{message.index} (not stored)</header>"
        f"{''.join(_added(b) for b in message.followed_by)}</article>"
    )


def _conversation(messages: Sequence[ViewedMessage]) -> str:
    page = _Page()
    parts: list[str] = []
    position = 0
    while position < len(messages):
        message = messages[position]
        if not message.hidden:
            parts.append(_message(message, page))
            position += 1
            continue
        end = position
        while end < len(messages) and messages[end].hidden:
            end += 1
        folded = messages[position:end]
        parts.append(
            f'<details class="hidden-range"><summary>messages {folded[0].index}-'
            f"{folded[-1].index} ({len(folded)}) hidden from the model by truncation</summary>"
            f"{''.join(_message(m, page) for m in folded)}</details>"
        )
        position = end
    return "".join(parts) or '<p class="meta">no messages</p>'


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
            call = f"not stored ({_isolated(f.tool_use_id or '')})"
        else:
            call = f"#{f.call_message_idx} ({_isolated(f.tool_use_id or '')})"
        arguments = (
            "" if f.input is None else f"<pre>{_text(_indented(f.input), FAILED_INPUT_CHARS)}</pre>"
        )
        rows.append(
            f'<tr><td class="num">{f.result_message_idx:,}</td>'
            f"<td>{escape(f.tool_name or '')}</td><td>{call}</td>"
            f"<td>{arguments}</td><td><pre>{_text(f.error)}</pre></td></tr>"
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
        fork = f" (forked from {_isolated(conv.parent_id)}{at})"
    meta = (
        f"conversation {_isolated(conv.id)}{fork} · "
        f"model {_isolated(conv.model_id or 'unknown')} · "
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
        f"</h2>{_rules(last, conv.id)}{_conversation(messages)}{_later(later, conv.id)}"
        "</section>"
        f'<section id="audit"><h2>Audit</h2>{_audit_tables(report)}</section>'
        "</body></html>\n"
    )
