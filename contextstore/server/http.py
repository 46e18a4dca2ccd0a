"""JSON-RPC over HTTP: ``POST /rpc`` on uvicorn, for several agents sharing one store.

Every request passes three checks before its body is read, in this order:

1. its ``Host`` header names the address the server is bound to (``localhost`` too when
   that is a loopback address, and names given with ``--allow-host``), else 421: a web page
   whose domain was re-pointed at 127.0.0.1 (DNS rebinding) cannot reach the store;
2. it carries ``Authorization: Bearer <token>``, else 401;
3. its body is at most ``max_request_bytes``, else 413; and it is not compressed
   (a ``Content-Encoding`` other than ``identity``), else 415.

The JSON-RPC answer comes back with 200 (204 when the body held only notifications). Every
refusal (401, 404, 405, 413, 415, 421) has a JSON body ``{"error": "..."}`` saying what to do; a
path with a trailing slash (``/rpc/``) is a 404 that names the path, never a redirect. Store
calls block, so each body is answered in a worker thread, off the event loop. On SIGTERM or
SIGINT the server stops accepting connections, answers the requests in flight, and exits 0.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import anyio.to_thread
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from contextstore.core.errors import InvalidInputError
from contextstore.server.jsonrpc import Dispatcher, logger
from contextstore.server.limits import DEFAULT_MAX_REQUEST_BYTES

GRACEFUL_SHUTDOWN_SECONDS = 30
"""How long a stopping server waits for the requests in flight."""

LOCAL_NAMES = ("localhost",)

ROUTES_HINT = "send JSON-RPC with POST /rpc (GET /health answers whether the server is up)"
"""What a request to another path or with another method is told to do instead."""


NO_PORT = -1
"""The port :func:`split_host_header` gives a ``Host`` whose port is not a number (no
server listens there, so such a header never names this one)."""


def split_host_header(value: str) -> tuple[str, int | None]:
    """``"[::1]:8080"`` -> ``("::1", 8080)``; ``"localhost"`` -> ``("localhost", None)``;
    ``"localhost:abc"`` -> ``("localhost", NO_PORT)``."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        if rest and not rest.startswith(":"):
            return host, NO_PORT
        port_text = rest[1:]
    else:
        host, _, port_text = value.partition(":") if value.count(":") == 1 else (value, "", "")
    if not port_text:
        return host, None
    return host, int(port_text) if port_text.isascii() and port_text.isdigit() else NO_PORT


def bearer_token(values: list[bytes]) -> bytes | None:
    """The token of the request's one ``Authorization: Bearer <token>`` header (the
    scheme's case does not matter, RFC 9110), or None: no such header, another scheme,
    or more than one ``Authorization`` header."""
    if len(values) != 1:
        return None
    scheme, _, credentials = values[0].strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return credentials.strip()


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses."""
    if host.lower() in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allowed_host_names(bound_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The ``Host`` names accepted for a server bound to ``bound_host``."""
    names = {bound_host.lower(), *(name.lower() for name in extra)}
    try:
        wildcard = ipaddress.ip_address(bound_host).is_unspecified
    except ValueError:
        wildcard = False
    if wildcard:
        names.update({"localhost", "127.0.0.1", "::1"})
    elif is_loopback(bound_host):
        # "localhost" is bound as 127.0.0.1 (see bind), so clients may name either.
        names.update({"localhost", "127.0.0.1"} if bound_host == "localhost" else {"localhost"})
    return frozenset(names)


class GuardMiddleware:
    """Refuses requests with a foreign ``Host`` (421) or without the bearer token (401)."""

    def __init__(self, app: ASGIApp, *, token: str, hosts: frozenset[str], port: int) -> None:
        self.app = app
        self.expected = token.encode()
        self.hosts = hosts
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hosts = [value for name, value in scope["headers"] if name == b"host"]
        host, port = split_host_header(hosts[0].decode("latin-1") if len(hosts) == 1 else "")
        token = bearer_token(
            [value for name, value in scope["headers"] if name == b"authorization"]
        )
        if host not in self.hosts or (port is not None and port != self.port):
            response: Response = JSONResponse(
                {"error": "the Host header does not name this server; connect to its address"},
                status_code=421,
            )
        elif token is None or not hmac.compare_digest(token, self.expected):
            response = JSONResponse(
                {"error": "send 'Authorization: Bearer <token>' with the server's token"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="contextstore"'},
            )
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)


def _declared_over(declared: str, limit: int) -> bool:
    """Whether a ``Content-Length`` value declares more than ``limit`` bytes. Only ASCII
    digits are a size (``"²".isdigit()`` is true and ``int("²")`` raises); anything else
    declares nothing, and the body read is capped all the same. A number longer than the
    limit's is over it (``int`` refuses one of over 4,300 digits)."""
    if not (declared.isascii() and declared.isdigit()):
        return False
    digits = declared.lstrip("0")
    return len(digits) > len(str(limit)) or int(digits or "0") > limit


async def _read_body(request: Request, limit: int) -> bytes | None:
    if _declared_over(request.headers.get("content-length", ""), limit):
        return None
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    dispatcher: Dispatcher,
    *,
    token: str,
    hosts: frozenset[str],
    port: int,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    on_ready: Callable[[], None] | None = None,
) -> ASGIApp:
    """The ASGI application: ``POST /rpc`` and ``GET /health``, behind the guard."""

    async def rpc(request: Request) -> Response:
        coding = request.headers.get("content-encoding", "identity").strip().lower()
        if coding != "identity":
            return JSONResponse(
                {
                    "error": f"the body is sent with Content-Encoding: {coding}, which the "
                    "server does not decode; send the JSON uncompressed"
                },
                status_code=415,
            )
        try:
            body = await _read_body(request, max_request_bytes)
        except ClientDisconnect:  # nothing was called: half a request is never a message
            logger.info("a client disconnected before its request was complete")
            return Response(status_code=400)
        if body is None:
            return JSONResponse(
                {"error": f"the request body is over {max_request_bytes:,} bytes; split it"},
                status_code=413,
            )
        answer = await anyio.to_thread.run_sync(dispatcher.handle_bytes, body)
        if answer is None:
            return Response(status_code=204)
        return Response(answer, media_type="application/json")

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if on_ready is not None:
            on_ready()
        yield

    routes = [Route("/rpc", rpc, methods=["POST"]), Route("/health", health, methods=["GET"])]
    paths = {route.path for route in routes}

    async def no_route(request: Request, exc: Exception) -> Response:
        # Starlette's own 404 and 405 are plain text; a client parsing JSON reads this.
        assert isinstance(exc, HTTPException)
        path = request.url.path
        meant = path.rstrip("/")
        trailing = meant != path and meant in paths
        slash = f": the path is {meant}, without the trailing slash" if trailing else ""
        return JSONResponse(
            {"error": f"{request.method} {path} is not served{slash}; {ROUTES_HINT}"},
            status_code=exc.status_code,
            headers=exc.headers,
        )

    app = Starlette(
        routes=routes, exception_handlers={404: no_route, 405: no_route}, lifespan=lifespan
    )
    # Starlette would answer /rpc/ with a redirect to /rpc, which many clients follow with
    # a GET or without the body (or not at all): one path, and a 404 that names it.
    app.router.redirect_slashes = False
    return GuardMiddleware(app, token=token, hosts=hosts, port=port)


def parse_address(address: str) -> tuple[str, int]:
    """``"127.0.0.1:8765"`` or ``"[::1]:8765"`` -> host and port (0 picks a free port)."""
    host, port = split_host_header(address)
    if not host or port is None or not 0 <= port <= 65535:  # NO_PORT: not a number
        raise InvalidInputError(
            f"--http takes HOST:PORT (for example 127.0.0.1:8765, or port 0 for a free one), "
            f"got {address!r}."
        )
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise InvalidInputError(
                f"--http needs an IP address or localhost, got {host!r}."
            ) from None
    return host, port


def bind(host: str, port: int, *, allow_remote: bool) -> socket.socket:
    """A socket bound to ``host:port``; refuses a non-loopback address without allow_remote."""
    if not allow_remote and not is_loopback(host):
        raise InvalidInputError(
            f"{host} is not a loopback address; the server listens on loopback only unless "
            "--allow-remote is given (see the README's security model first)."
        )
    address = "127.0.0.1" if host == "localhost" else host
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    if sys.platform != "win32":
        # Rebinds a port whose last server's connections wait in TIME_WAIT. On Windows it
        # would let this socket take a port another program listens on: asyncio's servers
        # set it on POSIX only, for that reason.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        raise InvalidInputError(f"cannot listen on {host}:{port}: {exc.strerror}.") from None
    # Listening now means a client that read the readiness line can connect at once.
    sock.listen(128)
    return sock


def serve_http(
    dispatcher: Dispatcher,
    sock: socket.socket,
    *,
    token: str,
    hosts: frozenset[str],
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve ``POST /rpc`` on the bound socket until SIGTERM or SIGINT."""
    app = create_app(
        dispatcher,
        token=token,
        hosts=hosts,
        port=sock.getsockname()[1],
        max_request_bytes=max_request_bytes,
        on_ready=on_ready,
    )
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        lifespan="on",
    )
    # uvicorn re-raises the signal that stopped it once it has shut down gracefully; a
    # handler of our own makes that a normal exit.
    previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stopped(signum: int, frame: Any) -> None:
    """A signal that arrives after uvicorn's own handlers are gone: already shutting down."""
