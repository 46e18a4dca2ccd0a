"""For auditors: one conversation's audit, read-only SQL, search, Datasette metadata."""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from contextstore.cli import terminal
from contextstore.cli.common import IntegerRange, json_option, open_store
from contextstore.cli.history import conversation_json
from contextstore.cli.output import DEDUP_COLUMNS, clipped, dedup_rows, has_usage, ordered_counts
from contextstore.cli.settings import window_text
from contextstore.cli.timeline import checkpoint_json
from contextstore.cli.times import format_ts
from contextstore.core.audit_records import REMOVED_NOTHING, AuditReport
from contextstore.core.validate import MAX_INT32


def audit_json(report: AuditReport) -> dict[str, Any]:
    """An audit's JSON: the records' fields, which are the audit views' column names."""

    def rows(items: list[Any]) -> list[dict[str, Any]]:
        return [dataclasses.asdict(item) for item in items]

    return {
        "conversation": conversation_json(report.conversation),
        "context_window": report.context_window,
        "max_allowed_size": report.max_allowed_size,
        "totals": {
            "requests": len(report.requests),
            "cost": report.total_cost,
            "peak_total_tokens": report.peak_tokens,
            "peak_percent_of_window": report.peak_percent_of_window,
            "truncations": len(report.truncations),
            "chars_saved_by_dedup": report.chars_saved,
            "secrets_masked": sum(s.count for s in report.masked_secrets),
            "failed_tool_calls": len(report.failed_tool_calls),
            "rollbacks": len(report.rollbacks),
        },
        "requests": rows(report.requests),
        "truncations": rows(report.truncations),
        "file_reads": rows(report.file_reads),
        "dedup_savings": rows(report.dedup_savings),
        "masked_secrets": rows(report.masked_secrets),
        "failed_tool_calls": rows(report.failed_tool_calls),
        "checkpoints": [checkpoint_json(c) for c in report.checkpoints],
        "rollbacks": [
            {**dataclasses.asdict(r), "total_removed": r.total_removed} for r in report.rollbacks
        ],
    }


def _section(title: str, headers: tuple[str, ...], rows: list[tuple[Any, ...]], **kw: Any) -> None:
    terminal.out()
    if rows:
        terminal.table(headers, rows, title=title, **kw)
    else:
        terminal.out(f"{title}: none")


def _print_audit(ctx: click.Context, report: AuditReport) -> None:
    conv = report.conversation
    terminal.fields(
        [
            ("conversation", conv.id),
            ("title", conv.title),
            ("model", conv.model_id),
            ("context window", window_text(conv, ctx)),
            (
                "requests",
                f"{len(report.requests)}, cost {report.total_cost:.4f}, peak "
                f"{report.peak_tokens:,} tokens, at most "
                f"{report.peak_percent_of_window:.1f} % of the window a request was sent with",
            ),
        ]
    )
    _section(
        "requests (tokens against the window)",
        (
            "id",
            "time",
            "total",
            "% window",
            "over max",
            "cost",
            "running tokens",
            "running cost",
            "failure",
        ),
        [
            (
                r.request_id,
                format_ts(r.ts),
                r.total_tokens if has_usage(r) else "",
                f"{r.percent_of_window:.1f}" if has_usage(r) else "",
                "yes" if r.over_max_allowed else "",
                "" if r.cost is None else f"{r.cost:.4f}",
                r.cumulative_tokens,
                f"{r.cumulative_cost:.4f}",
                r.failure or "",
            )
            for r in report.requests
        ],
    )
    _section(
        "truncations",
        ("time", "hidden", "keep", "triggered by", "messages", "reason"),
        [
            (
                format_ts(t.ts),
                f"{t.start_idx}-{t.end_idx}",
                t.keep,
                "" if t.tokens_total is None else f"{t.tokens_total:,} tokens",
                t.messages_hidden,
                t.reason,
            )
            for t in report.truncations
        ],
        wrap=("reason",),
    )
    _section(
        "files read",
        ("path", "tool", "reads", "first message", "last message"),
        [
            (f.path, f.tool_name, f.reads, f.first_message_idx, f.last_message_idx)
            for f in report.file_reads
        ],
    )
    _section(
        f"de-duplication ({report.chars_saved:,} characters saved)",
        DEDUP_COLUMNS,
        dedup_rows(report),
    )
    _section(
        "masked secrets (counts of [REDACTED:kind] markers)",
        ("kind", "masked by", "count"),
        [(s.kind, s.masked_by, s.count) for s in report.masked_secrets],
    )
    _section(
        "failed tool calls",
        ("message", "tool", "input", "error"),
        [
            (
                f.result_message_idx,
                f.tool_name or "",
                clipped(f.input or "", 60),
                clipped(f.error, 80),
            )
            for f in report.failed_tool_calls
        ],
        wrap=("error",),
    )
    _section(
        "checkpoints",
        ("id", "time", "label", "git", "note"),
        [
            (c.id, format_ts(c.ts), c.label or "", c.git_hash or "", c.note or "")
            for c in report.checkpoints
        ],
    )
    _section(
        "rollbacks",
        ("id", "ran", "to", "target", "removed", "kept", "restored"),
        [
            (
                r.rollback_id,
                format_ts(r.ran_at),
                format_ts(r.cutoff_ts),
                r.target if r.target is not None else "(import)",
                ", ".join(f"{n} {name}" for name, n in ordered_counts(r.removed) if n)
                or REMOVED_NOTHING,
                "purged" if r.purged else f"{r.rows_archived} archived",
                format_ts(r.restored_ts),
            )
            for r in report.rollbacks
        ],
        wrap=("removed",),
    )


@click.command()
@click.argument("conversation_id", metavar="CID")
@json_option
@click.pass_context
def audit(ctx: click.Context, conversation_id: str, as_json: bool) -> None:
    """Audit a conversation: requests against the window, truncations, files read,
    de-duplication, masked secrets, failed tool calls, checkpoints, rollbacks."""
    store = open_store(ctx, auto_migrate=False)
    report = store.audit(conversation_id)
    if as_json:
        terminal.print_json(audit_json(report))
    else:
        _print_audit(ctx, report)


def distinct_keys(columns: Sequence[str]) -> list[str]:
    """Column names as the keys of a JSON object: a name seen before gets ``_2``, ``_3``...
    (``SELECT r.id, c.id`` keeps both ids), never a name another column of the query has."""
    taken = set(columns)
    used: set[str] = set()
    keys = []
    for name in columns:
        key, n = name, 1
        while key in used or (key != name and key in taken):
            n += 1
            key = f"{name}_{n}"
        used.add(key)
        keys.append(key)
    return keys


@click.command()
@click.argument("query", metavar='"SELECT ..."')
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON list of objects.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the rows as CSV with a header.")
@click.pass_context
def sql(ctx: click.Context, query: str, as_json: bool, as_csv: bool) -> None:
    """Run one read-only SQL statement (the database refuses writes) and print the rows."""
    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv.", ctx)
    store = open_store(ctx, auto_migrate=False)
    result = store.query(query)
    # One name per column in every form: a CSV header or a table repeating a name (SELECT
    # r.id, c.id) named the columns otherwise than the JSON's keys.
    keys = distinct_keys(result.columns)
    if as_json:
        terminal.print_json([dict(zip(keys, row, strict=True)) for row in result.rows])
    elif as_csv:
        terminal.print_csv(keys, result.rows)
    elif result.columns:
        terminal.table(keys, [tuple(terminal.text_cell(c) for c in row) for row in result.rows])
        terminal.note(f"{len(result.rows)} row{'s' if len(result.rows) != 1 else ''}")


@click.command()
@click.argument("text")
@click.option(
    "--limit", type=IntegerRange(1, MAX_INT32), default=50, show_default=True, help="Most hits."
)
@click.option(
    "--conversation", "conversation_id", metavar="CID", default=None, help="Only this one."
)
@json_option
@click.pass_context
def search(
    ctx: click.Context, text: str, limit: int, conversation_id: str | None, as_json: bool
) -> None:
    """Find TEXT in every conversation's messages (and tool inputs), newest first."""
    store = open_store(ctx, auto_migrate=False)
    hits = store.search(text, limit=limit, conversation_id=conversation_id)
    if as_json:
        terminal.print_json([dataclasses.asdict(h) for h in hits])
        return
    terminal.table(
        ("conversation", "title", "message", "block", "role", "time", "snippet"),
        [
            (
                h.conversation_id,
                h.title or "",
                h.message_idx,
                h.block_idx,
                h.role,
                format_ts(h.ts),
                h.snippet,
            )
            for h in hits
        ],
        wrap=("snippet",),
    )


def datasette_metadata(database: str) -> dict[str, Any]:
    """The packaged Datasette metadata, keyed by ``database`` (Datasette's name for a file:
    its name without the extension)."""
    resource = importlib.resources.files("contextstore.cli.datasette") / "metadata.json"
    metadata: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    metadata["databases"] = {database: metadata["databases"]["contextstore"]}
    return metadata


@click.command("datasette-metadata")
@click.option(
    "--name",
    default=None,
    help="Datasette's name for the database (default: the --db file's name without extension).",
)
@click.pass_context
def datasette_metadata_command(ctx: click.Context, name: str | None) -> None:
    """Print Datasette metadata (titles, column descriptions, canned audit queries)."""
    if name is None:
        store = open_store(ctx, auto_migrate=False)
        path = store.path
        name = Path(path).stem if path is not None else "contextstore"
    terminal.print_json(datasette_metadata(name))
