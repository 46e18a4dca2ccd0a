"""Bringing other agents' histories in (Cline, Gemini CLI) and back out."""

from __future__ import annotations

from pathlib import Path

import click

from contextstore.cli import terminal
from contextstore.cli.common import handle_errors, open_store
from contextstore.interop.cline_import import export_cline_task, import_cline_task
from contextstore.interop.gemini_import import import_gemini_chat


@click.command("import-cline")
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
@handle_errors
def import_cline(
    ctx: click.Context, task_dir: Path, title: str | None, history_path: Path | None
) -> None:
    """Import a Cline task directory (tasks/<id>/) as a new conversation; print its id."""
    store = open_store(ctx)
    result = import_cline_task(store, task_dir, history_path=history_path, title=title)
    terminal.out(result.conversation_id)
    terminal.table(("table", "rows imported"), sorted(result.counts().items()), to_stderr=True)
    for note in result.skipped:
        terminal.note(f"skipped: {note}")


@click.command("export-cline")
@click.argument("conversation_id")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace task files already in OUT_DIR.")
@click.pass_context
@handle_errors
def export_cline(ctx: click.Context, conversation_id: str, out_dir: Path, force: bool) -> None:
    """Write a conversation as a Cline task directory (history, overlays, UI requests)."""
    store = open_store(ctx, auto_migrate=False)
    result = export_cline_task(store, conversation_id, out_dir, overwrite=force)
    for path in result.files:
        terminal.out(str(path))
    for note in result.skipped:
        terminal.note(f"skipped: {note}")


@click.command("import-gemini")
@click.argument("chat_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--title", default=None, help="Conversation title (default: the first user line).")
@click.pass_context
@handle_errors
def import_gemini(ctx: click.Context, chat_file: Path, title: str | None) -> None:
    """Import a Gemini CLI chat (checkpoint-<tag>.json or session-*.jsonl); print its id."""
    store = open_store(ctx)
    result = import_gemini_chat(store, chat_file, title=title)
    terminal.out(result.conversation_id)
    terminal.note(f"{len(result.messages)} messages imported from a Gemini CLI {result.kind}")
    for note in result.skipped:
        terminal.note(f"skipped: {note}")
