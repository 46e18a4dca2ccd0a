"""Anthropic's server tool blocks as plain text, for the providers that cannot take them.

OpenAI and Gemini have no block for a tool the provider ran itself, and could not read
Anthropic's encrypted pages and outputs. As the other Anthropic-only blocks are shown to
them as text (a ``search_result`` block, a URL document), each server tool block becomes
one text, in its place in the message: what was called, with its input; what came back
(a search's titles and URLs, a fetched page's URL and plain text, a code execution's return
code, stdout, stderr and output files, an edit's outcome, the tools a tool search found);
an error with its code. Encrypted values (``encrypted_content``, ``encrypted_stdout``) are
never shown: only Anthropic can read them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

ENCRYPTED_OUTPUT = "its output is encrypted; only Anthropic's API can read it"
"""Said in place of a code execution's encrypted standard output."""


def server_block_text(block: Mapping[str, Any]) -> str:
    """The text shown for one server tool block (a call, a result, an upload)."""
    kind = str(block.get("type"))
    if kind == "server_tool_use":
        arguments = json.dumps(block.get("input", {}), ensure_ascii=False, separators=(",", ":"))
        return f"[Server tool call {block.get('name')}: {arguments}]"
    if kind == "container_upload":
        return f"[File uploaded to the code execution container: {block.get('file_id')}]"
    content = block.get("content")
    if not isinstance(content, Mapping) and not isinstance(content, list):
        return f"[{_TITLES.get(kind, kind)}: no content]"
    if isinstance(content, Mapping) and "error_code" in content:
        message = content.get("error_message")
        detail = f": {message}" if isinstance(message, str) and message else ""
        return f"[{_TITLES.get(kind, kind)} error: {content.get('error_code')}{detail}]"
    describe = _DESCRIBE.get(kind)
    return describe(content) if describe is not None else f"[{kind}]"


def _search(content: Any) -> str:
    lines = ["[Web search results]"]
    for number, item in enumerate(content if isinstance(content, list) else [], start=1):
        if not isinstance(item, Mapping):
            continue
        age = f" ({item['page_age']})" if item.get("page_age") else ""
        lines.append(f"{number}. {item.get('title')} <{item.get('url')}>{age}")
    if len(lines) == 1:
        lines.append("(no results)")
    return "\n".join(lines)


def _fetch(content: Any) -> str:
    retrieved = f", retrieved {content['retrieved_at']}" if content.get("retrieved_at") else ""
    head = f"[Web fetch of <{content.get('url')}>{retrieved}]"
    document = content.get("content")
    if not isinstance(document, Mapping):
        return head
    title = document.get("title")
    source = document.get("source")
    lines = [head]
    if isinstance(title, str) and title:
        lines.append(f"Title: {title}")
    if isinstance(source, Mapping) and source.get("type") == "text":
        lines.append(str(source.get("data", "")))
    elif isinstance(source, Mapping):
        lines.append(f"({source.get('media_type') or source.get('type')} document)")
    return "\n".join(lines)


def _execution(title: str) -> Callable[[Any], str]:
    def describe(content: Any) -> str:
        lines = [f"[{title} result: return code {content.get('return_code')}]"]
        if "encrypted_stdout" in content:
            lines.append(f"stdout: ({ENCRYPTED_OUTPUT})")
        elif content.get("stdout"):
            lines.append(f"stdout:\n{str(content['stdout']).rstrip(chr(10))}")
        if content.get("stderr"):
            lines.append(f"stderr:\n{str(content['stderr']).rstrip(chr(10))}")
        files = [
            str(item.get("file_id"))
            for item in content.get("content") or []
            if isinstance(item, Mapping)
        ]
        if files:
            lines.append(f"Files written: {', '.join(files)}")
        return "\n".join(lines)

    return describe


def _editor(content: Any) -> str:
    kind = content.get("type")
    if kind == "text_editor_code_execution_view_result":
        lines = ""
        if content.get("start_line") is not None and content.get("num_lines") is not None:
            last = content["start_line"] + content["num_lines"] - 1
            total = content.get("total_lines")
            lines = f", lines {content['start_line']}-{last}" + (f" of {total}" if total else "")
        return f"[Text editor view ({content.get('file_type')}{lines})]\n{content.get('content')}"
    if kind == "text_editor_code_execution_create_result":
        return (
            "[Text editor: file updated]"
            if content.get("is_file_update")
            else ("[Text editor: file created]")
        )
    changed = content.get("lines") or []
    where = f" at line {content['new_start']}" if content.get("new_start") is not None else ""
    return "\n".join([f"[Text editor: text replaced{where}]", *map(str, changed)])


def _tool_search(content: Any) -> str:
    names = [
        str(item.get("tool_name"))
        for item in content.get("tool_references") or []
        if isinstance(item, Mapping)
    ]
    return f"[Tool search found: {', '.join(names) if names else 'no tools'}]"


_TITLES = {
    "web_search_tool_result": "Web search",
    "web_fetch_tool_result": "Web fetch",
    "code_execution_tool_result": "Code execution",
    "bash_code_execution_tool_result": "Bash",
    "text_editor_code_execution_tool_result": "Text editor",
    "tool_search_tool_result": "Tool search",
}

_DESCRIBE: dict[str, Callable[[Any], str]] = {
    "web_search_tool_result": _search,
    "web_fetch_tool_result": _fetch,
    "code_execution_tool_result": _execution("Code execution"),
    "bash_code_execution_tool_result": _execution("Bash"),
    "text_editor_code_execution_tool_result": _editor,
    "tool_search_tool_result": _tool_search,
}
