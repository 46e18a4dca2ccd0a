"""Tool call ids in the form the Messages API accepts, and distinct across a request.

The API takes ids of letters, digits, ``_`` and ``-`` only, and refuses a request in which
two ``tool_use`` blocks share an id; other agents' ids break both rules (Kimi's
``functions.read_file:0``, which restarts every turn). The forms computed here are
deterministic, so a call and its result are given the same one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection

from contextstore.core.overlays import Message

CALL_ID = re.compile(r"[a-zA-Z0-9_-]+")
"""The tool call ids the Messages API accepts (``tool_use.id``, ``tool_result.tool_use_id``)."""

_NOT_IN_CALL_ID = re.compile(r"[^a-zA-Z0-9_-]")

ID_FIELDS = {"tool_use": "id", "tool_result": "tool_use_id"}
"""Per block type, the field holding a tool call id."""


def call_id(value: str) -> str:
    """Return a stored tool call id in a form the Messages API accepts.

    An id matching :data:`CALL_ID` is returned unchanged. Another provider's id (Kimi's
    ``functions.read_file:0``, an MCP server's ``srv/tool.1``) has each character the API
    refuses replaced by ``_``, then ``_`` and 12 hex digits of the id's SHA-256 appended,
    so that two ids differing only in those characters stay different. The call and its
    result are given the same id, since both are computed from the stored one.
    """
    if CALL_ID.fullmatch(value):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{_NOT_IN_CALL_ID.sub('_', value)}_{digest}"


def repeated_call_id(value: str, used: Collection[str]) -> str:
    """Return a form of ``value`` (a tool call id already sent in an earlier message of the
    same request) that is not in ``used``: ``value``, ``_`` and 12 hex digits of the SHA-256
    of ``value`` and a counter. The Messages API refuses a request in which two ``tool_use``
    blocks share an id ("tool_use ids must be unique"), which agents whose ids restart every
    turn (Kimi's ``functions.read_file:0``) write."""
    counter = 1
    while True:
        seed = f"{value}\n{counter}".encode("utf-8", "surrogatepass")
        candidate = f"{value}_{hashlib.sha256(seed).hexdigest()[:12]}"
        if candidate not in used:
            return candidate
        counter += 1


def distinct_call_ids(messages: list[Message]) -> list[Message]:
    """``messages`` (fresh renderings, changed in place) with every ``tool_use`` id that an
    earlier message already used given :func:`repeated_call_id`'s form, in the call and in
    its ``tool_result`` in the next message alike."""
    used: set[str] = set()
    renamed: dict[str, str] = {}
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            renamed = {}
            continue
        if message["role"] == "assistant":
            renamed = {}
            for block in content:
                if block.get("type") != "tool_use" or not isinstance(block.get("id"), str):
                    continue
                stored = block["id"]
                if stored in used:
                    renamed[stored] = block["id"] = repeated_call_id(stored, used)
                used.add(block["id"])
            continue
        for block in content:
            if block.get("type") == "tool_result" and block.get("tool_use_id") in renamed:
                block["tool_use_id"] = renamed[block["tool_use_id"]]
        renamed = {}
    return messages
