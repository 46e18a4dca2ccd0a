"""The report's conversation is what the last request sent, by the view rules that request
was prepared with: a request prepared by older rules was shown by the current ones, which
send something else (a placeholder it sent was missing from the page)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.core import view as view_rules
from contextstore.facade import requests as requests_facade
from contextstore.processors import runner
from tests.cli.conftest import run
from tests.conftest import assistant, tool_use, user

CLINE_TEXT_RESULT = "[read_file for 'a.py'] Result:\nprint('hi')"


def _cline_task(store: ContextStore) -> str:
    """A call answered the way Cline 3.5x stores it: a user text block, no tool_result
    (rules 2 and later send the text as the call's result; rules 1 sent a placeholder)."""
    cid = store.create_conversation().id
    store.append(
        cid,
        [
            user("<task>read a.py</task>"),
            assistant("Reading.", tool_use("toolu_1", "read_file", path="a.py")),
            user(CLINE_TEXT_RESULT),
        ],
    )
    return cid


def _message(page: str, index: int) -> str:
    start = page.index(f'id="m{index}"')
    end = page.find('id="m', start + 1)
    return page[start : end if end > 0 else page.index('<section id="audit"')]


def test_a_request_prepared_by_older_rules_is_shown_as_it_was_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "old.db"
    with ContextStore.open(db) as store:
        cid = _cline_task(store)
        with monkeypatch.context() as patched:
            patched.setattr(requests_facade, "VIEW_RULES", 1)
            patched.setattr(runner, "finish_view", partial(view_rules.finish_view, rules=1))
            old = store.prepare_request(cid)
        assert old.request_id is not None
        sent = old.payload["messages"][2]["content"]
        assert [b.get("content") for b in sent if b["type"] == "tool_result"] == ["result missing"]
    out = tmp_path / "r.html"
    assert run("--db", str(db), "report", cid, "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    article = _message(page, 2)
    assert "1 added by the view" in article and "result missing" in article
    assert f"By the view rules request {old.request_id} was prepared with" in page
    assert f"contextstore request {cid} {old.request_id} --payload" in page


def test_a_recorded_request_is_shown_by_this_versions_rules_and_says_so(tmp_path: Path) -> None:
    db = tmp_path / "recorded.db"
    with ContextStore.open(db) as store:
        cid = _cline_task(store)
        recorded = store.record_request(cid, tokens_in=10, tokens_out=1)
    out = tmp_path / "r.html"
    assert run("--db", str(db), "report", cid, "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    assert "added by the view" not in _message(page, 2)
    assert (
        f"Request {recorded.id} was recorded, not prepared here: the messages are shown by "
        "this version's view rules"
    ) in page
