"""The HTML report in a real browser: Debian's headless Chromium draws the chart's points,
folds the hidden range, shows rewrites, requests nothing from the network, logs no error."""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.cli.output import has_usage
from tests.cli.chromium import Browser, chromium_path
from tests.cli.conftest import run

pytestmark = pytest.mark.skipif(
    chromium_path() is None,
    reason="Debian's chromium is not installed (apt-get install -y chromium; .ci/run does it)",
)

MEASURE = """(() => {
  const visible = (el) => {
    const b = el.getBoundingClientRect();
    return b.width > 0 && b.height > 0;
  };
  const dots = [...document.querySelectorAll('#chart .plot.overlay .serie-0 circle.dot')];
  const plot = document.querySelector('#chart .plot .background');
  const box = plot ? plot.getBoundingClientRect() : null;
  const inside = dots.filter((d) => {
    const b = d.getBoundingClientRect();
    return box && b.left >= box.left - 1 && b.right <= box.right + 1
      && b.top >= box.top - 1 && b.bottom <= box.bottom + 1;
  });
  return {
    dots: dots.length,
    drawn: dots.filter(visible).length,
    inside: inside.length,
    markers: [...document.querySelectorAll('#chart .legends .legend text')]
      .map((t) => t.textContent),
    lines: [...document.querySelectorAll('#chart .plot .series path.line')]
      .filter((p) => p.getTotalLength() > 0).length,
    folded: [...document.querySelectorAll('details.hidden-range')].filter((d) => !d.open).length,
    rewrites: document.querySelectorAll('.rewrite .effective').length,
    timeline: document.querySelectorAll('#timeline tr').length,
  };
})()"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    opened = Browser()
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ContextStore, str]]:
    folder = tmp_path_factory.mktemp("report")
    db = folder / "demo.db"
    assert run("--db", str(db), "demo", "--crash-kills", "0").code == 0
    store = ContextStore.open(db)
    cid = next(c.id for c in store.list_conversations() if "overflow" in (c.title or ""))
    out = folder / "report.html"
    made = run("--db", str(db), "report", cid, "-o", str(out))
    assert made.code == 0, made.err
    try:
        yield out, store, cid
    finally:
        store.close()


def test_the_chart_draws_one_point_per_request_with_usage(
    browser: Browser, report: tuple[Path, ContextStore, str]
) -> None:
    path, store, cid = report
    audit = store.audit(cid)
    expected = sum(1 for r in audit.requests if has_usage(r))
    assert expected >= 3
    page = browser.load(path.as_uri(), MEASURE)
    measured = page.value
    assert measured["dots"] == measured["drawn"] == measured["inside"] == expected
    assert {"context tokens", "context window", "maximum allowed size", "truncation"} <= set(
        measured["markers"]
    )
    assert {"checkpoint", "rollback"} <= set(measured["markers"])
    assert measured["lines"] >= 5
    assert measured["folded"] == 1 and measured["rewrites"] >= 1 and measured["timeline"] > 5


def test_the_page_logs_no_error_and_fetches_nothing(
    browser: Browser, report: tuple[Path, ContextStore, str]
) -> None:
    path, _, _ = report
    page = browser.load(path.as_uri(), "document.title")
    assert page.value.startswith("contextstore report: demo")
    assert page.errors == []
    assert all(url.startswith(("file:", "data:")) for url in page.requests), page.requests


def test_a_broken_page_is_caught(browser: Browser, tmp_path: Path) -> None:
    """The harness itself: an error on a page is reported, so the check above can fail."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction()</script></body></html>")
    assert browser.load(bad.as_uri(), "1").errors != []


def test_a_screenshot_for_people(browser: Browser, report: tuple[Path, ContextStore, str]) -> None:
    path, _, _ = report
    shot = path.with_suffix(".png")
    browser.screenshot(path.as_uri(), shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    keep = os.environ.get("CONTEXTSTORE_REPORT_SCREENSHOT")
    if keep:
        Path(keep).write_bytes(shot.read_bytes())


HOSTILE = (
    "</script><script>alert(1)</script><img src=x onerror=alert(2)>\"'><svg onload=alert(3)>"
    "</style><style>body{display:none}</style> javascript:alert(4) 😀"
)

LINE_ORDER = """(() => {
  const meta = document.querySelector('header .meta');
  const box = (word) => {
    const walker = document.createTreeWalker(meta, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const at = node.data.indexOf(word);
      if (at >= 0) {
        const range = document.createRange();
        range.setStart(node, at);
        range.setEnd(node, at + word.length);
        const b = range.getBoundingClientRect();
        return {left: b.left, right: b.right, top: Math.round(b.top)};
      }
    }
    return null;
  };
  const all = [...document.querySelectorAll('*')];
  return {
    window: box('window'), number: box('200,000'),
    scripts: document.scripts.length,
    handlers: all.filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length,
    hidden: getComputedStyle(document.body).display === 'none',
  };
})()"""


def test_stored_text_neither_runs_nor_reorders_the_page(browser: Browser, tmp_path: Path) -> None:
    """Markup in every stored field stays text; a right-to-left override left open in the
    model's id showed the line after it backwards ("000,002 wodniw" for "window 200,000")."""
    db = tmp_path / "hostile.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation(
            model_id="gpt-4\u202e", context_window=200_000, title=HOSTILE
        ).id
        store.append(cid, "user", HOSTILE)
        store.append(
            cid,
            "assistant",
            [{"type": "tool_use", "id": "t1\u202e", "name": "read_file", "input": {"p": HOSTILE}}],
        )
        store.append(
            cid,
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1\u202e",
                    "content": HOSTILE,
                    "is_error": True,
                }
            ],
        )
        store.checkpoint(cid, HOSTILE, note=HOSTILE)
        store.record_request(cid, tokens_in=1_000, tokens_out=10)
    out = tmp_path / "hostile.html"
    assert run("--db", str(db), "report", cid, "-o", str(out)).code == 0
    page = browser.load(out.as_uri(), LINE_ORDER)
    assert page.errors == [] and not page.value["hidden"]
    assert page.value["scripts"] == page.value["handlers"] == 0
    window, number = page.value["window"], page.value["number"]
    assert window["top"] == number["top"] and window["right"] <= number["left"], page.value


def test_a_request_over_its_window_is_drawn_inside_the_chart(
    browser: Browser, tmp_path: Path
) -> None:
    """The axis ended at the window, so a request over it (250 %) was drawn above the chart."""
    db = tmp_path / "over.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation(context_window=200_000).id
        store.append(cid, "user", "hi")
        for tokens in (100_000, 500_000, 150_000):
            store.record_request(cid, tokens_in=tokens, tokens_out=0)
    out = tmp_path / "over.html"
    assert run("--db", str(db), "report", cid, "-o", str(out)).code == 0
    measured = browser.load(out.as_uri(), MEASURE).value
    assert measured["dots"] == measured["drawn"] == measured["inside"] == 3


DROPPED = """(() => {
  const visible = (el) => {
    const b = el.getBoundingClientRect();
    return b.width > 0 && b.height > 0;
  };
  const m4 = document.getElementById('m4');
  const dropped = [...m4.querySelectorAll('details.dropped')];
  return {
    dropped: dropped.length,
    closed: dropped.filter((d) => !d.open).length,
    bodyShown: m4.innerText.includes('never sent'),
    added: [...m4.querySelectorAll('.block.added')].filter(visible)
      .map((b) => b.textContent),
  };
})()"""


def test_a_result_the_view_dropped_is_folded_and_its_placeholder_shown(
    browser: Browser, tmp_path: Path
) -> None:
    """The first message after a cut showed the hidden call's result as sent; the
    placeholder the model got instead was not on the page."""
    db = tmp_path / "cut.db"
    call = {"type": "tool_use", "name": "read_file", "input": {"path": "a.py"}}
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append_many(
            cid,
            [
                {"role": "user", "content": "task"},
                {"role": "assistant", "content": [{**call, "id": "toolu_0"}]},
                {"role": "user", "content": [_result("toolu_0", "read")]},
                {"role": "assistant", "content": [{**call, "id": "toolu_7"}]},
                {"role": "user", "content": [_result("toolu_7", "never sent")]},
            ],
        )
        store.set_deleted_range(cid, 3)
        store.record_request(cid, tokens_in=10, tokens_out=1)
    out = tmp_path / "cut.html"
    assert run("--db", str(db), "report", cid, "-o", str(out)).code == 0
    page = browser.load(out.as_uri(), DROPPED)
    assert page.errors == []
    assert page.value["dropped"] == page.value["closed"] == 1
    assert not page.value["bodyShown"]
    (added,) = page.value["added"]
    assert "toolu_0" in added and "result missing" in added


def _result(tool_id: str, content: str) -> dict[str, object]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content}


IMAGES = """(() => {
  const images = [...document.querySelectorAll('#conversation img')];
  return {
    images: images.length,
    drawn: images.filter((i) => i.complete && i.naturalWidth === 480).length,
    links: [...document.querySelectorAll('#conversation a')]
      .map((a) => a.getAttribute('href')),
    ids: images.map((i) => i.id),
  };
})()"""


def test_a_screenshot_sent_again_is_embedded_once(browser: Browser, tmp_path: Path) -> None:
    """A screenshot a tool returned 30 times (Cline's browser_action looking at a page that
    did not change) was embedded 30 times, the file growing by its whole size each time;
    it is embedded once and each repeat links to it."""
    from PIL import Image

    picture = Image.effect_noise((480, 320), 60).convert("RGB")
    buffer = io.BytesIO()
    picture.save(buffer, "PNG")
    shot = base64.b64encode(buffer.getvalue()).decode()
    other = Image.new("RGB", (480, 10), (200, 30, 30))
    buffer = io.BytesIO()
    other.save(buffer, "PNG")
    second = base64.b64encode(buffer.getvalue()).decode()
    db = tmp_path / "shots.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "look at the page")
        for n in range(30):
            data = second if n == 29 else shot
            store.append(
                cid,
                "assistant",
                [{"type": "tool_use", "id": f"t{n}", "name": "browser_action", "input": {}}],
            )
            store.append(cid, "user", [_screenshot(f"t{n}", data)])
            store.record_request(cid, tokens_in=1_000 + n, tokens_out=10)
    out = tmp_path / "shots.html"
    assert run("--db", str(db), "report", cid, "-o", str(out)).code == 0
    assert out.stat().st_size < 2 * len(shot) + len(second) + 200_000
    page = browser.load(out.as_uri(), IMAGES)
    assert page.errors == []
    measured = page.value
    assert measured["images"] == measured["drawn"] == 2
    assert measured["links"] == [f"#{measured['ids'][0]}"] * 28


def _screenshot(tool_id: str, data: str) -> dict[str, object]:
    image = {"type": "base64", "media_type": "image/png", "data": data}
    return {
        "type": "tool_result",
        "tool_use_id": tool_id,
        "content": [{"type": "text", "text": "screenshot"}, {"type": "image", "source": image}],
    }


SECRETS_PAGE = """(() => {
  const line = document.querySelector('body > header .secrets');
  const box = line ? line.getBoundingClientRect() : null;
  const rows = [...document.querySelectorAll('table.failed-calls tr')].slice(1);
  return {
    text: document.documentElement.textContent,
    line: line ? line.innerText : null,
    lineDrawn: box !== null && box.width > 0 && box.height > 0,
    calls: rows.map((r) => [...r.cells].map((c) => c.innerText)),
    inputsDrawn: rows.filter((r) => r.cells[3].getBoundingClientRect().height > 0).length,
  };
})()"""


def test_a_page_with_masked_secrets_renders(browser: Browser, tmp_path: Path) -> None:
    """The report of a conversation holding credentials in many places: the page Chromium
    draws holds none of them (entities decoded, folded sections and the chart included),
    says in its header that they are masked, and its failed calls show their inputs."""
    from tests.cli.test_report_secrets import SHOWN, _conversation

    db = tmp_path / "secrets.db"
    cid = _conversation(db)
    out = tmp_path / "secrets.html"
    assert run("--db", str(db), "report", cid, "-o", str(out)).code == 0
    page = browser.load(out.as_uri(), SECRETS_PAGE)
    assert page.errors == []
    assert all(url.startswith(("file:", "data:")) for url in page.requests), page.requests
    measured = page.value
    assert {where for where, secret in SHOWN.items() if secret in measured["text"]} == set()
    assert measured["line"].startswith("Secrets masked") and measured["lineDrawn"]
    assert len(measured["calls"]) == measured["inputsDrawn"] == 4
    login = next(row for row in measured["calls"] if row[1] == "login")
    assert '"password": "[REDACTED:password]"' in login[3]
