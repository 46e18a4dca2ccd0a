"""The HTML report masks the secrets the store keeps from the model, in every text it shows
(``--show-secrets`` shows the originals), and its failed tool calls show what was called."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contextstore import ContextStore
from tests.cli.conftest import run

GITHUB = "ghp_" + "Q7r8A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
URL_PASSWORD = "hunter2secret"
PEM_BODY = "MIIEowIBAAKCAQEAx9Zb3kRtV8pQ2nW7yT4uLmKc9Qe1Rf6Hj3Gk8Ls5Dp0Nz2Xw"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
AWS = "AKIAZ7Q3LMN4PQR5STU6"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
OPENAI = "sk-proj-" + "Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Ji"
ANTHROPIC = "sk-ant-api03-" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
GITLAB = "glpat-" + "xY9zW8vU7tS6rQ5pO4nM"
PASSWORD = "Tr0ub4dor-3x-correct"
CUT_TOKEN = "ghp_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8"
LATE_TOKEN = "ghp_" + "Mm1Nn2Bb3Vv4Cc5Xx6Zz7Ll8Kk9Jj0Hh1Gg2"

SHOWN = {
    "url password (visible message)": URL_PASSWORD,
    "github token (title, visible message)": GITHUB,
    "private key (failed result)": PEM_BODY,
    "slack token (thinking)": SLACK,
    "aws key (hidden message)": AWS,
    "stripe key (not-sent tool result)": STRIPE,
    "openai key (request failure)": OPENAI,
    "anthropic key (checkpoint note)": ANTHROPIC,
    "gitlab token (tool result's second item)": GITLAB,
    "password (tool call input)": PASSWORD,
    "token cut by the audit's 300 characters": CUT_TOKEN[:16],
    "token cut, after the last request": LATE_TOKEN[:16],
}
"""Each secret, and where the conversation below holds it; the page shows every place."""


def _call(tool_id: str, name: str, arguments: dict[str, object]) -> dict[str, object]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}


def _error(tool_id: str, content: object) -> dict[str, object]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, "is_error": True}


def _conversation(db: Path) -> str:
    """A conversation holding the secrets of :data:`SHOWN` in the places they name: a
    hidden range, a result the view leaves out, a thinking block, a failed call's input and
    result (one whose token the audit's 300 characters cut), a checkpoint, a request's
    failure, the title, and a failed call after the last request."""
    filler = "x" * 280 + " "
    with ContextStore.open(db) as store:
        cid = store.create_conversation(
            model_id="claude-sonnet-4-5", context_window=200_000, title=f"deploy with {GITHUB}"
        ).id
        store.append_many(
            cid,
            [
                {"role": "user", "content": "set up the deployment"},
                {"role": "assistant", "content": "on it"},
                {"role": "user", "content": f"the old key was {AWS}"},
                {"role": "assistant", "content": [_call("t_old", "read_file", {"path": "a"})]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t_old", "content": STRIPE},
                        {"type": "text", "text": f"use postgres://u:{URL_PASSWORD}@h/db"},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": f"slack {SLACK}", "signature": "c2ln"},
                        _call("t1", "login", {"user": "ops", "password": PASSWORD, "t": GITHUB}),
                        _call("t2", "install_key", {"path": "id_rsa"}),
                        _call("t3", "browse", {"url": "https://example.com"}),
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        _error("t1", "login refused"),
                        _error("t2", f"bad key:\n{PEM}"),
                        _error(
                            "t3",
                            [
                                {"type": "text", "text": f"{filler}{CUT_TOKEN} expired"},
                                {"type": "text", "text": f"mirror token {GITLAB}"},
                            ],
                        ),
                    ],
                },
            ],
        )
        store.set_deleted_range(cid, 3, reason="hide the old turns")
        store.checkpoint(cid, "before-retry", note=f"retry with {ANTHROPIC}")
        prepared = store.prepare_request(cid, model="claude-sonnet-4-5", max_tokens=100)
        store.record_request(cid, request_id=prepared.request_id, tokens_in=900, tokens_out=10)
        store.record_request(cid, tokens_in=950, tokens_out=10, failure=f"bad key {OPENAI}")
        store.append(cid, "assistant", [_call("t9", "fetch", {"url": "https://example.org"})])
        store.append(cid, "user", [_error("t9", f"{filler}{LATE_TOKEN} revoked")])
    return cid


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("secrets") / "s.db"
    return db, _conversation(db)


def _page(stored: tuple[Path, str], *flags: str) -> bytes:
    db, cid = stored
    out = db.with_name(f"report{len(flags)}.html")
    made = run("--db", str(db), "report", cid, "-o", str(out), *flags)
    assert made.code == 0, made.err
    return out.read_bytes()


@pytest.fixture(scope="module")
def masked(stored: tuple[Path, str]) -> bytes:
    return _page(stored)


@pytest.fixture(scope="module")
def shown(stored: tuple[Path, str]) -> bytes:
    return _page(stored, "--show-secrets")


def test_the_report_carries_no_secret_by_default(masked: bytes) -> None:
    """The page showed each stored original beside the masked block the model was shown
    (``hunter2secret`` beside ``[REDACTED:url_password]``), and the hidden messages, the
    results not sent, the thinking, the tool inputs, the title, the checkpoints' notes and
    the requests' failures unmasked: a file mailed to an auditor carried the credentials."""
    leaked = {where: s for where, s in SHOWN.items() if s.encode() in masked}
    assert leaked == {}
    for kind in ("github_token", "url_password", "private_key", "password", "slack_token"):
        assert f"[REDACTED:{kind}]".encode() in masked
    assert b"Secrets masked" in masked and b"NOT masked" not in masked


def test_show_secrets_shows_the_originals(shown: bytes) -> None:
    missing = {where: s for where, s in SHOWN.items() if s.encode() not in shown}
    assert missing == {}
    assert b"Secrets NOT masked" in shown


def test_the_masked_secrets_table_stays(masked: bytes, shown: bytes) -> None:
    for page in (masked, shown):
        section = page.split(b"<h3>Masked secrets</h3>")[1].split(b"<h3>")[0]
        assert b"<th>kind</th><th>masked by</th><th>count</th>" in section
        assert b"<tr><td>url_password</td>" in section


def _failed_rows(page: bytes) -> list[list[str]]:
    text = page.decode("utf-8")
    section = text.split("<h3>Failed tool calls</h3>")[1].split("<h3>")[0]
    return [
        re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, flags=re.S)
        for row in section.split("<tr>")[1:]
    ]


def test_a_failed_call_shows_what_was_called(masked: bytes, shown: bytes) -> None:
    """The failed calls' table gave the message, the tool and the error: which call failed,
    with what input, was not on the page."""
    rows = _failed_rows(masked)
    assert rows[0] == ["message", "tool", "call", "input", "error"]
    by_tool = {row[1]: row for row in rows[1:]}
    assert set(by_tool) == {"login", "install_key", "browse", "fetch"}
    login = by_tool["login"]
    assert login[0] == "6" and login[2] == "#5 (<bdi>t1</bdi>)"
    assert "&quot;user&quot;: &quot;ops&quot;" in login[3]
    assert "[REDACTED:password]" in login[3] and "[REDACTED:github_token]" in login[3]
    assert "login refused" in login[4]
    assert "id_rsa" in by_tool["install_key"][3]
    assert "[REDACTED:private_key]" in by_tool["install_key"][4]
    assert "[REDACTED:github_token]" in by_tool["browse"][4]
    assert "[REDACTED:github_token]" in by_tool["fetch"][4]
    shown_login = {row[1]: row for row in _failed_rows(shown)[1:]}["login"]
    assert PASSWORD in shown_login[3]


def test_a_long_failed_input_is_cut(tmp_path: Path) -> None:
    db = tmp_path / "long.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "write it")
        store.append(cid, "assistant", [_call("w", "write_to_file", {"content": "y" * 5_000})])
        store.append(cid, "user", [_error("w", "disk full")])
    out = tmp_path / "long.html"
    assert run("--db", str(db), "report", cid, "-o", str(out)).code == 0
    (row,) = _failed_rows(out.read_bytes())[1:]
    assert "y" * 900 in row[3] and "y" * 1_000 not in row[3]
    assert "more characters in the database" in row[3]
