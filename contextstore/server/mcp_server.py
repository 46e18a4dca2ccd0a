"""``contextstore mcp``: an MCP server (stdio) through which an agent reads its own history.

Built on the official ``mcp`` SDK (``pip install "contextstore[mcp]"``). The tools are
compositions of :class:`ContextStore` reads (no SQL here); each answers with the records as
JSON, in the same shapes as the JSON-RPC server, and takes its arguments as strictly as the
JSON-RPC methods take params (``"5"`` and ``5.5`` are not integers, ``5.0`` is). The store
is opened read-only unless ``--allow-writes``, which adds ``checkpoint`` and ``rollback``. A
store error comes back as a tool error whose text names the error class and says what to
do, for the model to read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from functools import wraps
from typing import Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import ValidationError, create_model

from contextstore import __version__
from contextstore.core.audit_records import FileRead
from contextstore.core.errors import AnswerTooLargeError, ContextStoreError, InvalidInputError
from contextstore.core.validate import check_int
from contextstore.server.jsonrpc import clipped
from contextstore.server.mcp_stdio import AnsweringReader, AnswerLedger
from contextstore.server.methods import to_json, validation_problems, wire_type
from contextstore.server.wording import mcp_wording
from contextstore.store import ContextStore

F = TypeVar("F", bound=Callable[..., Any])

Format = Literal["stored", "anthropic", "openai", "gemini"]
PROVIDER_ONLY = ("openai", "gemini")
"""The formats the stored originals are not in (they are Anthropic's, with stored fields)."""

INSTRUCTIONS = (
    "Durable history of LLM agent conversations (contextstore). Find a conversation with "
    "list_conversations or search_conversations, read it with show_conversation (now, or "
    "as_of a ts in milliseconds, e.g. a checkpoint's), explain what the model was shown and "
    "why with audit_conversation and show_request."
)

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)

MAX_ANSWER_CHARS = 100_000
"""The most characters of JSON a tool answers with, about 25,000 tokens (Claude Code's
default cap on an MCP tool's output): the answer goes into a model's context, where a long
conversation's 3 MB would not fit. A larger answer is refused saying what to ask for."""

LESS = {
    "list_conversations": "pass a smaller limit",
    "search_conversations": "pass a smaller limit, or more specific text",
    "show_request": (
        "show_conversation with as_of the request's ts (audit_conversation lists it) reads "
        "the messages it sent a page at a time, with offset and limit"
    ),
    "list_checkpoints": "'contextstore checkpoints' lists them on the command line",
}
"""What each tool's caller can ask for instead of an answer over :data:`MAX_ANSWER_CHARS`
(show_conversation says it itself, with the page that fits)."""


def answer_size(value: Any) -> int:
    """The characters of ``value`` as compact JSON: what a tool answer is measured by."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def too_large(tool: str, size: int, what_to_do: str) -> AnswerTooLargeError:
    """The error for an answer of ``size`` characters, over :data:`MAX_ANSWER_CHARS`."""
    return AnswerTooLargeError(
        f"{tool}'s answer would be {size:,} characters of JSON, more than the "
        f"{MAX_ANSWER_CHARS:,} a tool answer may take of a model's context; {what_to_do}."
    )


def fitting(sizes: list[int], around: int = 0) -> int:
    """How many of the leading items, of these JSON sizes, fit in one answer as an array
    (inside ``around`` characters of the rest of the answer)."""
    used = around + 2  # the array's brackets
    for count, size in enumerate(sizes):
        used += size + (1 if count else 0)
        if used > MAX_ANSWER_CHARS:
            return count
    return len(sizes)


def block_texts(message: dict[str, Any]) -> Iterator[str]:
    """The searchable text of a stored message: text blocks, tool results, tool inputs."""
    content = message.get("content")
    if isinstance(content, str):
        yield content
        return
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            yield block["text"]
        if block.get("type") == "tool_use":
            yield json.dumps(block.get("input"), ensure_ascii=False)
        inner = block.get("content")
        if isinstance(inner, str):
            yield inner
        elif isinstance(inner, list):
            yield from block_texts({"content": inner})


def files_read(reads: Sequence[FileRead]) -> dict[str, int]:
    """How often each path was read, whatever read tool read it (the store's audit: Cline's
    ``read_file`` with ``path``, Gemini CLI's with ``absolute_path`` or ``file_path``, Claude
    Code's ``Read``), most read first."""
    counts: dict[str, int] = {}
    for read in reads:
        counts[read.path] = counts.get(read.path, 0) + read.reads
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _store_errors_as_tool_errors(function: F) -> F:
    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except ContextStoreError as exc:
            raise ToolError(f"{type(exc).__name__}: {mcp_wording(str(exc))}") from exc

    return wrapper  # type: ignore[return-value]


class HistoryTools:
    """The tools, bound to one store; each method is registered as an MCP tool."""

    def __init__(self, store: ContextStore) -> None:
        self.store = store

    def _newest_first(self) -> list[dict[str, Any]]:
        conversations = self.store.list_conversations()
        return [to_json(c) for c in sorted(conversations, key=lambda c: -c.last_ts)]

    def list_conversations(self, limit: int = 50) -> list[dict[str, Any]]:
        """The most recent conversations (newest first): id, title, model, window, last ts."""
        check_int("limit", limit, minimum=1, optional=False)  # as search_conversations
        return self._newest_first()[:limit]

    def search_conversations(self, text: str, limit: int = 20) -> list[dict[str, Any]]:
        """Blocks containing ``text`` (ASCII letters in any case; text, tool inputs and
        results), newest first: the conversation, the message and block, the role and a
        snippet around the match."""
        return [to_json(hit) for hit in self.store.search(text, limit=limit)]

    def audit_conversation(
        self, conversation_id: str, offset: int = 0, limit: int | None = None
    ) -> dict[str, Any]:
        """Why the conversation looks as it does: every request (tokens against the window
        and the maximum allowed size, cost, failure, the deleted range it was sent with),
        every truncation (its range, keep strategy, the tokens that triggered it and why),
        the files read, checkpoints. A long one's requests are read a page at a time:
        ``limit`` requests from position ``offset`` (0 is the first; ``requests_total``
        counts them all)."""
        check_int("offset", offset, optional=False)
        check_int("limit", limit, minimum=1)
        with self.store.snapshot():  # one moment, while the agent may still be writing
            answer = self._audit(conversation_id, offset, limit)
        sizes = [answer_size(request) for request in answer["requests"]]
        around = answer_size({**answer, "requests": []}) - 2
        fits = fitting(sizes, around)
        if fits < len(sizes):
            total = answer["requests_total"]
            advice = (
                f"it has {total:,} requests: read them a page at a time with offset and limit "
                f"(offset={offset}, limit={fits} fits)"
                if fits
                else "its files read, truncations and checkpoints alone are too many"
            )
            raise too_large("audit_conversation", answer_size(answer), advice)
        return answer

    def _audit(self, conversation_id: str, offset: int, limit: int | None) -> dict[str, Any]:
        """The audit's answer, read inside the caller's snapshot. Truncations are the
        store's own (:meth:`ContextStore.audit`), one per range row: a range set without a
        truncation notice (``set_deleted_range``, an import) is one too."""
        audit = self.store.audit(conversation_id)
        every_request = self.store.requests(conversation_id)
        requests = every_request[offset : None if limit is None else offset + limit]
        return {
            "conversation": to_json(audit.conversation),
            "context_window": audit.context_window,
            "max_allowed_size": audit.max_allowed_size,
            "requests": [
                {
                    **to_json(r),
                    "deleted_range": to_json(self.store.deleted_range(conversation_id, r.ts)),
                }
                for r in requests
            ],
            "requests_total": len(every_request),
            "total_cost": sum(r.cost or 0 for r in every_request),
            "truncations": [
                {**to_json(t), "deleted_range": [t.start_idx, t.end_idx]} for t in audit.truncations
            ],
            "files_read": files_read(audit.file_reads),
            "checkpoints": self.list_checkpoints(conversation_id),
        }

    def show_conversation(
        self,
        conversation_id: str,
        as_of: int | None = None,
        format: Format = "anthropic",
        pristine: bool = False,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """The conversation as the model saw it, now or as of a ts (milliseconds).

        ``pristine`` gives the stored originals instead (no truncation, no rewrites);
        ``format`` is the provider shape ("stored" keeps every stored field). A long
        conversation is read a page at a time: ``limit`` messages from position
        ``offset`` of the answer (0 is the first); an answer too large for a model's
        context is refused, saying how many messages there are and which page fits.
        """
        check_int("offset", offset, optional=False)
        check_int("limit", limit, minimum=1)
        if pristine and format in PROVIDER_ONLY:
            # As 'contextstore show --pristine --format' is refused: the answer would be
            # the stored (Anthropic-shaped) rows, not the format asked for.
            raise InvalidInputError(
                f"pristine gives the stored originals, which are not in the {format} format; "
                f'leave format out (or pass "stored") with pristine, or leave pristine out '
                f"for the conversation as the model saw it in the {format} format."
            )
        if pristine:
            messages = self.store.messages(conversation_id, as_of=as_of)
        else:
            messages = self.store.render(
                conversation_id, as_of=as_of, format=None if format == "stored" else format
            )
        page = messages[offset : None if limit is None else offset + limit]
        sizes = [answer_size(message) for message in page]
        fits = fitting(sizes)
        if fits < len(page):
            raise too_large(
                "show_conversation",
                answer_size(page),
                _page_advice(len(messages), offset, fits, sizes[fits]),
            )
        return page

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


def _page_advice(count: int, offset: int, fits: int, next_size: int) -> str:
    """What to ask show_conversation for when the page from ``offset`` holds more than
    ``fits`` messages (``next_size``: the JSON size of the first that does not fit)."""
    if fits:
        return (
            f"this view has {count:,} messages: read them a page at a time with offset and "
            f"limit (offset={offset}, limit={fits} fits)"
        )
    return (
        f"the message at offset {offset} alone is {next_size:,} characters (of {count:,} "
        "messages in this view): search_conversations finds text in it and shows a snippet "
        f"around each match, and offset={offset + 1} reads on after it"
    )


def _bounded(function: F) -> F:
    """``function`` (a tool), refusing an answer over :data:`MAX_ANSWER_CHARS` with what
    to ask for instead (:data:`LESS`)."""

    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        answer = function(*args, **kwargs)
        size = answer_size(answer)
        if size > MAX_ANSWER_CHARS:
            advice = LESS.get(function.__name__, "ask for less")
            raise too_large(function.__name__, size, advice)
        return answer

    return wrapper  # type: ignore[return-value]


def argument_problems(tool: str, problems: list[dict[str, str]], accepted: list[str]) -> str:
    """What was wrong with a tool call's arguments, one clause per argument in JSON terms
    (object, array), without the rejected values or pydantic's own model names and links."""
    clauses = "; ".join(f"{p['param']}: {p['message']}" for p in problems)
    takes = ", ".join(accepted) or "no arguments"
    return (
        f"InvalidInputError: {tool} was called with arguments that do not fit: {clauses} "
        f"({tool} takes {takes})."
    )


class StrictArguments(FuncMetadata):
    """A tool's arguments as the SDK validates them, without its two loosenesses, so that a
    tool takes what the JSON-RPC method would (strict, as :mod:`contextstore.server.methods`):

    - the argument model is pydantic's strict mode: ``"5"`` and ``5.5`` are not integers,
      ``"true"`` and ``1`` are not booleans (the SDK's model converts them); ``5.0`` is the
      integer 5, as JSON Schema counts it (:func:`~contextstore.server.methods.wire_type`);
    - a string is passed on as it came (the SDK first decodes any string that reads as a
      JSON array, object or ``null`` for an argument not typed plain ``str``: a checkpoint
      label ``"null"`` became no label, a note ``"[1, 2]"`` was refused as not a string).

    The published input schema does not change: it said these types already."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` unchanged (the SDK's version decodes JSON inside strings)."""
        return dict(data)


def strict_tool(function: Callable[..., Any], annotations: ToolAnnotations) -> Tool:
    """The SDK's tool for ``function``, its arguments validated as :class:`StrictArguments`."""
    tool = Tool.from_function(function, annotations=annotations)
    loose = tool.fn_metadata
    whole_numbers: dict[str, Any] = {
        name: (wire_type(field.annotation), field)
        for name, field in loose.arg_model.model_fields.items()
        if wire_type(field.annotation) is not field.annotation
    }
    strict_model = create_model(
        loose.arg_model.__name__,
        __base__=loose.arg_model,
        __cls_kwargs__={"strict": True},
        **whole_numbers,
    )
    tool.fn_metadata = StrictArguments(
        arg_model=strict_model,
        output_schema=loose.output_schema,
        output_model=loose.output_model,
        wrap_output=loose.wrap_output,
    )
    return tool


class HistoryServer(MCPServer[Any]):
    """The SDK's server, with argument errors reported as :func:`argument_problems` says
    them (the model reads them to correct its call), unknown argument names included (the
    SDK would drop them silently, so a misspelt ``limt`` would quietly mean the default),
    and every request answered on stdio, also one the SDK's parser refuses
    (:mod:`contextstore.server.mcp_stdio`)."""

    async def run_stdio_async(self) -> None:
        """Serve on stdin and stdout, as the SDK does, through :class:`AnsweringReader`."""
        # The SDK's own in-memory transport runs the low-level server the same way.
        server = self._lowlevel_server
        async with stdio_server() as (read_stream, write_stream):
            ledger = AnswerLedger(write_stream)
            await server.run(
                AnsweringReader(read_stream, ledger, ledger),
                ledger,
                server.create_initialization_options(),
            )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        schema = self._tool_input_schema(name)
        if schema is None:  # the SDK's own error repeats the name whole, a 1 MB one too
            raise ToolError(f"Unknown tool: {clipped(name)}; tools/list lists the tools.")
        accepted = list(schema.get("properties", {}))
        unknown = [key for key in arguments or {} if key not in accepted]
        if unknown:
            problems = [{"param": key, "message": "unknown argument"} for key in unknown]
            raise ToolError(argument_problems(name, problems, accepted))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(
                argument_problems(name, validation_problems(cause), accepted)
            ) from cause


READ_TOOLS = (
    "list_conversations",
    "search_conversations",
    "show_conversation",
    "audit_conversation",
    "list_checkpoints",
    "show_request",
)
WRITE_TOOLS = ("checkpoint", "rollback")


def build_server(store: ContextStore, *, allow_writes: bool = False) -> MCPServer[Any]:
    """The MCP server over ``store``: the read tools, their answers bounded
    (:func:`_bounded`), and the write tools if allowed (never bounded: a write that ran
    must not be reported as refused), each with strict arguments (:class:`StrictArguments`)."""
    history = HistoryTools(store)
    annotated = [(_bounded(getattr(history, name)), READ_ONLY) for name in READ_TOOLS]
    if allow_writes:
        for name, destructive in zip(WRITE_TOOLS, (False, True), strict=True):
            annotated.append(
                (
                    getattr(history, name),
                    ToolAnnotations(destructive_hint=destructive, open_world_hint=False),
                )
            )
    tools = [
        strict_tool(_store_errors_as_tool_errors(tool), annotations)
        for tool, annotations in annotated
    ]
    return HistoryServer(
        "contextstore", instructions=INSTRUCTIONS, version=__version__, tools=tools
    )
