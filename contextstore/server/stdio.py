"""JSON-RPC over stdin/stdout: one JSON message per line, as MCP's stdio transport frames them.

The client (an editor extension, an agent) spawns ``contextstore serve --stdio`` as its child
and writes one request, notification or batch per line; each answer is one line on stdout.
stdout carries nothing else: the process's file descriptor 1 is pointed at stderr while the
server runs, so a stray write from any library lands in the log, never in the protocol.
Calls run one at a time, in the order received. End of input stops the server; so does
SIGTERM or SIGINT, after the call in progress has been answered (exit status 0).

A line is read up to ``max_line_bytes`` (the HTTP server's body limit, 34 MiB by default),
never further: a longer one is skipped to its end without being kept, answered with an
invalid-request error (id null: it was never read), and the next line is served as usual.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, BinaryIO

from contextstore.server.jsonrpc import (
    INVALID_REQUEST,
    Dispatcher,
    encode,
    error_response,
    logger,
)
from contextstore.server.limits import DEFAULT_MAX_REQUEST_BYTES

SKIP_CHUNK = 2**20
"""How much of an over-long line is read (and dropped) at a time."""


def claim_stdout() -> BinaryIO:
    """Keep the real stdout for the protocol and point fd 1 (and ``sys.stdout``) at stderr."""
    sys.stdout.flush()
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


Line = tuple[bytes, int | None]
"""A line read (its line feed, and a carriage return before it, left out), and its length
when it was over the limit (then it was read to its end and dropped: the bytes are empty)."""


def read_line(stream: BinaryIO, limit: int) -> Line | None:
    """The next :data:`Line` of ``stream``, or None at end of input. At most ``limit`` + 2
    bytes of a line are held at once, however long it is."""
    line = stream.readline(limit + 2)
    if not line:
        return None
    ended = line.endswith(b"\n")
    whole = ended or len(line) < limit + 2  # else the limit cut it off
    content = line[:-1] if ended else line
    if whole and content.endswith(b"\r"):
        content = content[:-1]
    if whole and len(content) <= limit:
        return content, None
    size = len(content)
    while not ended:  # drop the rest of the line, a chunk at a time
        rest = stream.readline(SKIP_CHUNK)
        ended = rest.endswith(b"\n") or not rest
        size += len(rest) - int(rest.endswith(b"\n"))
    return b"", size


def over_long(size: int, limit: int) -> bytes:
    """The answer to a line of ``size`` bytes, over ``limit``."""
    return encode(
        error_response(
            None,
            INVALID_REQUEST,
            f"invalid request: the line is {size:,} bytes, over the {limit:,} the server "
            "reads as one message; it was skipped unread (nothing was called). Send each "
            "message on a line of its own, within the limit (--max-request-bytes raises it).",
        )
    )


def serve_stdio(
    dispatcher: Dispatcher,
    stdin: BinaryIO,
    stdout: BinaryIO,
    *,
    max_line_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> None:
    """Answer every line of ``stdin`` on ``stdout`` until end of input, SIGTERM or SIGINT;
    a line over ``max_line_bytes`` is answered with an error, unread."""
    state = {"busy": False, "stop": False}

    def on_stop(signum: int, frame: Any) -> None:
        state["stop"] = True
        if not state["busy"]:
            raise SystemExit(0)

    stopping = (signal.SIGTERM, signal.SIGINT)  # SIGINT: Ctrl-C where it runs in a terminal
    previous = {signum: signal.signal(signum, on_stop) for signum in stopping}
    try:
        while (read := read_line(stdin, max_line_bytes)) is not None:
            line, over = read
            if over is None and not line.strip():
                continue
            state["busy"] = True
            if over is not None:
                logger.warning("a line of %s bytes was over the limit and skipped", f"{over:,}")
                response: bytes | None = over_long(over, max_line_bytes)
            else:
                response = dispatcher.handle_bytes(line)
            if response is not None:
                stdout.write(response + b"\n")
                stdout.flush()
            state["busy"] = False
            if state["stop"]:
                break
    except BrokenPipeError:
        logger.info("the client closed stdout; stopping")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
