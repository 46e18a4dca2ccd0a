"""The ways in for other languages: ``serve`` (JSON-RPC over stdio or HTTP) and ``mcp``."""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path
from types import ModuleType

import click

from contextstore.cli.common import IntegerRange, handle_errors, open_store, shown_location
from contextstore.core.errors import ReadOnlyLocationError
from contextstore.server.limits import DEFAULT_MAX_REQUEST_BYTES, MAX_REQUEST_BYTES_LIMIT

EXTRAS = {"starlette": "server", "uvicorn": "server", "mcp": "mcp"}


def _import_extra(module: str) -> ModuleType:
    """Import a server module, or stop with the one line that installs what it needs."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in EXTRAS:
            raise
        click.echo(
            f'error: this command needs {missing}; pip install "contextstore[{EXTRAS[missing]}]"',
            err=True,
        )
        sys.exit(1)


def _log_to_stderr(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=level.upper(),
        format="contextstore: %(levelname)s %(name)s: %(message)s",
    )
    if level != "debug":  # migrations at start are not news
        logging.getLogger("alembic").setLevel(logging.WARNING)


@click.command()
@click.option("--stdio", is_flag=True, help="JSON-RPC 2.0 on stdin/stdout, one message a line.")
@click.option("--http", "address", metavar="HOST:PORT", help="JSON-RPC 2.0 at POST /rpc.")
@click.option(
    "--describe", is_flag=True, help="Print the OpenRPC document of every method and exit."
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File holding the bearer token (default: generated into the data directory).",
)
@click.option("--allow-remote", is_flag=True, help="Allow a non-loopback --http address.")
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Another Host header name to accept (repeatable; for --allow-remote).",
)
@click.option(
    "--max-request-bytes",
    type=IntegerRange(min=1024, max=MAX_REQUEST_BYTES_LIMIT),
    default=None,
    help="Largest HTTP request body, or --stdio line (default: 34 MiB; at most 1 GiB).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="What the server logs on stderr (debug: every call).",
)
@click.pass_context
@handle_errors
def serve(
    ctx: click.Context,
    stdio: bool,
    address: str | None,
    describe: bool,
    token_file: Path | None,
    allow_remote: bool,
    allow_hosts: tuple[str, ...],
    max_request_bytes: int | None,
    log_level: str,
) -> None:
    """Serve the whole store API as JSON-RPC 2.0 to agents in any language.

    --stdio for a client that spawns the server (one JSON message a line), --http HOST:PORT
    for several clients sharing one store (bearer token, loopback only unless
    --allow-remote), --describe for the OpenRPC document.
    """
    if sum((stdio, address is not None, describe)) != 1:
        raise click.UsageError("give exactly one of --stdio, --http HOST:PORT or --describe.")
    if describe:
        openrpc = _import_extra("contextstore.server.openrpc")
        click.echo(json.dumps(openrpc.describe(), indent=2))
        return
    _log_to_stderr(log_level)
    if stdio:
        _serve_stdio(ctx, max_request_bytes)
    else:
        assert address is not None
        _serve_http(ctx, address, token_file, allow_remote, allow_hosts, max_request_bytes)


def _serve_stdio(ctx: click.Context, max_request_bytes: int | None) -> None:
    from contextstore.server.jsonrpc import Dispatcher
    from contextstore.server.stdio import claim_stdout, serve_stdio

    protocol = claim_stdout()
    store = open_store(ctx)
    click.echo(
        f"contextstore: serving JSON-RPC on stdin/stdout ({shown_location(store.location)})",
        err=True,
    )
    limit = max_request_bytes or DEFAULT_MAX_REQUEST_BYTES
    serve_stdio(Dispatcher(store), sys.stdin.buffer, protocol, max_line_bytes=limit)


def _serve_http(
    ctx: click.Context,
    address: str,
    token_file: Path | None,
    allow_remote: bool,
    allow_hosts: tuple[str, ...],
    max_request_bytes: int | None,
) -> None:
    http = _import_extra("contextstore.server.http")
    from contextstore.server.auth import load_token
    from contextstore.server.jsonrpc import Dispatcher

    host, port = http.parse_address(address)
    token, token_path = load_token(token_file)
    store = open_store(ctx)
    sock = http.bind(host, port, allow_remote=allow_remote)
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host

    def ready() -> None:
        click.echo(
            f"contextstore: serving JSON-RPC at http://{shown}:{bound_port}/rpc "
            f"({shown_location(store.location)})",
            err=True,
        )
        click.echo(f"contextstore: bearer token in {token_path}", err=True)

    http.serve_http(
        Dispatcher(store),
        sock,
        token=token,
        hosts=http.allowed_host_names(host, allow_hosts),
        max_request_bytes=max_request_bytes or DEFAULT_MAX_REQUEST_BYTES,
        on_ready=ready,
    )
    click.echo("contextstore: stopped", err=True)


@click.command()
@click.option("--allow-writes", is_flag=True, help="Also offer the checkpoint and rollback tools.")
@click.pass_context
@handle_errors
def mcp(ctx: click.Context, allow_writes: bool) -> None:
    """An MCP server (stdio) that lets an agent read its own durable history.

    Tools list, search, show (as of any moment) and audit conversations, list their
    checkpoints and show a request as it was sent; the store is opened read-only unless
    --allow-writes, which adds the checkpoint and rollback tools.
    """
    if allow_writes and (ctx.find_root().obj or {}).get("read_only"):
        # Taken together, the write tools were offered and each call failed in Python's
        # terms ("open it without read_only=True to write").
        raise click.UsageError(
            "--allow-writes offers tools that write to the database, and --read-only opens "
            "it so that nothing can be written; drop one of them."
        )
    mcp_server = _import_extra("contextstore.server.mcp_server")
    _log_to_stderr("warning")
    try:
        # A first run (an MCP client configured before the agent stored anything) is told
        # where the store was looked for, rather than served an empty one.
        store = open_store(ctx, existing=True, read_only=not allow_writes)
    except ReadOnlyLocationError as exc:
        if not allow_writes:
            raise
        raise ReadOnlyLocationError(
            f"{exc.situation}; --allow-writes offers tools that write to the database, so it "
            "needs one that can be written; drop --allow-writes to serve the reading tools "
            "there, or point --db at a database that can be written."
        ) from exc
    mcp_server.build_server(store, allow_writes=allow_writes).run("stdio")
