"""Factories of Anthropic server tool blocks, one sample of every shape the SDK's
``*BlockParam`` types describe (checked against them in tests/core/test_server_blocks.py)."""

from __future__ import annotations

from typing import Any

ENCRYPTED = "EqQBCkYIBxgCKkBopaque+/=="
"""A stand-in for an opaque ``encrypted_*`` value the API reads back."""


def search_use(use_id: str = "srvtoolu_01", query: str = "sqlite wal") -> dict[str, Any]:
    """A ``web_search`` call."""
    return {
        "type": "server_tool_use",
        "id": use_id,
        "name": "web_search",
        "input": {"query": query},
    }


def search_result(use_id: str = "srvtoolu_01") -> dict[str, Any]:
    """Two pages a web search found."""
    return {
        "type": "web_search_tool_result",
        "tool_use_id": use_id,
        "content": [
            {
                "type": "web_search_result",
                "url": "https://sqlite.org/wal.html",
                "title": "Write-Ahead Logging",
                "encrypted_content": ENCRYPTED,
                "page_age": "April 2, 2025",
            },
            {
                "type": "web_search_result",
                "url": "https://example.org/wal",
                "title": "WAL explained",
                "encrypted_content": ENCRYPTED,
                "page_age": None,
            },
        ],
    }


def fetch_use(use_id: str = "srvtoolu_02") -> dict[str, Any]:
    """A ``web_fetch`` call."""
    return {
        "type": "server_tool_use",
        "id": use_id,
        "name": "web_fetch",
        "input": {"url": "https://sqlite.org/wal.html"},
    }


def fetch_result(use_id: str = "srvtoolu_02") -> dict[str, Any]:
    """A page a web fetch returned, as a plain-text document."""
    return {
        "type": "web_fetch_tool_result",
        "tool_use_id": use_id,
        "content": {
            "type": "web_fetch_result",
            "url": "https://sqlite.org/wal.html",
            "retrieved_at": "2026-12-05T03:00:00Z",
            "content": {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "WAL mode..."},
                "title": "Write-Ahead Logging",
                "citations": {"enabled": True},
            },
        },
    }


def code_use(use_id: str = "srvtoolu_03", name: str = "code_execution") -> dict[str, Any]:
    """A code execution call (``code_execution``, ``bash_code_execution``...)."""
    return {"type": "server_tool_use", "id": use_id, "name": name, "input": {"code": "print(1)"}}


def code_result(use_id: str = "srvtoolu_03") -> dict[str, Any]:
    """What Python code printed."""
    return {
        "type": "code_execution_tool_result",
        "tool_use_id": use_id,
        "content": {
            "type": "code_execution_result",
            "stdout": "1\n",
            "stderr": "",
            "return_code": 0,
            "content": [{"type": "code_execution_output", "file_id": "file_011"}],
        },
    }


def encrypted_code_result(use_id: str = "srvtoolu_03") -> dict[str, Any]:
    """A code execution whose standard output is encrypted."""
    return {
        "type": "code_execution_tool_result",
        "tool_use_id": use_id,
        "content": {
            "type": "encrypted_code_execution_result",
            "encrypted_stdout": ENCRYPTED,
            "stderr": "warning: x",
            "return_code": 0,
            "content": [],
        },
    }


def bash_result(use_id: str = "srvtoolu_04") -> dict[str, Any]:
    """A shell command that failed."""
    return {
        "type": "bash_code_execution_tool_result",
        "tool_use_id": use_id,
        "content": {
            "type": "bash_code_execution_result",
            "stdout": "",
            "stderr": "ls: cannot access 'x': No such file or directory",
            "return_code": 2,
            "content": [],
        },
    }


def editor_result(use_id: str = "srvtoolu_05") -> dict[str, Any]:
    """A file the code execution's editor showed."""
    return {
        "type": "text_editor_code_execution_tool_result",
        "tool_use_id": use_id,
        "content": {
            "type": "text_editor_code_execution_view_result",
            "content": "line one\nline two",
            "file_type": "text",
            "num_lines": 2,
            "start_line": 1,
            "total_lines": 2,
        },
    }


def tool_search_use(use_id: str = "srvtoolu_06") -> dict[str, Any]:
    """A regex tool search."""
    return {
        "type": "server_tool_use",
        "id": use_id,
        "name": "tool_search_tool_regex",
        "input": {"pattern": "weather"},
    }


def tool_search_result(use_id: str = "srvtoolu_06") -> dict[str, Any]:
    """The tools a tool search found."""
    return {
        "type": "tool_search_tool_result",
        "tool_use_id": use_id,
        "content": {
            "type": "tool_search_tool_search_result",
            "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}],
        },
    }


def error_result(kind: str, use_id: str, code: str = "unavailable") -> dict[str, Any]:
    """A server tool result of type ``kind`` holding its error."""
    inner = {
        "web_search_tool_result": "web_search_tool_result_error",
        "web_fetch_tool_result": "web_fetch_tool_result_error",
        "code_execution_tool_result": "code_execution_tool_result_error",
        "bash_code_execution_tool_result": "bash_code_execution_tool_result_error",
        "text_editor_code_execution_tool_result": "text_editor_code_execution_tool_result_error",
        "tool_search_tool_result": "tool_search_tool_result_error",
    }[kind]
    return {"type": kind, "tool_use_id": use_id, "content": {"type": inner, "error_code": code}}


def container_upload(file_id: str = "file_0123") -> dict[str, Any]:
    """A file put in the code execution container."""
    return {"type": "container_upload", "file_id": file_id}


def every_pair() -> list[dict[str, Any]]:
    """One assistant message's blocks: a call of every server tool, each followed by its
    result, then a text citing a page."""
    return [
        search_use(),
        search_result(),
        fetch_use(),
        fetch_result(),
        code_use(),
        code_result(),
        code_use("srvtoolu_04", "bash_code_execution"),
        bash_result(),
        code_use("srvtoolu_05", "text_editor_code_execution"),
        editor_result(),
        tool_search_use(),
        tool_search_result(),
        code_use("srvtoolu_07"),
        encrypted_code_result("srvtoolu_07"),
        {
            "type": "text",
            "text": "SQLite's WAL mode lets readers run beside a writer.",
            "citations": [
                {
                    "type": "web_search_result_location",
                    "url": "https://sqlite.org/wal.html",
                    "title": "Write-Ahead Logging",
                    "encrypted_index": ENCRYPTED,
                    "cited_text": "readers do not block writers",
                }
            ],
        },
    ]
