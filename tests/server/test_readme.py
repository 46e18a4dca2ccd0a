"""The README's "Use it from any language" section is tested like code: its Node snippets run
against real servers, its method and tool lists are complete, its settings parse."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.core import errors
from contextstore.server.methods import METHODS
from tests.server.conftest import WAIT_SECONDS, start_http

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
SECTION = README.split("## Use it from any language", 1)[1].split("\n## ", 1)[0]
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", SECTION, flags=re.S)


def test_the_section_follows_the_library_section() -> None:
    headings = re.findall(r"^## (.+)$", README, flags=re.M)
    assert headings[headings.index("Library") + 1] == "Use it from any language"


def test_it_lists_every_method_and_every_tool() -> None:
    listed = set(re.findall(r"`([a-z_]+)`", SECTION))
    assert set(METHODS) <= listed
    from contextstore.server.mcp_server import READ_TOOLS, WRITE_TOOLS

    assert {f"{t}(" for t in (*READ_TOOLS, *WRITE_TOOLS)} <= {
        m + "(" for m in re.findall(r"\| `([a-z_]+)\(", SECTION)
    }


def test_the_error_classes_it_names_exist() -> None:
    named = set(re.findall(r"`([A-Za-z]+Error)`", SECTION))
    assert named and all(hasattr(errors, n) or n == "InvalidParamsError" for n in named)


def test_the_mcp_settings_parse_and_name_the_command() -> None:
    from contextstore.server.mcp_server import READ_TOOLS

    settings = [json.loads(block) for block in _blocks("json")]
    assert len(settings) == 2
    for setting in settings:
        entry = setting["mcpServers"]["contextstore"]
        assert entry["command"] == "contextstore" and entry["args"][-1] == "mcp"
    assert set(settings[0]["mcpServers"]["contextstore"]["autoApprove"]) <= set(READ_TOOLS)


def _node_env(home: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # where the contextstore script is installed
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_DATA_HOME", "CONTEXTSTORE_DB")}
    env.update(HOME=str(home), PATH=bin_dir + os.pathsep + env.get("PATH", ""))
    return env


def _run_node(code: str, tmp_path: Path, env: dict[str, str]) -> str:
    assert NODE is not None
    script = tmp_path / "snippet.mjs"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [NODE, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=WAIT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@needs_node
def test_the_stdio_snippet_runs(tmp_path: Path) -> None:
    stdio_snippet = _blocks("js")[0]
    env = _node_env(tmp_path)
    env["CONTEXTSTORE_DB"] = str(tmp_path / "snippet.db")
    out = _run_node(stdio_snippet, tmp_path, env)
    assert "fix the CSV header" in out
    with ContextStore.open(tmp_path / "snippet.db") as store:
        (conv,) = store.list_conversations()
        assert store.requests(conv.id)[0].tokens_in == 1200


@needs_node
def test_the_stdio_snippet_survives_a_line_the_server_could_not_read(tmp_path: Path) -> None:
    """A message over the server's line limit is answered with a null id (it was skipped
    unread); the snippet looked that id up among its calls, found nothing, and died on a
    TypeError, leaving the call unanswered. Answers come in the order of the requests, so
    a null id answers the oldest call waiting."""
    over_the_limit = (
        "let refused;\n"
        "try {\n"
        '  await call("append", { conversation_id: conv.id, role: "user",'
        ' content: "x".repeat(2 ** 25 + 2 ** 21) });\n'
        "} catch (error) { refused = error; }\n"
        'console.log("refused", refused.code, refused.message.includes("skipped unread"));\n'
        'console.log("then", await call("message_count", { conversation_id: conv.id }));\n'
    )
    end = "server.stdin.end();"
    snippet = _blocks("js")[0].replace(end, over_the_limit + end)
    env = _node_env(tmp_path)
    env["CONTEXTSTORE_DB"] = str(tmp_path / "snippet.db")
    out = _run_node(snippet, tmp_path, env)
    assert "refused -32600 true" in out and "then 1" in out


@needs_node
def test_the_http_snippet_runs(tmp_path: Path) -> None:
    http_snippet = _blocks("js")[1]
    data_home = tmp_path / ".local" / "share"  # where the snippet looks, under HOME
    server = start_http(tmp_path / "http.db", data_home)
    try:
        code = http_snippet.replace("127.0.0.1:8765", f"127.0.0.1:{server.port}")
        _run_node(code, tmp_path, _node_env(tmp_path))
    finally:
        server.process.stop()
    with ContextStore.open(tmp_path / "http.db") as store:
        assert [c.title for c in store.list_conversations()] == ["from another window"]
