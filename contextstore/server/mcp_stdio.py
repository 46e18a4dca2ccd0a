"""The MCP server's stdio transport: the SDK's, plus an answer to requests its parser refuses.

The SDK's JSON parser is stricter than JSON: it refuses a lone surrogate escape such as
``"\\ud800"`` (what JavaScript's ``JSON.stringify`` writes for half of an emoji's pair, say a
search text cut in the middle of one) and nesting past its own recursion limit. The SDK then
drops the line without an answer, and the client waits for one forever. Such a line is still
a request with an id: :class:`AnsweringReader` answers it with a JSON-RPC error naming what
could not be read, and the server goes on serving. The same holds for a request that is
JSON but whose envelope the SDK's message model refuses (no ``"jsonrpc": "2.0"``, a
``method`` that is not a string, ``params`` that are not an object) and for each request of
a batch (a JSON array: MCP takes one message per line): each is answered with an
invalid-request error carrying its id. A line that is not JSON at all, or holds no request
id, stays the SDK's to handle (it has no id to answer).

When the input ends (a client that wrote its requests and closed stdin, as a script piping
them in does), the SDK stops serving at once and the requests still being handled went
unanswered; :class:`AnsweringReader` holds the end back until every request read has been
answered (or cancelled by the client), which :class:`AnswerLedger` keeps count of.

The SDK answers a request whose params its model refuses (``tools/call`` without a tool's
``name``, ``arguments`` that are not an object), or any request before the session is
initialized, with a bare "Invalid request parameters" and no detail. :class:`AnswerLedger`
keeps each request until it is answered, and gives such an answer the reason, read off
the SDK's own request models (:func:`params_problems`).
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, get_args

import anyio
from mcp.shared.message import SessionMessage
from mcp.types import (
    ClientRequest,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)
from pydantic import BaseModel, ValidationError

from contextstore.core.errors import InvalidInputError
from contextstore.core.validate import (
    MAX_JSON_DEPTH,
    MAX_JSON_INT_DIGITS,
    MAX_PARSED_JSON_DEPTH,
    check_json_value,
    nests_deeper_than,
)
from contextstore.server.jsonrpc import (
    MAX_ECHOED_NAME,
    UnreadableNumberError,
    clipped,
    parse_int,
)

if TYPE_CHECKING:
    # typing.Self is Python 3.11's: importing it stopped 'contextstore mcp' on 3.10.
    from typing_extensions import Self

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
PARSE_ERROR = -32700

logger = logging.getLogger("contextstore.mcp")


class Received(Protocol):
    """What the SDK's stdio transport reads into: parsed messages and parse failures."""

    async def receive(self) -> SessionMessage | Exception: ...

    async def aclose(self) -> None: ...


class Replies(Protocol):
    """The stream the server's answers are written from."""

    async def send(self, item: SessionMessage, /) -> None: ...


def _refused_text(exc: Exception) -> tuple[str, str] | None:
    """The line the SDK's parser refused and its reason, when ``exc`` says it was not JSON
    to that parser (rather than JSON of the wrong shape)."""
    if not isinstance(exc, ValidationError):
        return None
    for error in exc.errors(include_url=False):
        if error["type"] == "json_invalid" and isinstance(error["input"], str):
            return error["input"], str(error["msg"])
    return None


def _sendable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        return False
    return True


def _problem(message: dict[str, Any], reason: str) -> tuple[int, str]:
    """The code and message for a request the SDK could not read: a value JSON allows but
    no text holds (a lone surrogate) in its params, or elsewhere, or else the parser's
    own reason."""
    try:
        check_json_value("params", message.get("params"), allow_nul=True)
    except InvalidInputError as problem:
        return INVALID_PARAMS, f"invalid params: {problem}"
    try:
        check_json_value("request", {k: v for k, v in message.items() if k != "params"})
    except InvalidInputError as problem:
        return INVALID_REQUEST, f"invalid request: {problem}"
    return PARSE_ERROR, f"parse error: the server cannot read this request ({reason})."


def unreadable_request_error(exc: Exception) -> JSONRPCError | None:
    """The error that answers the request behind ``exc`` (the SDK's parse failure), or None
    when there is no request to answer: the text is not JSON here either, it is a
    notification, or its id cannot be sent back."""
    refused = _refused_text(exc)
    if refused is None:
        return None
    line, reason = refused
    message = _members(line)
    if message is None or not isinstance(message.get("method"), str):
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    if not _sendable(request_id):
        return None
    unread = [(name, value) for name, value in message.items() if isinstance(value, _Unread)]
    if unread:
        name, value = min(unread, key=lambda item: item[0] != "params")
        if name == "params":
            code, text = INVALID_PARAMS, f"invalid params: params {value.problem}."
        else:
            code, text = INVALID_REQUEST, f"invalid request: {clipped(name)} {value.problem}."
    else:
        code, text = _problem(message, reason)
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=text))


@dataclass(frozen=True)
class _Unread:
    """A member of a refused request that Python's JSON parser cannot read either."""

    problem: str
    """What is wrong with it, as a phrase that follows the member's name."""


_SCALAR_END = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=str)
_BRACKET_OR_QUOTE = re.compile(r'["\[\]{}]')


def _members(line: str) -> dict[str, Any] | None:
    """The members of the JSON object ``line``, each read on its own, or None when ``line``
    is not a JSON object. A member Python cannot read either (nested past its recursion
    limit, an integer of more digits than ``int`` takes) is an :class:`_Unread`, so that
    the request's id and method are still known. Walks the object's top level without
    recursion; only runs for a line the SDK refused."""
    spans = _top_level_spans(line)
    if spans is None:
        return None
    members: dict[str, Any] = {}
    too_deep = _Unread(
        f"nests arrays and objects more than {MAX_JSON_DEPTH} levels deep; flatten the value"
    )
    for name, span in spans:
        try:
            value = json.loads(span, parse_int=parse_int)
            # What Python 3.11 could not parse is unreadable on every Python.
            members[name] = (
                too_deep if nests_deeper_than(span, value, MAX_PARSED_JSON_DEPTH) else value
            )
        except RecursionError:
            members[name] = too_deep
        except UnreadableNumberError as exc:
            members[name] = _Unread(
                f"holds an integer of {exc.digits:,} digits, over the {MAX_JSON_INT_DIGITS} a "
                "value may have; send such a number as a string"
            )
        except ValueError:
            return None
    return members


def _top_level_spans(line: str) -> list[tuple[str, str]] | None:
    """Each top-level member of the JSON object ``line`` as (name, the text of its value),
    found without parsing the values; None when ``line`` is not one JSON object."""
    position = _after_space(line, 0)
    if not line.startswith("{", position):
        return None
    spans: list[tuple[str, str]] = []
    position = _after_space(line, position + 1)
    closed = line.startswith("}", position)
    try:
        while not closed:
            if not line.startswith('"', position):
                return None
            name, position = _SCALAR_END.raw_decode(line, position)
            position = _after_space(line, position)
            if not line.startswith(":", position):
                return None
            start = _after_space(line, position + 1)
            end = _value_end(line, start)
            if end is None:
                return None
            spans.append((name, line[start:end]))
            position = _after_space(line, end)
            closed = line.startswith("}", position)
            if not closed and not line.startswith(",", position):
                return None
            position = position if closed else _after_space(line, position + 1)
    except ValueError:  # a string that does not end, or holds a bad escape
        return None
    return spans if _after_space(line, position + 1) == len(line) else None


def _after_space(line: str, position: int) -> int:
    """Where the JSON whitespace that starts at ``position`` ends."""
    while position < len(line) and line[position] in " \t\n\r":
        position += 1
    return position


def _value_end(line: str, start: int) -> int | None:
    """Where the JSON value that begins at ``start`` ends: after its closing bracket for an
    array or object (strings inside skipped whole), or after a scalar; None if it does not
    end in ``line``.

    Raises:
        ValueError: a string in it does not end, or holds a bad escape.
    """
    if not line.startswith(("[", "{"), start):
        try:
            return _SCALAR_END.raw_decode(line, start)[1]
        except ValueError:
            return None
    depth = 0
    position = start
    while (found := _BRACKET_OR_QUOTE.search(line, position)) is not None:
        mark = found.group()
        if mark == '"':
            position = _SCALAR_END.raw_decode(line, found.start())[1]
            continue
        depth += 1 if mark in "[{" else -1
        position = found.end()
        if depth == 0:
            return position
    return None


def _refused_value(exc: Exception) -> Any:
    """The JSON value the SDK parsed but whose shape its message model refused (a message
    that is not a request, notification or response), or None. Pydantic reports such a
    value whole where an alternative of the message union is not an object at all or
    misses a field."""
    if not isinstance(exc, ValidationError):
        return None
    for error in exc.errors(include_url=False):
        whole = len(error["loc"]) == 1 or error["type"] == "missing"
        if whole and error["type"] != "json_invalid":
            return error["input"]
    return None


def _answerable_id(message: Any) -> int | str | None:
    """The id to answer ``message`` with: a request's string or integer id that can be
    sent back; None for a notification, a response (a client's answer, never answered),
    or an id MCP cannot carry."""
    if not isinstance(message, dict) or "result" in message or "error" in message:
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    return request_id if _sendable(request_id) else None


def _envelope_problem(message: dict[str, Any]) -> tuple[int, str]:
    """What is wrong with a request object the SDK's message model refused."""
    if message.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, 'invalid request: it needs "jsonrpc": "2.0".'
    method = message.get("method")
    if not isinstance(method, str):
        return INVALID_REQUEST, 'invalid request: it needs a "method" string.'
    params = message.get("params")
    if isinstance(params, list):
        return (
            INVALID_PARAMS,
            f"invalid params for {clipped(method)}: MCP takes params as an object of named "
            "params, not an array.",
        )
    return INVALID_REQUEST, "invalid request: params must be an object, or left out."


CANCELLED = "notifications/cancelled"
"""The notification by which a client cancels a request (no answer is sent for it)."""

BATCH_REFUSED = (
    "invalid request: MCP takes one JSON-RPC message per line, not a batch (a JSON array); "
    "nothing in the batch was called: send each request on a line of its own."
)
"""The answer to each request of a batch (the SDK reads one message per line)."""


def malformed_request_errors(exc: Exception) -> list[JSONRPCError]:
    """The errors that answer the requests behind ``exc`` (the SDK's refusal of a message
    that is JSON but not of the shape its model takes): one for a request object with a bad
    envelope, one for each request of a batch; none for a notification, a response, or an
    id that cannot be sent back."""
    value = _refused_value(exc)
    batch = isinstance(value, list)
    errors = []
    for message in value if batch else [value]:
        request_id = _answerable_id(message)
        if request_id is None:
            continue
        code, text = (INVALID_REQUEST, BATCH_REFUSED) if batch else _envelope_problem(message)
        errors.append(
            JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=text))
        )
    return errors


def refused_request_errors(exc: Exception) -> list[JSONRPCError]:
    """Every answer due for a message the SDK's transport refused (``exc``): see
    :func:`unreadable_request_error` and :func:`malformed_request_errors`."""
    unreadable = unreadable_request_error(exc)
    return [unreadable] if unreadable is not None else malformed_request_errors(exc)


SDK_BARE_REFUSAL = "Invalid request parameters"
"""The SDK's whole answer to a request whose params its model refuses, or that came before
the session was initialized."""
INITIALIZE = "initialize"

_ERROR_WORDS = {
    "missing": "is required",
    "string_type": "must be a string",
    "dict_type": "must be an object",
    "list_type": "must be an array",
    "int_type": "must be an integer",
    "bool_type": "must be true or false",
}


@cache
def _request_models() -> dict[str, type[BaseModel]]:
    """The SDK's model of each request a client may send, by its method name."""
    models: dict[str, type[BaseModel]] = {}
    for model in get_args(ClientRequest):
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = model.model_fields.get("method")
            for method in get_args(field.annotation) if field is not None else ():
                if isinstance(method, str):
                    models[method] = model
    return models


def params_problems(method: str, params: Any) -> list[str]:
    """What the SDK's model of ``method`` finds wrong with ``params``, a phrase each
    (``params.name is required``); empty when it takes them, or knows no such method."""
    model = _request_models().get(method)
    if model is None:
        return []
    try:
        # Left-out params are read as {}, as the SDK reads them.
        given = {} if params is None else params
        model.model_validate({"method": method, "params": given}, by_name=False)
    except ValidationError as refused:
        problems = []
        for error in refused.errors(include_url=False):
            where = ".".join(str(part) for part in error["loc"])[:MAX_ECHOED_NAME]
            words = _ERROR_WORDS.get(error["type"], str(error["msg"]).lower())
            problems.append(f"{where} {words}")
        return problems
    return []


def explained_refusal(method: str, params: Any, *, initialized: bool) -> str:
    """The message for the SDK's bare refusal of a ``method`` request with ``params``."""
    problems = params_problems(method, params)
    if problems:
        return f"invalid params for {clipped(method)}: {'; '.join(problems[:5])}."
    if not initialized and method != INITIALIZE:
        return (
            f"{clipped(method)} came before the session was initialized: send initialize "
            "first (then notifications/initialized)."
        )
    return f"invalid params for {clipped(method)}: the MCP SDK refused them."


class Sent(Replies, Protocol):
    """The SDK's write stream, as the server uses it."""

    async def aclose(self) -> None: ...


class _Closable(Protocol):
    async def aclose(self) -> None: ...


S = TypeVar("S", bound=_Closable)


class _Wrapped(Generic[S]):
    """A wrapper of one of the SDK's streams: closing it (directly or at the end of an
    ``async with`` block) closes the stream it wraps."""

    inner: S

    async def aclose(self) -> None:
        """Close the SDK's stream."""
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


class AnswerLedger(_Wrapped[Sent]):
    """The server's write stream, counting the requests read and not yet answered, and
    giving the SDK's bare refusals of them their reason (:func:`explained_refusal`)."""

    def __init__(self, inner: Sent) -> None:
        self.inner = inner
        self._open: Counter[int | str] = Counter()
        self._requests: dict[int | str, tuple[str, Any]] = {}
        self._initializing: set[int | str] = set()
        self.initialized = False
        self._idle = anyio.Event()
        self._idle.set()

    def opened(self, request_id: int | str, method: str = "", params: Any = None) -> None:
        """A request with this id was read; its answer is due."""
        if self._idle.is_set():
            self._idle = anyio.Event()
        self._open[request_id] += 1
        self._requests[request_id] = (method, params)
        if method == INITIALIZE:
            self._initializing.add(request_id)

    def settled(self, request_id: Any) -> None:
        """The request with this id was answered, or the client cancelled it (the server
        then sends no answer)."""
        if not isinstance(request_id, int | str) or self._open[request_id] <= 0:
            return
        self._open[request_id] -= 1
        if self._open[request_id] == 0:
            del self._open[request_id]
            self._requests.pop(request_id, None)
        if not self._open:
            self._idle.set()

    async def all_answered(self) -> None:
        """Wait until every request read so far has been answered or cancelled."""
        await self._idle.wait()

    async def send(self, item: SessionMessage, /) -> None:
        """Write ``item``; an answer settles its request."""
        message = item.message
        if isinstance(message, JSONRPCError) and _bare(message.error):
            item = SessionMessage(self._explained(message), metadata=item.metadata)
            message = item.message
        await self.inner.send(item)
        if isinstance(message, JSONRPCResponse) and message.id in self._initializing:
            self.initialized = True
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            self._initializing.discard(message.id)
            self.settled(message.id)

    def _explained(self, answer: JSONRPCError) -> JSONRPCError:
        """``answer`` (the SDK's bare refusal) with the reason it refused the request."""
        request = None if answer.id is None else self._requests.get(answer.id)
        if request is None:
            return answer
        method, params = request
        text = explained_refusal(method, params, initialized=self.initialized)
        error = ErrorData(code=answer.error.code, message=text, data=answer.error.data)
        return JSONRPCError(jsonrpc="2.0", id=answer.id, error=error)


def _bare(error: ErrorData) -> bool:
    """Whether ``error`` is the SDK's refusal without a reason."""
    return (
        error.code == INVALID_PARAMS
        and error.message == SDK_BARE_REFUSAL
        and error.data in (None, "")
    )


class AnsweringReader(_Wrapped[Received]):
    """The SDK's read stream, minus the requests its parser or its message model refused:
    each of those is answered on ``replies`` (the stream the server writes to) instead of
    being dropped. With a ``ledger`` (``replies`` counting what is due), the end of the
    input is held back until every request read has been answered."""

    def __init__(
        self,
        inner: Received,
        replies: Replies,
        ledger: AnswerLedger | None = None,
    ) -> None:
        self.inner = inner
        self.replies = replies
        self.ledger = ledger

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message (the SDK's dispatcher restores it)."""
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        """The next message the server should see."""
        while True:
            try:
                item = await self.inner.receive()
            except anyio.EndOfStream:
                if self.ledger is not None:
                    await self.ledger.all_answered()
                raise
            if not isinstance(item, Exception):
                self._note(item)
                return item
            errors = refused_request_errors(item)
            if not errors:
                return item
            for error in errors:
                logger.info("answered request %r, which the MCP SDK could not read", error.id)
                await self.replies.send(SessionMessage(error))

    def _note(self, item: SessionMessage) -> None:
        """Count a request as due, and a client's cancellation as settling one."""
        if self.ledger is None:
            return
        message = item.message
        if isinstance(message, JSONRPCRequest):
            self.ledger.opened(message.id, message.method, message.params)
        elif isinstance(message, JSONRPCNotification) and message.method == CANCELLED:
            params = message.params or {}
            self.ledger.settled(params.get("requestId"))

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
