"""Bringing other agents' histories in (Cline, Gemini CLI) and back out.

``contextstore import cline|gemini PATH...`` and ``contextstore export cline|gemini``; the
pre-group names ``import-cline``, ``export-cline`` and ``import-gemini`` stay as hidden
aliases. Every PATH of one command is imported in one transaction: all of it lands, or
nothing does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import click
from click.decorators import FC

from contextstore.cli import terminal
from contextstore.cli.common import (
    IntegerRange,
    WrittenPath,
    handle_errors,
    open_store,
)
from contextstore.cli.new_store import store_removed_if_refused
from contextstore.cli.wording import cli_wording
from contextstore.core.errors import InvalidInputError
from contextstore.core.validate import MAX_INT32
from contextstore.interop.files import MAX_FILE_BYTES
from contextstore.interop.report import (
    CONFLICT,
    IMPORTED,
    REPLACED,
    SKIPPED,
    UNCHANGED,
    UPDATED,
    ExportReport,
    ImportReport,
    ItemReport,
)

Importer = Callable[..., ImportReport]
Finder = Callable[..., Any]

_JSON_HELP = "Print the report as JSON (added and skipped per task or file); no progress bar."
_EXPORT_JSON_HELP = "Print the report as JSON (files written, counts, what was skipped)."
_REPLACE_HELP = (
    "Start over a conversation whose task or file no longer continues what was imported "
    "(its rows are replaced by the file's)."
)
_MAX_FILE_HELP = f"Largest file read, in bytes (default {MAX_FILE_BYTES:,})."


@click.group("import")
def import_group() -> None:
    """Bring another agent's histories in (Cline tasks, Gemini CLI chats)."""


@click.group("export")
def export_group() -> None:
    """Write a conversation back in another agent's files."""


def _run_import(
    ctx: click.Context,
    importer: Importer,
    finder: Finder,
    paths: Sequence[Path],
    as_json: bool,
    label: str,
    max_file_bytes: int,
    **options: Any,
) -> None:
    # Found before the store is opened: a path with nothing to import creates no store.
    steps = 2 * sum(len(finder(path, max_file_bytes=max_file_bytes)[1]) for path in paths)
    reports: list[ImportReport] = []
    bar = nullcontext(_ignore) if as_json else terminal.progress(label, steps)
    with store_removed_if_refused(ctx) as store, bar as advance, store.transaction():
        for path in paths:
            reports.append(
                importer(
                    store,
                    path,
                    progress=lambda _path, _total: advance(1),
                    max_file_bytes=max_file_bytes,
                    **options,
                )
            )
    items = tuple(item for report in reports for item in report.items)
    merged = ImportReport(reports[0].source, items, sum(r.seconds for r in reports))
    if as_json:
        terminal.print_json(merged.to_json())
    else:
        for item in items:
            terminal.out(_item_line(item))
            for note in item.skipped:
                terminal.note(f"  skipped: {cli_wording(str(note))}")
        terminal.note(_summary(items, merged.seconds))
    conflicts = [item for item in items if item.status == CONFLICT]
    if conflicts:
        raise InvalidInputError(
            f"{len(conflicts)} item(s) no longer continue what was imported and were left "
            "as they were; import them again with --replace to start them over."
        )


STATUSES = (IMPORTED, UPDATED, UNCHANGED, REPLACED, SKIPPED, CONFLICT)
"""Every status an imported item can have, in the order the summary counts them."""


def _summary(items: Sequence[ItemReport], seconds: float) -> str:
    """The last line of an import: how many items, and how many of each status (every
    status, 0 included, so that a script or a reader finds each in one place)."""
    counts = Counter(item.status for item in items)
    by_status = ", ".join(f"{counts[status]} {status}" for status in STATUSES)
    return f"{len(items)} item(s) in {seconds:.2f} s: {by_status}"


def _ignore(_steps: int = 1) -> None:
    """The progress callback under ``--json``: nothing is drawn."""


def _item_line(item: ItemReport) -> str:
    added = ", ".join(f"{count} {table}" for table, count in sorted(item.added.items()))
    replaced = (
        f", {item.replaced} rows replaced (archived by rollback {item.replaced_rollback})"
        if item.replaced
        else ""
    )
    detail = f" ({added}{replaced})" if added or replaced else ""
    return f"{item.status:<9}  {item.conversation_id or '-'}  {item.path}{detail}"


def _print_export(report: ExportReport, as_json: bool) -> None:
    if as_json:
        terminal.print_json(report.to_json())
        return
    for path in report.files:
        terminal.out(str(path))
    for note in report.skipped:
        terminal.note(f"skipped: {note}")


_paths = click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path)
)
_as_json = click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
_export_json = click.option("--json", "as_json", is_flag=True, help=_EXPORT_JSON_HELP)
_replace = click.option("--replace", is_flag=True, help=_REPLACE_HELP)
_max_file = click.option(
    "--max-file-bytes", type=IntegerRange(min=1), default=MAX_FILE_BYTES, help=_MAX_FILE_HELP
)


def _window(default_help: str) -> Callable[[FC], FC]:
    """``--context-window TOKENS``: the window set on every conversation the import
    writes."""
    return click.option(
        "--context-window",
        type=IntegerRange(1, MAX_INT32),
        default=None,
        metavar="TOKENS",
        help="The context window of the model the histories ran on, set on every "
        f"conversation imported (those imported before included). {default_help}",
    )


@click.command("cline")
@_paths
@click.option(
    "--history",
    "history_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Cline's state/taskHistory.json, when it is not beside the tasks (its HistoryItem "
    "holds each task's current deleted range).",
)
@_replace
@_max_file
@_window(
    "Default: the window Cline stated to the model in the task's environment details "
    "('# Context Window Usage'), if it did; else none (audited against the 128,000 default)."
)
@_as_json
@click.pass_context
@handle_errors
def import_cline_command(
    ctx: click.Context,
    paths: tuple[Path, ...],
    history_path: Path | None,
    replace: bool,
    max_file_bytes: int,
    context_window: int | None,
    as_json: bool,
) -> None:
    """Import Cline tasks and Cline 4 sessions: PATH is a tasks/<id>/ or sessions/<id>/
    folder, a folder of either, or Cline's storage folder (the one holding tasks/ and
    state/, or sessions/: ~/.cline/data), whose every task and session comes in."""
    from contextstore.interop.cline_import import cline_tasks, import_cline

    _run_import(
        ctx,
        import_cline,
        cline_tasks,
        paths,
        as_json,
        "Cline tasks and sessions",
        max_file_bytes,
        history_path=history_path,
        replace=replace,
        context_window=context_window,
    )


@click.command("gemini")
@_paths
@_replace
@_max_file
@_window(
    "Default: the window Gemini CLI sized the chat against, 1,048,576 tokens (256,000 for Gemma 4)."
)
@_as_json
@click.pass_context
@handle_errors
def import_gemini_command(
    ctx: click.Context,
    paths: tuple[Path, ...],
    replace: bool,
    max_file_bytes: int,
    context_window: int | None,
    as_json: bool,
) -> None:
    """Import Gemini CLI chats: PATH is a session recording, a /chat save checkpoint, a
    /chat share file, or a folder holding them (chats/, ~/.gemini/tmp)."""
    from contextstore.interop.gemini_import import gemini_chats, import_gemini

    _run_import(
        ctx,
        import_gemini,
        gemini_chats,
        paths,
        as_json,
        "Gemini CLI chats",
        max_file_bytes,
        replace=replace,
        context_window=context_window,
    )


@click.command("cline")
@click.argument("conversation_id")
@click.argument(
    "out_dir", type=WrittenPath("a folder of task files", file_okay=False, path_type=Path)
)
@click.option("--force", is_flag=True, help="Replace task files already in OUT_DIR.")
@click.option(
    "--history",
    "history_path",
    type=WrittenPath("a history file written beside a task folder", dir_okay=False, path_type=Path),
    default=None,
    help="The taskHistory.json to put the task's HistoryItem in (default: Cline's "
    "state/taskHistory.json when OUT_DIR is a tasks/<id>/ folder, else OUT_DIR/taskHistory.json).",
)
@_export_json
@click.pass_context
@handle_errors
def export_cline_command(
    ctx: click.Context,
    conversation_id: str,
    out_dir: Path,
    force: bool,
    history_path: Path | None,
    as_json: bool,
) -> None:
    """Write a conversation as a Cline task folder (history, UI messages, overlays,
    metadata, HistoryItem)."""
    from contextstore.interop.cline_import import export_cline

    store = open_store(ctx, auto_migrate=False)
    report = export_cline(
        store, conversation_id, out_dir, overwrite=force, history_path=history_path
    )
    _print_export(report, as_json)


@click.command("gemini")
@click.argument("conversation_id")
@click.argument("out", type=WrittenPath("a Gemini CLI file", dir_okay=False, path_type=Path))
@click.option(
    "--checkpoint", is_flag=True, help="Write a /chat save checkpoint instead of a session."
)
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@_export_json
@click.pass_context
@handle_errors
def export_gemini_command(
    ctx: click.Context,
    conversation_id: str,
    out: Path,
    checkpoint: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Write a conversation as a Gemini CLI session recording (JSONL as current versions
    write when OUT ends in .jsonl; any other name, .json included, gets the single JSON
    object of older ones) or a checkpoint (--checkpoint; OUT not ending in .jsonl)."""
    from contextstore.interop.gemini_import import export_gemini

    store = open_store(ctx, auto_migrate=False)
    report = export_gemini(store, conversation_id, out, checkpoint=checkpoint, overwrite=force)
    _print_export(report, as_json)


import_group.add_command(import_cline_command)
import_group.add_command(import_gemini_command)
export_group.add_command(export_cline_command)
export_group.add_command(export_gemini_command)


def _alias(command: click.Command, name: str) -> click.Command:
    """``command`` under its pre-group name, hidden from the help."""
    return click.Command(
        name,
        callback=command.callback,
        params=command.params,
        help=command.help,
        hidden=True,
    )


import_cline_alias = _alias(import_cline_command, "import-cline")
export_cline_alias = _alias(export_cline_command, "export-cline")
import_gemini_alias = _alias(import_gemini_command, "import-gemini")
