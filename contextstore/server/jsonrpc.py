"""JSON-RPC 2.0 over the method table: single calls, batches and notifications.

Transport-free: :meth:`Dispatcher.handle_bytes` takes one JSON text and returns the response
text (or None when nothing must be answered: a notification, or a batch of them). Every
failure becomes an error object and the dispatcher goes on serving:

- -32700 the text is not JSON; -32600 not a request object (``params`` that is present
  but neither an object nor an array, ``null`` included); -32601 no such method;
- -32602 the params do not fit (by position, unknown or missing names, wrong types), and
  any :class:`InvalidInputError` the store raises for them;
- -32000 - exit_code for the other store errors (-32003 not found, -32005 integrity, ...);
- -32603 an unexpected error (logged with its traceback on the server's stderr).

A store error's ``data`` carries ``error_class``, ``message`` and ``exit_code`` (the CLI's
exit code for the same error), and so does a refused ``params`` (-32600 or -32602, with its
``problems``); messages name methods and params, not Python calls
(:mod:`contextstore.server.wording`).
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Mapping
from typing import Any

from contextstore.core.errors import ContextStoreError, InvalidInputError
from contextstore.core.validate import MAX_JSON_DEPTH, MAX_PARSED_JSON_DEPTH, nests_deeper_than
from contextstore.server.methods import METHODS, InvalidParamsError, Method
from contextstore.server.wording import rpc_wording
from contextstore.store import ContextStore

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
STORE_ERROR_BASE = -32000

logger = logging.getLogger("contextstore.server")

MAX_ECHOED_NAME = 100
"""The most characters of an unknown method's name an error repeats."""


def error_code(exc: ContextStoreError) -> int:
    """The JSON-RPC error code of a store error: -32602 for bad input, else -32000 - exit code."""
    if isinstance(exc, InvalidInputError):
        return INVALID_PARAMS
    return STORE_ERROR_BASE - exc.exit_code


def error_data(exc: ContextStoreError) -> dict[str, Any]:
    """The ``data`` member for a store error: its class, message and CLI exit code."""
    data: dict[str, Any] = {
        "error_class": type(exc).__name__,
        "message": rpc_wording(str(exc)),
        "exit_code": exc.exit_code,
    }
    if isinstance(exc, InvalidParamsError):
        data["problems"] = exc.problems
    return data


def error_response(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response object."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (``null``, ``a string``...), for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class UnreadableNumberError(ValueError):
    """A JSON integer with more digits than Python converts (``sys.get_int_max_str_digits``)."""

    def __init__(self, digits: int) -> None:
        self.digits = digits
        super().__init__(
            f"the message holds an integer of {digits:,} digits, more than the server reads "
            f"({sys.get_int_max_str_digits():,}); send such a number as a string"
        )


def parse_int(text: str) -> int:
    """A JSON integer as Python's ``int``, for ``json.loads(parse_int=...)``.

    Raises:
        UnreadableNumberError: it has more digits than ``int`` converts.
    """
    try:
        return int(text)
    except ValueError:  # the digit limit: the scanner hands over only well-formed integers
        raise UnreadableNumberError(len(text.lstrip("-"))) from None


def _not_utf8(exc: UnicodeDecodeError) -> str:
    """A parse error for bytes that do not decode, in the client's terms (not the codec's)."""
    return (
        f"parse error: the message is not UTF-8 text (the byte 0x{exc.object[exc.start]:02x} "
        f"at offset {exc.start:,} cannot be read); send JSON encoded as UTF-8."
    )


def clipped(name: str, limit: int = MAX_ECHOED_NAME) -> str:
    """``name`` quoted as an error repeats it: its first ``limit`` characters and an
    ellipsis when it is longer (a client's 1 MB name is not sent back whole)."""
    if len(name) <= limit:
        return repr(name)
    return f"{name[:limit]!r}... ({len(name):,} characters)"


def _valid_id(value: Any) -> bool:
    """A string, a number that can be sent back (``1e999`` reads as infinity) or null."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or (isinstance(value, str | int) and not isinstance(value, bool))


def encode(message: Any) -> bytes:
    """One JSON message as compact UTF-8 (no newline inside, so it frames as one line)."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # A lone surrogate (JSON allows "\ud800") goes back out as the same escape.
    return text.encode("utf-8", "backslashreplace")


def _nested_too_deeply() -> bytes:
    """The parse error for a message nested past what is parsed (on every Python alike)."""
    return encode(
        error_response(
            None,
            PARSE_ERROR,
            "parse error: the message nests arrays or objects too deeply to be read; "
            f"the store keeps JSON at most {MAX_JSON_DEPTH} levels deep.",
        )
    )


class Dispatcher:
    """Answers JSON-RPC messages by calling the store through the method table."""

    def __init__(self, store: ContextStore, methods: Mapping[str, Method] = METHODS) -> None:
        self.store = store
        self.methods = methods

    def handle_bytes(self, data: bytes | str) -> bytes | None:
        """Answer one JSON text (a request, a notification or a batch)."""
        try:
            if isinstance(data, bytes):
                # UTF-8 only, as JSON between systems must be (json.loads would also guess
                # UTF-16 and UTF-32); a byte order mark is tolerated.
                data = data.decode("utf-8-sig")
            message = json.loads(data, parse_constant=_reject_constant, parse_int=parse_int)
            if nests_deeper_than(data, message, MAX_PARSED_JSON_DEPTH):
                return _nested_too_deeply()  # as Python 3.11 could not parse it
        except RecursionError:
            return _nested_too_deeply()
        except UnicodeDecodeError as exc:
            return encode(error_response(None, PARSE_ERROR, _not_utf8(exc)))
        except UnreadableNumberError as exc:
            return encode(error_response(None, PARSE_ERROR, f"parse error: {exc}."))
        except ValueError as exc:
            return encode(
                error_response(None, PARSE_ERROR, f"parse error: the message is not JSON ({exc})")
            )
        response = self.handle(message)
        if response is None:
            return None
        try:
            return encode(response)
        except (TypeError, ValueError):
            logger.exception("a response could not be encoded as JSON")
            return encode(
                error_response(None, INTERNAL_ERROR, "internal error: see the server's log")
            )

    def handle(self, message: Any) -> Any:
        """Answer one decoded message: a response object, a list of them, or None."""
        if isinstance(message, list):
            if not message:
                return error_response(None, INVALID_REQUEST, "invalid request: an empty batch")
            responses = [r for r in (self._one(item) for item in message) if r is not None]
            return responses or None
        return self._one(message)

    def _one(self, message: Any) -> dict[str, Any] | None:
        if not isinstance(message, dict):
            return error_response(
                None, INVALID_REQUEST, "invalid request: a request is a JSON object"
            )
        request_id = message.get("id")
        if not _valid_id(request_id):
            return error_response(
                None,
                INVALID_REQUEST,
                "invalid request: id must be a string, a finite number or null",
            )
        method_name = message.get("method")
        params = message.get("params")
        if message.get("jsonrpc") != "2.0" or not isinstance(method_name, str):
            return error_response(
                request_id,
                INVALID_REQUEST,
                'invalid request: it needs "jsonrpc": "2.0" and a "method" string',
            )
        if "params" in message and not isinstance(params, dict | list):
            # JSON-RPC 2.0 (4.2): params, when present, is an object or an array; anything
            # else (null included) makes the message an invalid request, answered even
            # without an id (as the specification's own example of one).
            refused = InvalidParamsError(
                f"invalid request: params must be an object of named parameters, or left "
                f"out, not {json_type(params)}",
                [{"param": "params", "message": "must be an object of named parameters"}],
            )
            return error_response(request_id, INVALID_REQUEST, str(refused), error_data(refused))
        notification = "id" not in message
        response = self._call(request_id, method_name, params)
        if notification:
            if "error" in response:
                logger.warning(
                    "notification %s failed: %s", clipped(method_name), response["error"]
                )
            return None
        return response

    def _call(self, request_id: Any, method_name: str, params: Any) -> dict[str, Any]:
        method = self.methods.get(method_name)
        if method is None:
            return error_response(
                request_id,
                METHOD_NOT_FOUND,
                f"method not found: {clipped(method_name)}; 'contextstore serve --describe' "
                "lists the methods",
            )
        if isinstance(params, list):
            refused = InvalidParamsError(
                f"invalid params for {method_name}: params must be an object of named "
                "parameters (by name, as in the Python API), not an array",
                [{"param": "params", "message": "must be an object of named parameters"}],
            )
            return error_response(request_id, INVALID_PARAMS, str(refused), error_data(refused))
        logger.debug("calling %s (id %r)", method_name, request_id)
        try:
            result = method.call(self.store, params)
        except ContextStoreError as exc:
            return error_response(
                request_id, error_code(exc), rpc_wording(str(exc)), error_data(exc)
            )
        except Exception as exc:
            logger.exception("method %s failed unexpectedly", method_name)
            return error_response(
                request_id,
                INTERNAL_ERROR,
                f"internal error in {method_name} ({type(exc).__name__}); the server's log "
                "(stderr) has the traceback",
            )
        return {"jsonrpc": "2.0", "id": request_id, "result": result}
