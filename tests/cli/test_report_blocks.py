"""The report's conversation section. It shows what a thinking block, a document and a
server tool's blocks hold (they were shown by their type alone, "thinking block"), without
what no reader should see there: redacted thinking's encrypted data, a PDF's bytes, a search
result's encrypted content. Its size stays bounded where the conversation is not (hidden
ranges), and it says what it leaves out (messages after the last request)."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

from contextstore import ContextStore
from tests.cli.conftest import run
from tests.interop.real import CLINE, need

PDF = base64.b64encode(b"%PDF-1.4\n" + b"PDFBYTES" * 400).decode()
ENCRYPTED = "ENCRYPTEDTHINKING" * 20


def _conversation(page: str) -> str:
    return page[page.index('<section id="conversation"') : page.index('<section id="audit"')]


def test_thinking_from_a_real_cline_task_is_shown_as_its_text(tmp_path: Path) -> None:
    task = need(CLINE / "gmfstu-task-1769053680585")
    db = str(tmp_path / "r.db")
    assert run("--db", db, "import", "cline", str(task)).code == 0
    out = tmp_path / "r.html"
    assert run("--db", db, "report", task.name, "-o", str(out)).code == 0
    shown = _conversation(out.read_text(encoding="utf-8"))
    history = json.loads((task / "api_conversation_history.json").read_text(encoding="utf-8"))
    # the page shows the messages stored by the last request (the answer to it came after)
    shown_count = shown.count('<article class="message')
    thoughts = [
        block
        for message in history[:shown_count]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "thinking"
    ]
    assert thoughts
    for thought in thoughts:
        assert html.escape(thought["thinking"][:300]) in shown
        assert thought["signature"] not in shown
    assert len(thoughts) > 20 and "thinking block" not in shown


def test_documents_thinking_and_server_tools_show_what_they_hold(tmp_path: Path) -> None:
    db = str(tmp_path / "k.db")
    pdf = {"type": "base64", "media_type": "application/pdf", "data": PDF}
    notes = {"type": "text", "media_type": "text/plain", "data": "the notes <b>say</b> hi"}
    search = {
        "type": "web_search_result",
        "url": "https://example.org/found",
        "title": "Found <it>",
        "encrypted_content": "ENCRYPTEDRESULT" * 10,
        "page_age": None,
    }
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(
            cid,
            "user",
            [
                {"type": "text", "text": "read these"},
                {"type": "document", "title": "Spec <i>2</i>", "source": pdf},
                {"type": "document", "title": "notes.txt", "source": notes, "context": "ctx!"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/x.png"}},
            ],
        )
        store.append(
            cid,
            "assistant",
            [
                {"type": "thinking", "thinking": "weighing <the> spec", "signature": "SIG0"},
                {"type": "redacted_thinking", "data": ENCRYPTED},
                {"type": "thinking", "thinking": "an unsigned thought"},
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_1",
                    "name": "web_search",
                    "input": {"query": "what <is> it"},
                },
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_1",
                    "content": [search],
                },
                {"type": "text", "text": "done"},
            ],
        )
        store.record_request(cid, tokens_in=100, tokens_out=10)
    out = tmp_path / "k.html"
    assert run("--db", db, "report", cid, "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    shown = _conversation(page)
    for text in (
        "Spec &lt;i&gt;2&lt;/i&gt;",
        "application/pdf",
        "the notes &lt;b&gt;say&lt;/b&gt; hi",
        "ctx!",
        "https://example.com/x.png",
        "weighing &lt;the&gt; spec",
        "an unsigned thought",
        "no signature",
        "redacted thinking",
        "web_search",
        "what &lt;is&gt; it",
        "https://example.org/found",
        "Found &lt;it&gt;",
    ):
        assert text in shown, text
    for secret in (PDF[:100], "PDFBYTES", "ENCRYPTEDTHINKING", "ENCRYPTEDRESULT", "SIG0"):
        assert secret not in page, secret
    assert " block</div>" not in shown
    assert 'src="https:' not in page and 'href="https:' not in page


def test_a_long_conversations_hidden_range_is_previewed_short(tmp_path: Path) -> None:
    """The visible messages are bounded by the window, the hidden ones are not: each of
    their blocks was shown up to 4,000 characters, so a report of 10,000 messages, 9,000
    of them hidden, was 25 MB. A hidden message's block now shows its first 500."""
    db = str(tmp_path / "long.db")
    line = "0123456789abcdefghi\n"
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append_many(
            cid,
            [
                {"role": "user" if n % 2 == 0 else "assistant", "content": f"#{n} " + line * 500}
                for n in range(400)
            ],
        )
        store.set_deleted_range(cid, 389)
        store.record_request(cid, tokens_in=100, tokens_out=10)
    out = tmp_path / "long.html"
    assert run("--db", db, "report", cid, "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    hidden = page[page.index('<details class="hidden-range"') : page.index("</details>")]
    texts = re.findall(r"<pre>(.*?)</pre>", hidden, re.S)
    assert len(texts) == 388
    for n, text in enumerate(texts, start=2):
        shown, more = text.split("\n... [")
        assert len(shown) == 500 and shown.startswith(f"#{n} ")
        assert more == f"{len(f'#{n} ') + len(line) * 500 - 500:,} more characters in the database]"
    visible = re.findall(r"<pre>(.*?)</pre>", page[page.index("</details>") :], re.S)
    assert len(visible) == 10 and all(len(t.split("\n...")[0]) == 4_000 for t in visible)
    assert out.stat().st_size < 600_000


def test_messages_after_the_last_request_are_counted_not_dropped_silently(
    tmp_path: Path,
) -> None:
    """The page shows the conversation at the last request; the real Cline task's last
    message, the model's final answer, came after it and was nowhere on the page, with
    nothing saying so."""
    task = need(CLINE / "gmfstu-task-1769053680585")
    db = str(tmp_path / "r.db")
    assert run("--db", db, "import", "cline", str(task)).code == 0
    history = json.loads((task / "api_conversation_history.json").read_text(encoding="utf-8"))
    out = tmp_path / "r.html"
    assert run("--db", db, "report", task.name, "-o", str(out)).code == 0
    shown = _conversation(out.read_text(encoding="utf-8"))
    articles = shown.count('<article class="message')
    later = len(history) - articles
    assert later >= 1
    what = "message" if later == 1 else "messages"
    assert f"{later} later {what}, stored after that request" in shown
    assert f"contextstore show {task.name}" in shown


def test_a_rewritten_call_image_or_document_shows_its_rewrite(tmp_path: Path) -> None:
    """A tool call's input, an image and a document the secret masker rewrote were shown
    as stored only, under "1 block rewritten": what the model was shown in their place was
    not on the page (a text's rewrite was)."""
    db = tmp_path / "w.db"
    url = "https://u:hunter2secret@h/a.png"
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(
            cid,
            "user",
            [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "url", "url": url}},
                {"type": "document", "title": f"from {url}", "source": _text_source("notes")},
            ],
        )
        store.append(
            cid,
            "assistant",
            [{"type": "tool_use", "id": "t1", "name": "fetch", "input": {"url": url}}],
        )
        store.append(cid, "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}])
        prepared = store.prepare_request(cid, model="claude-sonnet-4-5", max_tokens=100)
        store.record_request(cid, request_id=prepared.request_id, tokens_in=100, tokens_out=5)
    out = tmp_path / "w.html"
    assert run("--db", str(db), "report", cid, "-o", str(out), "--show-secrets").code == 0
    shown = _conversation(out.read_text(encoding="utf-8"))
    for index, kinds in ((0, ["image", "document"]), (1, ["tool_use"])):
        article = shown[shown.index(f'id="m{index}"') :]
        article = article[: article.index("</article>")]
        for kind in kinds:
            block = article[article.index(f'<div class="block {kind}">') :]
            block = block[: block.index('<div class="block', 1)] if kind == "image" else block
            assert '<div class="effective"><h4>shown to the model' in block, kind
            assert "hunter2secret" in block and "[REDACTED:url_password]" in block, kind


def _text_source(text: str) -> dict[str, str]:
    return {"type": "text", "media_type": "text/plain", "data": text}
