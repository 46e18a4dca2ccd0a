"""The ``contextstore`` command: the only module that prints or exits.

Every library error becomes a one-line message on stderr and the error's exit code; no
traceback is shown for a user mistake.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from contextstore import demo_data
from contextstore.core.errors import ContextStoreError
from contextstore.interop.cline_import import export_cline_task, import_cline_task
from contextstore.interop.gemini_import import import_gemini_chat
from contextstore.records import PreparedRequest
from contextstore.store import ContextStore

F = TypeVar("F", bound=Callable[..., Any])


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _summarise_block(block: Any) -> str:
    if not isinstance(block, dict):
        return str(block)
    kind = block.get("type")
    if kind == "text":
        text = str(block.get("text", "")).replace("\n", " ")
        return f"text: {text[:60]}{'...' if len(text) > 60 else ''}"
    if kind == "tool_use":
        arguments = json.dumps(block.get("input"))[:40]
        return f"tool_use {block.get('name')}({arguments}) id={block.get('id')}"
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            content = " ".join(
                str(c.get("text", f"[{c.get('type')}]")) for c in content if isinstance(c, dict)
            )
        text = str(content).replace("\n", " ")
        error = " error" if block.get("is_error") else ""
        more = "..." if len(text) > 50 else ""
        return f"tool_result{error} for {block.get('tool_use_id')}: {text[:50]}{more}"
    if kind == "image":
        source = block.get("source") or {}
        size = len(str(source.get("data", "")))
        return f"image {source.get('media_type', '')} ({size} base64 chars)"
    return str(kind)


SUMMARY_WIDTH = 110
"""Characters of content shown per message in the CLI's conversation tables."""


def _conversation_table(messages: Sequence[dict[str, Any]]) -> str:
    rows = []
    for position, message in enumerate(messages):
        content = message.get("content")
        parts = [content] if isinstance(content, str) else content or []
        summary = " | ".join(
            _summarise_block({"type": "text", "text": p} if isinstance(p, str) else p)
            for p in parts
        )
        if len(summary) > SUMMARY_WIDTH:
            summary = summary[: SUMMARY_WIDTH - 3] + "..."
        rows.append((position, message.get("role"), summary))
    return _table(("#", "role", "content"), rows)


def _handle_errors(func: F) -> F:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ContextStoreError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def _open(ctx: click.Context, **kwargs: Any) -> ContextStore:
    store = ContextStore.open(ctx.obj.get("db"), **kwargs)
    ctx.call_on_close(store.close)
    return store


@click.group()
@click.option(
    "--db",
    metavar="PATH_OR_URL",
    envvar="CONTEXTSTORE_DB",
    help="Database file or SQLAlchemy URL (default: $CONTEXTSTORE_DB, else the per-user "
    "data directory).",
)
@click.version_option(package_name="contextstore")
@click.pass_context
def cli(ctx: click.Context, db: str | None) -> None:
    """contextstore: durable, auditable conversation history for LLM agents."""
    ctx.ensure_object(dict)
    ctx.obj["db"] = db


@cli.command()
@click.pass_context
@_handle_errors
def demo(ctx: click.Context) -> None:
    """Write a realistic agent session, checkpoint it, break it, roll it back, show the rows."""
    store = _open(ctx)
    click.echo(f"database: {store.location}")
    conv = store.create_conversation(
        model_id="claude-sonnet-4-5", context_window=200_000, title="demo: fix the CSV header"
    )
    click.echo(f"conversation: {conv.id}\n")
    written = store.append(conv.id, demo_data.opening_turns())
    store.record_request(conv.id, tokens_in=3_120, tokens_out=180, cache_reads=1_900, cost=0.0142)
    cp = store.checkpoint(conv.id, "after-reading", note="both files read")
    click.echo(
        f"wrote {len(written)} messages ({sum(m.token_count for m in written):,} tokens counted "
        f"once, at append); checkpoint 'after-reading' at ts {cp.ts}"
    )
    store.append(conv.id, demo_data.risky_turns())
    store.record_request(conv.id, tokens_in=3_900, tokens_out=240, cost=0.0161)
    before = store.row_counts(conv.id)
    now_view = store.render(conv.id)
    report = store.rollback(conv.id, "after-reading")
    after = store.row_counts(conv.id)
    click.echo("\nrows of this conversation per table:")
    names = [n for n in before if n != "conversations"]
    click.echo(
        _table(
            ("table", "before rollback", "removed", "after rollback"),
            [(n, before[n], report.removed.get(n, 0), after[n]) for n in names],
        )
    )
    click.echo(f"\nthe view before the rollback ({len(now_view)} messages):")
    click.echo(_conversation_table(now_view))
    click.echo(f"\nthe view as of the checkpoint (render(as_of={cp.ts})):")
    at_checkpoint = store.render(conv.id, as_of=cp.ts)
    click.echo(_conversation_table(at_checkpoint))
    current = store.render(conv.id)
    same = "identical to" if current == at_checkpoint else "DIFFERENT from"
    click.echo(
        f"\nafter rollback('after-reading') the view now is {same} the view at the checkpoint;"
    )
    click.echo(
        f"{report.total_removed} rows were removed in one transaction and kept in "
        "archived_rows, with the cutoff and time of the rollback."
    )
    _demo_overflow(store)


def _decision_line(label: str, ctx: PreparedRequest) -> str:
    d = ctx.decision
    saved = (
        f", de-duplicated messages {list(d.deduplicated)} ({d.fraction_saved:.0%} saved)"
        if d.deduplicated
        else ""
    )
    return (
        f"{label}: {d.action}"
        + (f" keep={d.keep}" if d.keep else "")
        + f", range={ctx.deleted_range}, {len(ctx.messages)} messages sent{saved}"
    )


def _demo_overflow(store: ContextStore) -> None:
    click.echo("\n== a session that overflows a 64,000-token window ==")
    conv = store.create_conversation(
        model_id="claude-sonnet-4-5", context_window=64_000, title="demo: overflow"
    )
    store.append(conv.id, [*demo_data.opening_turns(), *demo_data.long_session(8)])
    first = store.prepare_request(conv.id, system="You are a careful coding agent.")
    click.echo(_decision_line("request 1 (no usage yet)", first))
    store.record_request(conv.id, request_id=first.request_id, tokens_in=38_500, tokens_out=900)
    second = store.prepare_request(conv.id, system="You are a careful coding agent.")
    click.echo(_decision_line("request 2 (previous used 39,400 >= 37,000)", second))
    store.record_request(conv.id, request_id=second.request_id, tokens_in=36_000, tokens_out=700)
    store.append(conv.id, demo_data.long_session(6, first=8, new_files=True))
    store.record_request(conv.id, tokens_in=45_000, tokens_out=800)
    third = store.prepare_request(conv.id, system="You are a careful coding agent.")
    click.echo(_decision_line("request 3 (previous used 45,800)", third))
    notice = third.messages[1]["content"][0]
    click.echo(f"  message 1 now shows the notice: {str(notice.get('text', ''))[:90]}...")
    click.echo(f"  reason recorded with the range: {third.decision.reason}")
    cp = store.checkpoint(conv.id, "after-first-truncation")
    store.append(conv.id, demo_data.long_session(6, first=14, new_files=True))
    store.record_request(conv.id, tokens_in=52_000, tokens_out=800)
    fourth = store.prepare_request(conv.id, system="You are a careful coding agent.")
    click.echo(_decision_line("request 4 (previous used 52,800)", fourth))
    report = store.rollback(conv.id, "after-first-truncation")
    click.echo(
        f"rollback('after-first-truncation'): removed {report.total_removed} rows in one "
        f"transaction; the deleted range is {store.deleted_range(conv.id)} again, as at the "
        f"checkpoint (ts {cp.ts}), and the notice stays"
    )
    assert second.request_id is not None
    rebuilt = store.request_payload(conv.id, second.request_id)
    click.echo(
        f"request 2 rebuilt from rows and verified against its hash: {rebuilt == second.payload}"
    )


@cli.command()
@click.pass_context
@_handle_errors
def migrate(ctx: click.Context) -> None:
    """Upgrade the database schema to the current version."""
    store = _open(ctx)
    click.echo(f"{store.location}: schema is up to date")


@cli.command("conversations")
@click.pass_context
@_handle_errors
def list_conversations(ctx: click.Context) -> None:
    """List the conversations in the database."""
    store = _open(ctx, auto_migrate=False)
    rows = [
        (c.id, c.model_id or "", c.context_window or "", c.title or "", c.last_ts)
        for c in store.list_conversations()
    ]
    click.echo(_table(("id", "model", "window", "title", "last ts"), rows))


@cli.command()
@click.argument("conversation_id")
@click.option("--as-of", type=int, default=None, help="Render as of this ts (milliseconds).")
@click.option(
    "--format",
    "format_",
    type=click.Choice(["stored", "anthropic", "openai", "gemini"]),
    default="stored",
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="Print the messages as JSON.")
@click.pass_context
@_handle_errors
def render(
    ctx: click.Context, conversation_id: str, as_of: int | None, format_: str, as_json: bool
) -> None:
    """Show the conversation as the model sees it (now, or as of a past ts)."""
    store = _open(ctx, auto_migrate=False)
    view = store.render(
        conversation_id, as_of=as_of, format=None if format_ == "stored" else format_
    )
    if as_json or format_ in ("openai", "gemini"):
        click.echo(json.dumps(view, indent=2, ensure_ascii=False))
    else:
        click.echo(_conversation_table(view))


@cli.command()
@click.argument("conversation_id")
@click.pass_context
@_handle_errors
def checkpoints(ctx: click.Context, conversation_id: str) -> None:
    """List a conversation's checkpoints."""
    store = _open(ctx, auto_migrate=False)
    rows = [
        (c.ts, c.label or "", c.git_hash or "", c.note or "")
        for c in store.checkpoints(conversation_id)
    ]
    click.echo(_table(("ts", "label", "git", "note"), rows))


@cli.command()
@click.argument("conversation_id")
@click.option("--to", "target", required=True, help="A checkpoint label, or a ts in milliseconds.")
@click.option("--purge", is_flag=True, help="Delete the removed rows instead of archiving them.")
@click.pass_context
@_handle_errors
def rollback(ctx: click.Context, conversation_id: str, target: str, purge: bool) -> None:
    """Remove every row written after a checkpoint, in one transaction."""
    store = _open(ctx, auto_migrate=False)
    to: str | int = int(target) if target.isdigit() else target
    report = store.rollback(conversation_id, to, purge=purge)
    click.echo(_table(("table", "rows removed"), sorted(report.removed.items())))


@cli.command()
@click.argument("conversation_id")
@click.pass_context
@_handle_errors
def check(ctx: click.Context, conversation_id: str) -> None:
    """Verify a conversation's invariants (indices, timeline, decodable rows, pairing)."""
    store = _open(ctx, auto_migrate=False)
    store.check(conversation_id)
    click.echo(f"{conversation_id}: ok")


@cli.command("import-cline")
@click.argument("task_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--title", default=None, help="Conversation title (default: the task's first line).")
@click.option(
    "--history",
    "history_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Cline's state/taskHistory.json: its entry for the task is the authority for the "
    "deleted range (default: the last UI message's snapshot).",
)
@click.pass_context
@_handle_errors
def import_cline(
    ctx: click.Context, task_dir: Path, title: str | None, history_path: Path | None
) -> None:
    """Import a Cline task directory (tasks/<id>/) as a new conversation; print its id."""
    store = _open(ctx)
    result = import_cline_task(store, task_dir, history_path=history_path, title=title)
    click.echo(result.conversation_id)
    click.echo(_table(("table", "rows imported"), sorted(result.counts().items())))
    for note in result.skipped:
        click.echo(f"skipped: {note}", err=True)


@cli.command("export-cline")
@click.argument("conversation_id")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace task files already in OUT_DIR.")
@click.pass_context
@_handle_errors
def export_cline(ctx: click.Context, conversation_id: str, out_dir: Path, force: bool) -> None:
    """Write a conversation as a Cline task directory (history, overlays, UI requests)."""
    store = _open(ctx, auto_migrate=False)
    result = export_cline_task(store, conversation_id, out_dir, overwrite=force)
    for path in result.files:
        click.echo(str(path))
    for note in result.skipped:
        click.echo(f"skipped: {note}", err=True)


@cli.command("import-gemini")
@click.argument("chat_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--title", default=None, help="Conversation title (default: the first user line).")
@click.pass_context
@_handle_errors
def import_gemini(ctx: click.Context, chat_file: Path, title: str | None) -> None:
    """Import a Gemini CLI chat (checkpoint-<tag>.json or session-*.jsonl); print its id."""
    store = _open(ctx)
    result = import_gemini_chat(store, chat_file, title=title)
    click.echo(result.conversation_id)
    click.echo(f"{len(result.messages)} messages imported from a Gemini CLI {result.kind}")
    for note in result.skipped:
        click.echo(f"skipped: {note}", err=True)


@cli.command("crash-test")
@click.option("--kills", type=int, default=500, show_default=True, help="Children to SIGKILL.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seeds delays and operations.")
@click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="SQLite file to torture (default: a new file in a temporary directory).",
)
@click.option(
    "--max-delay",
    type=float,
    default=0.25,
    show_default=True,
    help="Longest wait (seconds) between a child's start and its kill.",
)
def crash_test(kills: int, seed: int, db_path: str | None, max_delay: float) -> None:
    """Kill writers with SIGKILL mid-operation, reopen and verify; print the tally.

    Exits 1 if any committed write was lost or an invariant broke.
    """
    import tempfile
    from pathlib import Path

    from contextstore.robustness.crash import run_campaign

    def progress(run: int, tally: Any) -> None:
        if (run + 1) % 50 == 0:
            click.echo(f"  {run + 1} kills, {tally.committed} operations committed", err=True)

    with tempfile.TemporaryDirectory(prefix="contextstore-crash-") as scratch:
        path = Path(db_path) if db_path else Path(scratch) / "crash.db"
        tally = run_campaign(path, kills=kills, seed=seed, max_delay=max_delay, progress=progress)
    click.echo(f"database: {path}")
    click.echo(tally.summary())
    if not tally.ok:
        sys.exit(1)


@cli.command()
@click.option("--messages", default=2_000, show_default=True, help="Messages per run.")
@click.option("--text-bytes", default=2_000, show_default=True, help="Text size per message.")
@click.option(
    "--peer-messages", default=300, show_default=True, help="Messages for the peer comparison."
)
@_handle_errors
def bench(messages: int, text_bytes: int, peer_messages: int) -> None:
    """Time contextstore against raw sqlite3 and installed peers; print ratios, not promises."""
    from contextstore import bench as benchmarks
    from contextstore import bench_peers

    rows = benchmarks.run(messages, text_bytes)
    click.echo(
        _table(
            ("operation", "contextstore", "raw sqlite3", "ratio", "note"),
            [
                (
                    r.name,
                    f"{r.contextstore_s * 1000:,.1f} ms",
                    f"{r.baseline_s * 1000:,.1f} ms",
                    f"{r.ratio:,.2f}x",
                    r.note,
                )
                for r in rows
            ],
        )
    )
    click.echo("\nSQLite file size for 1,000 rows, by row size and page size:")
    click.echo(
        _table(
            ("row bytes", "page size", "file bytes", "not payload"),
            [
                (p.row_bytes, p.page_size, f"{p.file_bytes:,}", f"{p.overhead:.0%}")
                for p in benchmarks.page_sizes()
            ],
        )
    )
    runs, missing = bench_peers.run(peer_messages, text_bytes)
    ours = runs[0]
    click.echo(f"\nPeers, {peer_messages:,} messages of {text_bytes:,} bytes each:")
    click.echo(
        _table(
            (
                "store",
                "append",
                "vs contextstore",
                "read back",
                "file bytes",
                "vs contextstore",
                "note",
            ),
            [
                (
                    r.name,
                    f"{r.append_s * 1000:,.0f} ms",
                    f"{r.append_s / ours.append_s:,.2f}x",
                    f"{r.read_s * 1000:,.1f} ms",
                    f"{r.file_bytes:,}",
                    f"{r.file_bytes / ours.file_bytes:,.1f}x",
                    r.note,
                )
                for r in runs
            ],
        )
    )
    for reason in missing:
        click.echo(f'(skipped: {reason}; pip install "contextstore[bench]")')
    click.echo("\ncontextstore's own file for 1,500 messages of mixed size (100 B to 20 KB):")
    click.echo(
        _table(
            ("page size", "file bytes", "not payload"),
            [
                (p.page_size, f"{p.file_bytes:,}", f"{p.overhead:.1%}")
                for p in benchmarks.store_page_sizes()
            ],
        )
    )


def main() -> None:
    """Entry point of the ``contextstore`` console script."""
    cli(obj={})
