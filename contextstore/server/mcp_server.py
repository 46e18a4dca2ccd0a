"""``contextstore mcp``: an MCP server (stdio) through which an agent reads its own history.

Built on the official ``mcp`` SDK (``pip install "contextstore[mcp]"``). The tools are thin
wrappers over :class:`ContextStore` reads; each answers with the records as JSON (the same
shapes as the JSON-RPC server). The store is opened read-only unless ``--allow-writes``,
which adds ``checkpoint`` and ``rollback``. A store error comes back as a tool error whose
text names the error class and says what to do, for the model to read.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from contextstore import __version__
from contextstore.core.errors import ContextStoreError
from contextstore.server.methods import to_json
from contextstore.store import ContextStore

F = TypeVar("F", bound=Callable[..., Any])

Format = Literal["stored", "anthropic", "openai", "gemini"]

INSTRUCTIONS = (
    "Durable history of LLM agent conversations (contextstore). Find a conversation with "
    "list_conversations or search_conversations, read it with show_conversation (now, or "
    "as_of a ts in milliseconds, e.g. a checkpoint's), explain what the model was shown and "
    "why with audit_conversation and show_request."
)

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def _store_errors_as_tool_errors(function: F) -> F:
    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except ContextStoreError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    return wrapper  # type: ignore[return-value]


class HistoryTools:
    """The tools, bound to one store; each method is registered as an MCP tool."""

    def __init__(self, store: ContextStore) -> None:
        self.store = store

    def list_conversations(self, limit: int = 50) -> list[dict[str, Any]]:
        """The most recent conversations (newest first): id, title, model, window, last ts."""
        conversations = self.store.list_conversations()
        newest = sorted(conversations, key=lambda c: c.last_ts, reverse=True)[: max(limit, 0)]
        return [to_json(c) for c in newest]

    def show_conversation(
        self,
        conversation_id: str,
        as_of: int | None = None,
        format: Format = "anthropic",
        pristine: bool = False,
    ) -> list[dict[str, Any]]:
        """The conversation as the model saw it, now or as of a ts (milliseconds).

        ``pristine`` gives the stored originals instead (no truncation, no rewrites);
        ``format`` is the provider shape ("stored" keeps every stored field).
        """
        if pristine:
            return self.store.messages(conversation_id, as_of=as_of)
        return self.store.render(
            conversation_id, as_of=as_of, format=None if format == "stored" else format
        )

    def list_checkpoints(self, conversation_id: str) -> list[dict[str, Any]]:
        """The conversation's checkpoints, oldest first (their ts works as as_of)."""
        return [to_json(c) for c in self.store.checkpoints(conversation_id)]

    def show_request(self, conversation_id: str, request_id: int) -> dict[str, Any]:
        """The exact payload of a prepared request, rebuilt from rows and hash-verified."""
        return self.store.request_payload(conversation_id, request_id)

    def checkpoint(
        self, conversation_id: str, label: str | None = None, note: str | None = None
    ) -> dict[str, Any]:
        """Mark the present moment of a conversation, to roll back to later."""
        record: dict[str, Any] = to_json(self.store.checkpoint(conversation_id, label, note=note))
        return record

    def rollback(self, conversation_id: str, to: str | int, dry_run: bool = True) -> dict[str, Any]:
        """Remove every row written after a checkpoint (a label) or a ts; archived, so
        'contextstore restore' can undo it. A dry run (the default) only counts."""
        report: dict[str, Any] = to_json(self.store.rollback(conversation_id, to, dry_run=dry_run))
        return report


READ_TOOLS = ("list_conversations", "show_conversation", "list_checkpoints", "show_request")
WRITE_TOOLS = ("checkpoint", "rollback")


def build_server(store: ContextStore, *, allow_writes: bool = False) -> MCPServer[Any]:
    """The MCP server over ``store``: the read tools, and the write tools if allowed."""
    server: MCPServer[Any] = MCPServer(
        "contextstore", instructions=INSTRUCTIONS, version=__version__
    )
    tools = HistoryTools(store)
    for name in READ_TOOLS:
        server.add_tool(_store_errors_as_tool_errors(getattr(tools, name)), annotations=READ_ONLY)
    if allow_writes:
        for name, destructive in zip(WRITE_TOOLS, (False, True), strict=True):
            annotations = ToolAnnotations(destructive_hint=destructive, open_world_hint=False)
            server.add_tool(
                _store_errors_as_tool_errors(getattr(tools, name)), annotations=annotations
            )
    return server
