"""Model requests: their usage and cost, and the exact payload of one, rebuilt and verified."""

from __future__ import annotations

import shlex
from typing import Any

import click

from contextstore.cli import terminal
from contextstore.cli.common import IntegerRange, command_line, json_option, open_store
from contextstore.cli.output import has_usage
from contextstore.cli.times import format_ts
from contextstore.core.errors import RequestNotFoundError
from contextstore.core.records import RequestRecord
from contextstore.core.validate import MAX_INT32


def request_json(record: RequestRecord) -> dict[str, Any]:
    """A request's JSON fields (documented in the README)."""
    return {
        "id": record.id,
        "conversation_id": record.conversation_id,
        "ts": record.ts,
        "model_id": record.model_id,
        "format": record.format,
        "tokens_in": record.tokens_in,
        "tokens_out": record.tokens_out,
        "cache_writes": record.cache_writes,
        "cache_reads": record.cache_reads,
        "total_tokens": record.total_tokens,
        "cost": record.cost,
        "failure": record.failure,
        "payload_sha256": record.payload_sha256,
    }


def _cost(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


@click.command("requests")
@click.argument("conversation_id", metavar="CID")
@json_option
@click.pass_context
def list_requests(ctx: click.Context, conversation_id: str, as_json: bool) -> None:
    """List a conversation's model requests: tokens, cost, failures, oldest first."""
    store = open_store(ctx, auto_migrate=False)
    found = store.requests(conversation_id)
    if as_json:
        terminal.print_json([request_json(r) for r in found])
        return
    terminal.table(
        (
            "id",
            "time",
            "model",
            "in",
            "out",
            "cache w",
            "cache r",
            "total",
            "cost",
            "payload",
            "failure",
        ),
        [
            (
                r.id,
                format_ts(r.ts),
                r.model_id or "",
                r.tokens_in,
                r.tokens_out,
                r.cache_writes,
                r.cache_reads,
                r.total_tokens if has_usage(r) else "",
                _cost(r.cost),
                r.format or "" if r.payload_sha256 else "",
                r.failure or "",
            )
            for r in found
        ],
    )


@click.command("request")
@click.argument("conversation_id", metavar="CID")
@click.argument("request_id", metavar="ID", type=IntegerRange(1, MAX_INT32))
@click.option(
    "--payload",
    is_flag=True,
    help="Print the exact request body sent to the model, rebuilt from rows and verified "
    "against its stored SHA-256.",
)
@json_option
@click.pass_context
def show_request(
    ctx: click.Context, conversation_id: str, request_id: int, payload: bool, as_json: bool
) -> None:
    """Show one model request; with --payload, its exact body (rebuilt and verified)."""
    store = open_store(ctx, auto_migrate=False)
    found = [r for r in store.requests(conversation_id) if r.id == request_id]
    if not found:
        raise RequestNotFoundError(
            f"conversation {conversation_id!r} has no request {request_id}; list them with "
            f"'contextstore requests {shlex.quote(conversation_id)}'."
        )
    if payload:
        terminal.print_json(store.request_payload(conversation_id, request_id))
        return
    record = found[0]
    if as_json:
        terminal.print_json(request_json(record))
        return
    terminal.fields(
        [
            ("request", record.id),
            ("conversation", record.conversation_id),
            ("time", f"{format_ts(record.ts)} (ts {record.ts})"),
            ("model", record.model_id),
            ("format", record.format),
            ("tokens in", record.tokens_in),
            ("tokens out", record.tokens_out),
            ("cache writes", record.cache_writes),
            ("cache reads", record.cache_reads),
            ("total tokens", record.total_tokens if has_usage(record) else "(no usage recorded)"),
            ("cost", _cost(record.cost)),
            ("failure", record.failure),
            ("payload sha256", record.payload_sha256 or "(not prepared here: no payload)"),
        ]
    )
    if record.payload_sha256:
        body = command_line(ctx, "request", conversation_id, str(record.id), "--payload")
        terminal.note(f"the exact body: {body}")
