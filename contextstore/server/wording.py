"""Library error messages in the terms of the JSON-RPC methods and of the MCP tools.

The library speaks to Python callers (``ContextStore.list_conversations()``,
``prepare_request(system=...)``); a JSON-RPC client reads method and param names, and a
model calling the MCP tools reads tool names (it has no ``prepare_request``). Each rule
rewrites one library phrase, as the command line's own rules do
(:mod:`contextstore.cli.wording`); a test triggers every rule through a real client, so a
reworded library message shows up as a failing test rather than as a Python term on the
wire. A JSON-RPC message also names the type of a refused value as the JSON it was sent as
(``got null``, not ``got NoneType``).
"""

from __future__ import annotations

import ast
import json
import re

RPC_RULES: tuple[tuple[str, str], ...] = (
    (
        r"list them with ContextStore\.list_conversations\(\) or 'contextstore conversations'",
        "list them with the list_conversations method",
    ),
    (
        r"pass a system prompt to prepare_request\(system=\.\.\.\)",
        "pass a system prompt as prepare_request's system param",
    ),
    (r"store None or a string instead", "send null or a string instead"),
    (
        r"open the store with read_only=True \(--read-only on the command line\)",
        "start the server with --read-only",
    ),
    # The server's store is opened once, from the command line that started it.
    (r"open it without read_only=True to write", "start the server without --read-only to write"),
    # A PostgreSQL role refused a write (a role that may only read, served without the flag).
    (
        r"A role meant only to read opens the store with read_only=True \(--read-only on the "
        r"command line\)",
        "A server for a role meant only to read is started with --read-only",
    ),
    # The check method runs the same checks as the command line's check.
    (r"'contextstore check' shows where", "the check method shows where"),
    (r"Run 'contextstore check'", "Call the check method"),
    (r"run 'contextstore check'", "call the check method"),
    # A client cannot reopen the server's store with another limit.
    (
        r"split it, store large files outside the conversation, or open the store with a "
        r"larger max_message_bytes",
        "split it, or store large files outside the conversation",
    ),
    (r" \(ContextStore\.recover\)", ""),
    # The audit method answers with the conversation's rollbacks.
    (
        r"the audit_rollbacks view lists them, as does 'contextstore audit .*'\.$",
        "the audit method lists them (its rollbacks).",
    ),
    (r"(system\[\d+\]) is None, not a text block", r'\1 has no "type": "text"'),
    (
        r"tools must be a list of tool definitions like \{'name': \.\.\., 'description': "
        r"\.\.\., 'input_schema': \{\.\.\.\}\}",
        'tools must be an array of tool definitions, each an object with a string "name", '
        'like {"name": ..., "description": ..., "input_schema": {...}}',
    ),
    (r"system is an empty list", "system is an empty array"),
    (r"must be an object \(a dict with string keys\)", "must be an object"),
    (r"\{'type': 'text', 'text': '\.\.\.'\}", '{"type": "text", "text": "..."}'),
    # The pure functions, served beside the store's methods.
    (
        r"pass None to compact at the maximum allowed size",
        "send null (or leave threshold out) to compact at the maximum allowed size",
    ),
    (
        r"a deleted range is a \(start, end\) pair of ints",
        "a deleted range is an array of two integers, [start, end]",
    ),
)
"""``(library phrase as a regular expression, JSON-RPC phrase)`` pairs, applied in order."""

JSON_TYPE_NAMES = {
    "NoneType": "null",
    "bool": "a boolean",
    "int": "a number",
    "float": "a number",
    "str": "a string",
    "list": "an array",
    "tuple": "an array",
    "dict": "an object",
}
"""The JSON a client sent, for each Python type a library message names (``got NoneType``)."""

PYTHON_TYPE = re.compile(rf"\bgot ({'|'.join(JSON_TYPE_NAMES)})(?=[.;,])")
"""A library message's ``got <type name>`` (``system[0].text must be a string, got int.``)."""

MCP_RULES: tuple[tuple[str, str], ...] = (
    (
        r"list them with ContextStore\.list_conversations\(\) or 'contextstore conversations'",
        "list them with the list_conversations tool",
    ),
    (
        r"use the request_id returned by prepare_request",
        "audit_conversation lists its requests with their ids",
    ),
    (
        r"only requests from prepare_request can be rebuilt",
        "only requests prepared through contextstore can be rebuilt",
    ),
    (r" \(ContextStore\.recover\)", ""),
)
"""``(library phrase as a regular expression, MCP phrase)`` pairs, applied in order."""


def _reworded(message: str, rules: tuple[tuple[str, str], ...]) -> str:
    for pattern, replacement in rules:
        message = re.sub(pattern, replacement, message)
    return message


PYTHON_ARGUMENT = re.compile(
    r"(?<![\w'\"])(to|at|mode)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+)(?=[\s,.;)]|$)"
)
"""A parameter the library shows as a Python keyword argument (``to='cp'``, ``at=3``,
``mode='block'``): a client sends it as a member of params (``"to": "cp"``)."""


def _json_argument(match: re.Match[str]) -> str:
    return f'"{match[1]}": {json.dumps(ast.literal_eval(match[2]), ensure_ascii=False)}'


def rpc_wording(message: str) -> str:
    """``message`` with library phrases replaced by their JSON-RPC equivalents, the Python
    type of a refused value by the JSON it was sent as (``got null``), values the
    library shows as Python (``got None``, ``{'type': 'ephemeral'}``, ``['T2']``) as JSON,
    and a parameter shown as a keyword argument (``to='cp'``) as the member of params
    that sends it (``"to": "cp"``)."""
    message = _reworded(message, RPC_RULES)
    message = PYTHON_TYPE.sub(lambda match: f"got {JSON_TYPE_NAMES[match[1]]}", message)
    message = PYTHON_CONSTANT.sub(lambda match: f"{match[1]} {JSON_CONSTANTS[match[2]]}", message)
    message = PYTHON_ARGUMENT.sub(_json_argument, message)
    return _json_containers(message)


JSON_CONSTANTS = {"None": "null", "True": "true", "False": "false"}
"""The JSON a client reads for each Python constant a library message shows."""

PYTHON_CONSTANT = re.compile(r"\b(got|or|is|be|type|role) (None|True|False)(?=[.;,) ]|$)")
"""A Python constant the library shows as a value (``got None.``, ``or None,``, ``role
None is``), not one inside a quoted text."""


def _json_containers(message: str) -> str:
    """``message`` with each list or dict the library shows as Python (single quotes,
    ``None``) written as JSON; text that does not read as a Python literal is kept."""
    parts = []
    position = 0
    while (start := _next_container(message, position)) is not None:
        end = _container_end(message, start)
        if end is None:
            break
        try:
            value = ast.literal_eval(message[start:end])
            shown = json.dumps(value, ensure_ascii=False)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            parts.append(message[position : start + 1])
            position = start + 1
            continue
        parts.append(message[position:start] + shown)
        position = end
    return "".join(parts) + message[position:]


_CONTAINER_START = re.compile(r"[\[{]")


def _next_container(message: str, position: int) -> int | None:
    found = _CONTAINER_START.search(message, position)
    return None if found is None else found.start()


def _container_end(message: str, start: int) -> int | None:
    """Where the bracketed text that opens at ``start`` closes (quoted text skipped), or
    None when it does not."""
    depth = 0
    quote = ""
    index = start
    while index < len(message):
        char = message[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return None


def mcp_wording(message: str) -> str:
    """``message`` with library phrases replaced by their MCP tool equivalents."""
    return _reworded(message, MCP_RULES)
