"""The report's conversation as HTML: each message's blocks as the model was shown them,
hidden ranges folded, rewrites beside their originals, each distinct large image embedded
once; stored text escaped, never markup (control characters shown as symbols, values set in
the page's own lines isolated)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

from contextstore.core.audit_records import ViewedBlock, ViewedMessage
from contextstore.core.overlays import block_text
from contextstore.core.server_tools import CONTAINER_UPLOAD

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


def preview(value: str | None, limit: int = PREVIEW_CHARS) -> str:
    """Stored text escaped for the page, cut after ``limit`` characters with a line saying
    how many more the database holds (a block can be megabytes)."""
    if value is None:
        return ""
    if len(value) > limit:
        cut = len(value) - limit
        value = f"{value[:limit]}\n... [{cut:,} more characters in the database]"
    return escape(value)


def isolated(value: object) -> str:
    """Stored text inside a line of the page's own words (a model id, a tool call's id),
    escaped and isolated (``<bdi>``): a right-to-left override it holds, left open, would
    otherwise reorder the words and numbers after it on the line ("window 200,000" shown as
    "000,002 wodniw")."""
    return f"<bdi>{escape(str(value))}</bdi>"


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
        return f"at {isolated(source.get('url', ''))} (not fetched)"
    if kind == "file":
        return f"file {isolated(source.get('file_id', ''))}"
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
        head += f" {isolated(data['title'])}"
    if media:
        head += f", {escape(str(media))}"
    kind = source.get("type") if isinstance(source, dict) else None
    body = ""
    if kind == "text":
        body = f"<pre>{preview(str(source.get('data', '')), page.limit)}</pre>"
    elif kind == "content":
        content = source.get("content")
        items = [{"type": "text", "text": content}] if isinstance(content, str) else content
        body = "".join(_result_item(item, page) for item in items or [])
    else:
        head += f" {_source(source)}"
    context = ""
    if data.get("context"):
        context = (
            f'<div class="tool">context</div><pre>{preview(str(data["context"]), page.limit)}</pre>'
        )
    return f'<div class="tool">{head}</div>{context}{body}'


def _search_result(data: dict[str, Any], page: _Page) -> str:
    """A search result given in a tool result: its title, source and texts."""
    texts = "".join(
        f"<pre>{preview(str(item.get('text', '')), page.limit)}</pre>"
        for item in data.get("content") or []
        if isinstance(item, dict)
    )
    return (
        f'<div class="tool">search result {isolated(data.get("title", ""))} from '
        f"{isolated(data.get('source', ''))}</div>{texts}"
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
    return f"<pre>{preview(json.dumps(value, indent=2, ensure_ascii=False), page.limit)}</pre>"


def _result_item(item: Any, page: _Page) -> str:
    """One item of a tool result held as a list (or of a document's content), after the
    one its text is read from."""
    kind = item.get("type") if isinstance(item, dict) else None
    if kind == "text" and isinstance(item.get("text"), str):
        return f"<pre>{preview(item['text'], page.limit)}</pre>"
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
    thought = preview(str(data.get("thinking", "")), page.limit)
    return f'<div class="tool">thinking{sent}</div><pre>{thought}</pre>'


def _other(block: ViewedBlock, page: _Page) -> str:
    """A block with no text of its own: thinking, a document, a server tool's call or
    result, shown by what it holds rather than by its type alone."""
    data = block.block
    if block.type in {"thinking", "redacted_thinking"}:
        return _thinking(data, page)
    if block.type == "server_tool_use":
        return (
            f'<div class="tool">server tool call {isolated(data.get("name"))} '
            f"(id {isolated(data.get('id'))})</div>{_json(data.get('input'), page)}"
        )
    if block.type == CONTAINER_UPLOAD:
        return f'<div class="tool">container upload {_source({**data, "type": "file"})}</div>'
    shown = {k: v for k, v in data.items() if k not in {"type", "tool_use_id", "cache_control"}}
    what = escape(block.type)
    if "tool_use_id" in data:
        what += f" for {isolated(data.get('tool_use_id'))}"
    return f'<div class="tool">{what}</div>{_json(_without_secrets(shown), page)}'


def indented(document: str) -> str:
    """A JSON document held as text, indented to be read (as it is when not JSON)."""
    try:
        return json.dumps(json.loads(document), indent=2, ensure_ascii=False)
    except ValueError:
        return document


def _beside(original: str, block: ViewedBlock, page: _Page) -> str:
    """A rewritten block's original (``original``, as the page shows it) beside what the
    model was shown in its place (a tool call's input as indented JSON)."""
    how = f"{isolated(block.rewrite_kind)} by {isolated(block.rewrite_source)}"
    shown = block.effective_text
    if block.type == "tool_use" and shown is not None:
        shown = indented(shown)
    return (
        f'<div class="rewrite"><div class="original"><h4>original</h4>{original}</div>'
        f'<div class="effective"><h4>shown to the model ({how})</h4>'
        f"<pre>{preview(shown, page.limit)}</pre></div></div>"
    )


def _block(block: ViewedBlock, page: _Page) -> str:
    data = block.block
    if block.type == "tool_use":
        arguments = json.dumps(data.get("input"), indent=2, ensure_ascii=False)
        shown = f"<pre>{preview(arguments, page.limit)}</pre>"
        body = (
            f'<div class="tool">tool call {isolated(data.get("name"))} '
            f"(id {isolated(data.get('id'))})</div>"
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
                f'<div class="tool">tool result for {isolated(data.get("tool_use_id"))}'
                f"{error}</div>"
            )
        if block.rewritten:
            original = f"<pre>{preview(block.original_text, page.limit)}</pre>"
            body = f"{prefix}{_beside(original, block, page)}"
        elif block.original_text is None and block.type == "tool_result":
            body = prefix  # no text: its items (a screenshot) follow
        else:
            body = f"{prefix}<pre>{preview(block.original_text, page.limit)}</pre>"
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
        what = f"tool result for {isolated(block.get('tool_use_id'))}"
    return (
        f'<div class="block added {escape(kind)}"><div class="tool">{what}, added by the '
        f"view (not stored)</div><pre>{preview(block_text(block))}</pre></div>"
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


def conversation(messages: Sequence[ViewedMessage]) -> str:
    """The conversation's messages in order, each run of hidden ones folded in one
    ``<details>``; one page, so that each distinct large image is embedded once."""
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
