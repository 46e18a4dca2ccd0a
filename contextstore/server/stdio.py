"""JSON-RPC over stdin/stdout: one JSON message per line, as MCP's stdio transport frames them.

The client (an editor extension, an agent) spawns ``contextstore serve --stdio`` as its child
and writes one request, notification or batch per line; each answer is one line on stdout.
stdout carries nothing else: the process's file descriptor 1 is pointed at stderr while the
server runs, so a stray write from any library lands in the log, never in the protocol.
Calls run one at a time, in the order received. End of input stops the server; so does
SIGTERM or SIGINT, after the call in progress has been answered (exit status 0).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, BinaryIO

from contextstore.server.jsonrpc import Dispatcher, logger


def claim_stdout() -> BinaryIO:
    """Keep the real stdout for the protocol and point fd 1 (and ``sys.stdout``) at stderr."""
    sys.stdout.flush()
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


def serve_stdio(dispatcher: Dispatcher, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Answer every line of ``stdin`` on ``stdout`` until end of input, SIGTERM or SIGINT."""
    state = {"busy": False, "stop": False}

    def on_stop(signum: int, frame: Any) -> None:
        state["stop"] = True
        if not state["busy"]:
            raise SystemExit(0)

    stopping = (signal.SIGTERM, signal.SIGINT)  # SIGINT: Ctrl-C where it runs in a terminal
    previous = {signum: signal.signal(signum, on_stop) for signum in stopping}
    try:
        for line in stdin:
            if not line.strip():
                continue
            state["busy"] = True
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
