"""A real non-Python client: a Node.js agent (built-ins only) runs its whole turn loop
through ``serve --stdio`` and through ``serve --http``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from tests.server.conftest import WAIT_SECONDS, start_http

AGENT = Path(__file__).with_name("agent_loop.mjs")
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(
    NODE is None, reason="node is not installed; the Node.js client needs Node 18+ (fetch)"
)


def _run_agent(*args: str) -> dict[str, Any]:
    assert NODE is not None
    done = subprocess.run(
        [NODE, str(AGENT), *args],
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS * 2,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["checks"] >= 30
    return summary


def _check_stored(db: Path | str, cid: str) -> None:
    """What the Node agent left, read back through the Python API."""
    with ContextStore.open(db) as store:
        messages = store.messages(cid)
        assert [m["role"] for m in messages] == ["user"] + ["assistant", "user"] * 3
        assert [c.label for c in store.checkpoints(cid)] == ["good", "note"]
        requests = store.requests(cid)
        assert [r.tokens_in for r in requests] == [1000, 1001, 1002]
        last = requests[-1]
        assert store.request_payload(cid, last.id)["messages"][0]["role"] == "system"
        store.check(cid)


def test_the_node_agent_over_stdio(tmp_path: Path) -> None:
    db = tmp_path / "node.db"
    command = [sys.executable, "-m", "contextstore", "--db", str(db), "serve", "--stdio"]
    summary = _run_agent("stdio", *command)
    _check_stored(db, summary["conversation_id"])


def test_the_node_agent_over_http(db_location: str, tmp_path: Path) -> None:
    db = db_location
    server = start_http(db, tmp_path / "data")
    try:
        summary = _run_agent("http", server.url, str(server.token_path))
    finally:
        assert server.process.stop() == 0
    _check_stored(db, summary["conversation_id"])
