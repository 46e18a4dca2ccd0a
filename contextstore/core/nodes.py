"""Typed nodes: what each stored block is, in the terms of Gemini CLI's context graph.

Every block of a conversation is a node, addressed by ``(conversation_id, message_idx,
block_idx)`` (also spelled ``"m12.b0"``, :func:`node_id`). Its type is decided once, at
append or import, from the provider block type, the message's role, the tool call it answers
(name and input) and a bounded prefix of its text (:data:`PREFIX_CHARS`), so typing a 1 MB
tool output costs the same as typing a short one. System prompts and tool definitions of
prepared requests are nodes too (:data:`SYSTEM_PROMPT`, :data:`TOOL_DEFINITIONS`), stored
once per content hash.

File contents carry the file's path, and its line range when the call or the result says
which lines were read:
- Cline's text results ``[read_file for 'path'] Result:`` (and ``write_to_file`` /
  ``replace_in_file`` results holding ``<final_file_content path=...>``);
- tool calls named ``read_file`` (Cline, Gemini CLI: ``path``, ``file_path`` or
  ``absolute_path``; Gemini CLI's ``offset`` / ``limit`` are 0-based), ``read_many_files``
  (the path when exactly one is named) and Claude Code's ``Read`` (1-based ``offset``),
  answered by a ``tool_result``;
- Gemini CLI's truncated read notice ``Showing lines A-B of N total lines``;
- ``<file_content path="...">`` mentions in user text (Cline's @-mentions).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from contextstore.core.content import NormalizedMessage
from contextstore.core.errors import NodeInvariantError
from contextstore.core.notices import SUMMARY_HEADING, TRUNCATION_NOTICE
from contextstore.core.server_tools import SERVER_BLOCK_TYPES
from contextstore.core.system_prompt import system_text
from contextstore.core.tokens import MESSAGE_OVERHEAD_TOKENS, TokenCounter, block_tokens
from contextstore.core.validate import MAX_INT32, canonical_json

SYSTEM_PROMPT: Final = "system_prompt"
USER_PROMPT: Final = "user_prompt"
ASSISTANT_TEXT: Final = "assistant_text"
THINKING: Final = "thinking"
TOOL_CALL: Final = "tool_call"
TOOL_OUTPUT: Final = "tool_output"
FILE_CONTENT: Final = "file_content"
IMAGE: Final = "image"
DOCUMENT: Final = "document"
MEMORY_SUMMARY: Final = "memory_summary"
SERVER_TOOL: Final = "server_tool"
"""An Anthropic server tool block (a ``server_tool_use``, its result, a
``container_upload``): what the API ran and returned, sent back verbatim; no processor
rewrites it (its results hold encrypted data the API reads back)."""
TOOL_DEFINITIONS: Final = "tool_definitions"
"""A request's tool declarations (a prompt-side node, not a block)."""

BLOCK_NODE_TYPES: Final = (
    USER_PROMPT,
    ASSISTANT_TEXT,
    THINKING,
    TOOL_CALL,
    TOOL_OUTPUT,
    FILE_CONTENT,
    IMAGE,
    DOCUMENT,
    MEMORY_SUMMARY,
    SERVER_TOOL,
)
"""The types a stored block can have."""

NODE_TYPES: Final = (SYSTEM_PROMPT, *BLOCK_NODE_TYPES, TOOL_DEFINITIONS)
"""Every node type, blocks' and requests'."""

PREFIX_CHARS: Final = 2_048
"""How much of a text typing looks at: headers and markers sit at the start."""

READ_TOOLS: Final = frozenset({"read_file", "read_many_files", "Read", "view"})
"""Tool names whose results are file contents."""
WRITE_TOOLS: Final = frozenset({"write_to_file", "replace_in_file"})
"""Cline's write tools: their results hold the file's final content."""
SUMMARY_TOOLS: Final = frozenset({"summarize_task", "condense"})
"""Tool names whose results are summaries (Cline's auto-condense)."""
_PATH_KEYS: Final = ("path", "file_path", "absolute_path", "filePath", "target_file")

_HEADER_RE: Final = re.compile(r"\[([^\s\]]+)(?: for '([^\n]*?)')?\] Result:")
_MENTION_RE: Final = re.compile(r'<file_content path="([^"]*)">')
_FINAL_CONTENT_RE: Final = re.compile(r'<final_file_content path="([^"]*)">')
_SHOWING_LINES_RE: Final = re.compile(r"Showing lines (\d+)-(\d+) of \d+ total lines")
_SUMMARY_PREFIXES: Final = (
    TRUNCATION_NOTICE[:60],
    SUMMARY_HEADING,
    "[summary of ",
    "<state_snapshot>",
    "This session is being continued from a previous conversation",
)
_SNAPSHOT_KEYS: Final = (
    '"active_tasks"',
    '"discovered_facts"',
    '"constraints_and_preferences"',
    '"recent_arc"',
)


@dataclass(frozen=True, slots=True)
class NodeKind:
    """A block's node type, and the file it shows when known (lines are 1-based,
    inclusive)."""

    node_type: str
    path: str | None = None
    line_start: int | None = None
    line_end: int | None = None


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What typing needs from a tool call to type its result: its name and file."""

    name: str | None
    path: str | None = None
    line_start: int | None = None
    line_end: int | None = None


def node_id(message_idx: int, block_idx: int) -> str:
    """The stable id of the node at ``(message_idx, block_idx)``: ``"m12.b0"``."""
    return f"m{message_idx}.b{block_idx}"


_NODE_ID = re.compile(r"m(0|[1-9][0-9]{0,9})\.b(0|[1-9][0-9]{0,9})")


def node_address(text: str) -> tuple[int, int] | None:
    """The ``(message_idx, block_idx)`` a :func:`node_id` names, or None when ``text`` is
    not one (``"m012.b0"`` and ``"m12.b0 "`` are not)."""
    found = _NODE_ID.fullmatch(text)
    return None if found is None else (int(found.group(1)), int(found.group(2)))


def _int(value: Any) -> int | None:
    """A line argument as a number: an int, or a string of ASCII digits ("²" is a digit to
    :meth:`str.isdigit`, not to :func:`int`), within what a line column holds."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and -MAX_INT32 <= value <= MAX_INT32:
        return value
    return None


def _line(value: int | None) -> int | None:
    """``value`` if it is a line number a line column holds (a sum of two may not be)."""
    return value if value is not None and 1 <= value <= MAX_INT32 else None


_LINE_KEYS: Final = frozenset({"start_line", "end_line", "offset", "limit"})


def _lines(name: str, arguments: Mapping[str, Any]) -> tuple[int | None, int | None]:
    start, end = _line_range(name, arguments)
    return _line(start), _line(end)


def _line_range(name: str, arguments: Mapping[str, Any]) -> tuple[int | None, int | None]:
    if _LINE_KEYS.isdisjoint(arguments):
        return None, None
    start = _int(arguments.get("start_line"))
    end = _int(arguments.get("end_line"))
    if start is not None and start >= 1:
        return start, end if end is not None and end >= start else None
    offset, limit = _int(arguments.get("offset")), _int(arguments.get("limit"))
    if offset is None and limit is None:
        return None, None
    # Gemini CLI counts offset from 0; Claude Code's Read counts from line 1.
    first = max(1, (offset or 0) + 1 if name != "Read" else offset or 1)
    if limit is None or limit < 1:
        return first, None
    return first, first + limit - 1


def _path(arguments: Mapping[str, Any]) -> str | None:
    for key in _PATH_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return value
    paths = arguments.get("paths")
    if isinstance(paths, list) and len(paths) == 1 and isinstance(paths[0], str):
        return paths[0]
    return None


def call_info(name: Any, arguments: Any) -> CallInfo:
    """A tool call's name, and the file (and lines) it reads or writes, from its input."""
    tool = name if isinstance(name, str) else None
    if not isinstance(arguments, Mapping) or tool is None:
        return CallInfo(tool)
    path = _path(arguments)
    if path is None:
        return CallInfo(tool)
    start, end = _lines(tool, arguments) if tool in READ_TOOLS else (None, None)
    return CallInfo(tool, path, start, end)


def _prefix(text: Any) -> str:
    return text[:PREFIX_CHARS] if isinstance(text, str) else ""


def _is_summary(head: str) -> bool:
    stripped = head.lstrip()
    if stripped.startswith(_SUMMARY_PREFIXES):
        return True
    return stripped.startswith("{") and all(key in head for key in _SNAPSHOT_KEYS)


def _result_text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content[:PREFIX_CHARS]
    if isinstance(content, list):
        for inner in content:
            if isinstance(inner, dict) and inner.get("type") == "text":
                return _prefix(inner.get("text"))
    return ""


def _with_reported_lines(kind: NodeKind, head: str) -> NodeKind:
    shown = _SHOWING_LINES_RE.search(head)
    if shown is None:
        return kind
    start, end = int(shown.group(1)), int(shown.group(2))
    if not 1 <= start <= end:
        return kind
    return NodeKind(kind.node_type, kind.path, start, end)


def _type_result(block: Mapping[str, Any], call: CallInfo | None) -> NodeKind:
    head = _result_text(block)
    name = None if call is None else call.name
    if name in SUMMARY_TOOLS:
        return NodeKind(MEMORY_SUMMARY)
    if call is not None and name in READ_TOOLS and not block.get("is_error"):
        kind = NodeKind(FILE_CONTENT, call.path, call.line_start, call.line_end)
        return _with_reported_lines(kind, head)
    if call is not None and name in WRITE_TOOLS and _FINAL_CONTENT_RE.search(head):
        return NodeKind(FILE_CONTENT, call.path)
    text_kind = _type_header(head)
    if text_kind is not None:
        return text_kind
    return NodeKind(TOOL_OUTPUT)


def _type_header(head: str) -> NodeKind | None:
    """A Cline text tool result (``[tool for 'x'] Result:``), or None."""
    header = _HEADER_RE.match(head)
    if header is None:
        if head.startswith("Tool [") and " was not executed" in head[:200]:
            return NodeKind(TOOL_OUTPUT)
        return None
    tool, target = header.group(1), header.group(2)
    if tool in READ_TOOLS and target:
        return NodeKind(FILE_CONTENT, target)
    if tool in WRITE_TOOLS and target and _FINAL_CONTENT_RE.search(head):
        return NodeKind(FILE_CONTENT, target)
    return NodeKind(TOOL_OUTPUT)


def _type_text(role: str, text: Any) -> NodeKind:
    head = _prefix(text)
    if _is_summary(head):
        return NodeKind(MEMORY_SUMMARY)
    if role == "assistant":
        return NodeKind(ASSISTANT_TEXT)
    header = _type_header(head)
    if header is not None:
        return header
    mention = _MENTION_RE.search(head)
    if mention is not None:
        return NodeKind(FILE_CONTENT, mention.group(1))
    return NodeKind(USER_PROMPT)


_FIXED: Final = {
    "thinking": NodeKind(THINKING),
    "redacted_thinking": NodeKind(THINKING),
    "image": NodeKind(IMAGE),
    "document": NodeKind(DOCUMENT),
    **dict.fromkeys(SERVER_BLOCK_TYPES, NodeKind(SERVER_TOOL)),
}


def type_block(
    role: str, block: Mapping[str, Any], calls: Mapping[str, CallInfo] | None = None
) -> NodeKind:
    """The node type of one content block (a dict in Anthropic form) of a ``role`` message.

    ``calls`` maps tool-use ids to the calls they name, so that a ``tool_result`` of a
    ``read_file`` call is a file content with that call's path.
    """
    kind = block.get("type")
    fixed = _FIXED.get(kind) if isinstance(kind, str) else None
    if fixed is not None:
        return fixed
    if kind == "text":
        return _type_text(role, block.get("text"))
    if kind == "tool_use":
        use_id = block.get("id")
        made = calls.get(use_id) if calls is not None and isinstance(use_id, str) else None
        if made is None or made.name != block.get("name"):
            made = call_info(block.get("name"), block.get("input"))
        return NodeKind(TOOL_CALL, made.path, made.line_start, made.line_end)
    if kind == "tool_result":
        use_id = block.get("tool_use_id")
        answered = calls.get(use_id) if calls is not None and isinstance(use_id, str) else None
        return _type_result(block, answered)
    return NodeKind(ASSISTANT_TEXT if role == "assistant" else USER_PROMPT)


def type_message(
    role: str, blocks: Sequence[Mapping[str, Any]], calls: Mapping[str, CallInfo] | None = None
) -> list[NodeKind]:
    """The node type of each block of a message.

    Cline's older text results put the header alone in block 0 and the content in block 1:
    that block 1 is the file content, with the header's path.
    """
    kinds = [type_block(role, block, calls) for block in blocks]
    if role == "user" and len(kinds) > 1 and blocks[0].get("type") == "text":
        head = _prefix(blocks[0].get("text")).rstrip()
        header = _HEADER_RE.fullmatch(head)
        if (
            header is not None
            and header.group(1) in READ_TOOLS
            and header.group(2)
            and blocks[1].get("type") == "text"
        ):
            kinds[0] = NodeKind(TOOL_OUTPUT)
            kinds[1] = NodeKind(FILE_CONTENT, header.group(2))
    return kinds


def calls_in(messages: Iterable[tuple[str, Sequence[Mapping[str, Any]]]]) -> dict[str, CallInfo]:
    """The tool calls (by id) among ``(role, blocks)`` messages."""
    found: dict[str, CallInfo] = {}
    for role, blocks in messages:
        if role != "assistant":
            continue
        for block in blocks:
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                found[block["id"]] = call_info(block.get("name"), block.get("input"))
    return found


def answered_ids(blocks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tool-use ids a message's ``tool_result`` blocks answer."""
    return [
        block["tool_use_id"]
        for block in blocks
        if block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str)
    ]


class NodeRow(NamedTuple):
    """What a ``blocks`` row stores about its node, beside the block itself."""

    node_type: str
    path: str | None
    line_start: int | None
    line_end: int | None
    token_count: int


def node_rows(kinds: Sequence[NodeKind], token_counts: Sequence[int]) -> list[NodeRow]:
    """The node columns of a message's blocks, from their kinds and token counts."""
    return [
        NodeRow(kind.node_type, kind.path, kind.line_start, kind.line_end, tokens)
        for kind, tokens in zip(kinds, token_counts, strict=True)
    ]


_NEEDS_TEXT: Final = frozenset({MEMORY_SUMMARY})


def check_nodes(
    written: Sequence[tuple[int, Sequence[Mapping[str, Any]], Sequence[NodeRow], int]],
) -> None:
    """Check the nodes about to be written: ``(message_idx, blocks, node rows, message
    token count)`` per message.

    The invariants (Gemini CLI's, enforced rather than logged): node ids are unique; each
    block has one node of a known type; a tool call names its tool and a summary has text;
    a line range starts at 1 or later and does not end before it starts; and the block
    token counts are what the message's count was computed from (their sum plus the
    per-message overhead), so the stored counts equal a recount at no extra cost.

    Raises:
        NodeInvariantError: naming the node and the rule it breaks.
    """
    seen: set[int] = set()
    for message_idx, blocks, rows, message_tokens in written:
        if message_idx in seen:
            raise _violation(message_idx, 0, "its id is written twice")
        seen.add(message_idx)
        if len(rows) != len(blocks):
            raise _violation(message_idx, 0, f"{len(blocks)} blocks have {len(rows)} nodes")
        total = MESSAGE_OVERHEAD_TOKENS
        for block_idx, (block, row) in enumerate(zip(blocks, rows, strict=True)):
            _check_node(message_idx, block_idx, block, row)
            total += row.token_count
        if total != message_tokens:
            raise _violation(
                message_idx,
                0,
                f"its message counts {message_tokens} tokens but its blocks recount to {total}",
            )


def _check_node(message_idx: int, block_idx: int, block: Mapping[str, Any], row: NodeRow) -> None:
    """Check one node; its address is formatted only for an error (this runs per block)."""
    if row.node_type not in BLOCK_NODE_TYPES:
        raise _violation(message_idx, block_idx, f"its type {row.node_type!r} is not a node type")
    if isinstance(row.token_count, bool) or not isinstance(row.token_count, int):
        raise _violation(message_idx, block_idx, "its token count is not an integer")
    if row.token_count < 0:
        raise _violation(message_idx, block_idx, f"its token count {row.token_count} is negative")
    if row.node_type == TOOL_CALL and not block.get("name"):
        raise _violation(message_idx, block_idx, "the tool call names no tool")
    if row.node_type in _NEEDS_TEXT:
        kind = block.get("type")
        head = _result_text(block) if kind == "tool_result" else _prefix(block.get("text"))
        if not head.strip():
            raise _violation(message_idx, block_idx, f"the {row.node_type} has no text")
    if row.line_start is not None and row.line_start < 1:
        raise _violation(message_idx, block_idx, f"its line range starts at {row.line_start}")
    if row.line_end is not None and (row.line_start is None or row.line_end < row.line_start):
        raise _violation(
            message_idx, block_idx, f"its line range {row.line_start}-{row.line_end} is inverted"
        )


def _violation(message_idx: int, block_idx: int, rule: str) -> NodeInvariantError:
    address = node_id(message_idx, block_idx)
    return NodeInvariantError(
        f"node {address} breaks an invariant: {rule}; nothing was written. This is a bug in "
        "contextstore or in a hook that changed the message; report it with the message."
    )


class CountedMessage(NamedTuple):
    """A validated message with its token count and each block's, counted once."""

    message: NormalizedMessage
    tokens: int
    block_tokens: tuple[int, ...]


def count_message(message: NormalizedMessage, counter: TokenCounter) -> CountedMessage:
    """Count ``message``'s blocks once: the message's count is their sum plus the
    per-message overhead (what :func:`~contextstore.core.tokens.message_tokens` gives)."""
    counts = tuple(block_tokens(block, counter.count) for block in message.blocks)
    return CountedMessage(message, MESSAGE_OVERHEAD_TOKENS + sum(counts), counts)


def typed_nodes(
    written: Sequence[tuple[int, CountedMessage]],
    calls: Mapping[str, CallInfo],
    *,
    after: NormalizedMessage | None = None,
) -> list[list[NodeRow]]:
    """The checked node rows of messages about to be written at their indices, ``after``
    the message written just before them, if it is known (a batch typed in parts).

    A ``tool_result`` is typed by the call it answers, from ``calls``: those in ``written``
    and those appended earlier that its results answer (see :func:`batch_calls`).

    Raises:
        NodeInvariantError: a node breaks an invariant (see :func:`check_nodes`).
    """
    typed = []
    previous: Sequence[Mapping[str, Any]] = (
        after.blocks if after is not None and after.role == "assistant" else ()
    )
    for _, counted in written:
        message = counted.message
        known = calls
        if message.role == "user" and previous:
            strays = _paired_by_position(previous, message.blocks, calls)
            if strays:
                known = {**calls, **strays}
        kinds = type_message(message.role, message.blocks, known)
        typed.append(node_rows(kinds, counted.block_tokens))
        previous = message.blocks if message.role == "assistant" else ()
    check_nodes(
        [
            (idx, counted.message.blocks, rows, counted.tokens)
            for (idx, counted), rows in zip(written, typed, strict=True)
        ]
    )
    return typed


def batch_calls(messages: Iterable[NormalizedMessage]) -> tuple[dict[str, CallInfo], list[str]]:
    """The tool calls among ``messages`` (by id), and the ids their results answer that
    are not among them: the calls typing must look up in the store."""
    local: dict[str, CallInfo] = {}
    wanted: list[str] = []
    for message in messages:
        if message.role == "assistant":
            local.update(calls_in([(message.role, message.blocks)]))
        else:
            wanted.extend(answered_ids(message.blocks))
    return local, sorted({use_id for use_id in wanted if use_id not in local})


def _paired_by_position(
    calls_message: Sequence[Mapping[str, Any]],
    results_message: Sequence[Mapping[str, Any]],
    calls: Mapping[str, CallInfo],
) -> dict[str, CallInfo]:
    """Results whose ids name no call, paired in order with the calls of the assistant
    message just before them that no result names (Gemini CLI exports calls without ids
    and their responses with ids of their own)."""
    answered = set(answered_ids(results_message))
    open_calls = [
        block
        for block in calls_message
        if block.get("type") == "tool_use" and block.get("id") not in answered
    ]
    strays = [use_id for use_id in answered_ids(results_message) if use_id not in calls]
    return {
        use_id: call_info(call.get("name"), call.get("input"))
        for use_id, call in zip(strays, open_calls, strict=False)
    }


class PromptNode(NamedTuple):
    """A system prompt or a request's tool definitions as a node, stored once per content."""

    sha256: str
    node_type: str
    content: str


def prompt_nodes(system: Any, tools: Any) -> tuple[PromptNode | None, PromptNode | None]:
    """The nodes of a request's system prompt and tool definitions (None when it has none:
    no prompt, an empty one, or no tools). A system prompt given as text blocks has their
    texts joined by a blank line as its content (:func:`~contextstore.core.system_prompt.
    system_text`), the text the model reads, as a string prompt of that text has; a tool
    list's content is its canonical JSON."""
    system_node = None
    text = system_text(system) if isinstance(system, str | list) else None
    if text:
        system_node = PromptNode(_sha256(text), SYSTEM_PROMPT, text)
    tools_node = None
    if isinstance(tools, list) and tools:
        content = canonical_json(tools)
        tools_node = PromptNode(_sha256(content), TOOL_DEFINITIONS, content)
    return system_node, tools_node


def _sha256(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Node:
    """A block as a node of the pristine view (as stored) or the active one (what the
    model sees: the cut, stored rewrites and the pipeline's applied).

    Attributes:
        id: ``"m12.b0"``; with the conversation, ``(message_idx, block_idx)`` is its
            identity.
        text: The block's text column (a tool result's text, a thinking block's...); in
            the active view the rewritten text. None for blocks without text (calls, media).
        token_count: Stored at append; in the active view a rewritten node's text is
            counted again.
        rewritten_by: The kind of the update that rewrote it (``truncation_notice``,
            ``read_file``, ``processor``...), None when shown as stored.
        rewrite_source: The rule or processor that wrote that update.
    """

    id: str
    message_idx: int
    block_idx: int
    ts: int
    role: str
    block_type: str
    node_type: str
    path: str | None
    line_start: int | None
    line_end: int | None
    token_count: int
    tool_use_id: str | None
    tool_name: str | None
    text: str | None
    rewritten_by: str | None = None
    rewrite_source: str | None = None
