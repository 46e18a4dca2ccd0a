"""Bringing other agents' histories in (Cline, Gemini CLI) and back out.

``contextstore import cline|gemini PATH...`` and ``contextstore export cline|gemini``; the
pre-group names ``import-cline``, ``export-cline`` and ``import-gemini`` stay as hidden
aliases. Every PATH of one command is imported in one transaction: all of it lands, or
nothing does.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from contextstore.cli.common import handle_errors, open_store
from contextstore.core.errors import InvalidInputError
from contextstore.interop.cline_import import export_cline, import_cline
from contextstore.interop.gemini_import import export_gemini, import_gemini
from contextstore.interop.report import ExportReport, ImportReport, ItemReport
from contextstore.store import ContextStore

Importer = Callable[..., ImportReport]

_JSON_HELP = "Print the report as JSON (added and skipped per task or file); no progress bar."
_REPLACE_HELP = (
    "Start over a conversation whose task or file no longer continues what was imported "
    "(its rows are replaced by the file's)."
)


@click.group("import")
def import_group() -> None:
    """Bring another agent's histories in (Cline tasks, Gemini CLI chats)."""


@click.group("export")
def export_group() -> None:
    """Write a conversation back in another agent's files."""


class _Bar:
    """A progress bar on stderr, opened at the first step (when the total is known)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Any = None

    def step(self, path: str, total: int) -> None:
        if self.bar is None or self.bar.pos >= self.bar.length:
            self.close()
            self.bar = click.progressbar(
                length=max(total, 1),
                label=self.label,
                file=sys.stderr,
                show_pos=True,
                item_show_func=lambda item: None if item is None else Path(item).name,
            )
            self.bar.__enter__()
        self.bar.update(1, path)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


@contextmanager
def _progress(enabled: bool, label: str) -> Iterator[Callable[[str, int], None]]:
    """A progress callback: a bar on stderr when it is a terminal and ``enabled``."""
    if not (enabled and sys.stderr.isatty()):
        yield lambda _path, _total: None
        return
    bar = _Bar(label)
    try:
        yield bar.step
    finally:
        bar.close()


def _run_import(
    ctx: click.Context,
    importer: Importer,
    paths: Sequence[Path],
    as_json: bool,
    label: str,
    **options: Any,
) -> None:
    store: ContextStore = open_store(ctx)
    reports: list[ImportReport] = []
    with _progress(not as_json, label) as step, store.transaction():
        for path in paths:
            reports.append(importer(store, path, progress=step, **options))
    items = tuple(item for report in reports for item in report.items)
    merged = ImportReport(reports[0].source, items, sum(r.seconds for r in reports))
    if as_json:
        click.echo(json.dumps(merged.to_json(), indent=2))
    else:
        for item in items:
            click.echo(_item_line(item))
            for note in item.skipped:
                click.echo(f"  skipped: {note}", err=True)
        click.echo(f"{len(items)} item(s) in {merged.seconds:.2f} s", err=True)
    conflicts = [item for item in items if item.status == "conflict"]
    if conflicts:
        raise InvalidInputError(
            f"{len(conflicts)} item(s) no longer continue what was imported and were left "
            "as they were; import them again with --replace to start them over."
        )


def _item_line(item: ItemReport) -> str:
    added = ", ".join(f"{count} {table}" for table, count in sorted(item.added.items()))
    replaced = f", {item.replaced} rows replaced" if item.replaced else ""
    detail = f" ({added}{replaced})" if added or replaced else ""
    return f"{item.status:<9}  {item.conversation_id or '-'}  {item.path}{detail}"


def _print_export(report: ExportReport, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    for path in report.files:
        click.echo(str(path))
    for note in report.skipped:
        click.echo(f"skipped: {note}", err=True)


_paths = click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path)
)
_as_json = click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
_replace = click.option("--replace", is_flag=True, help=_REPLACE_HELP)


@click.command("cline")
@_paths
@click.option(
    "--history",
    "history_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Cline's state/taskHistory.json, when it is not beside the tasks (its HistoryItem "
    "holds each task's current deleted range).",
)
@_replace
@_as_json
@click.pass_context
@handle_errors
def import_cline_command(
    ctx: click.Context,
    paths: tuple[Path, ...],
    history_path: Path | None,
    replace: bool,
    as_json: bool,
) -> None:
    """Import Cline tasks: PATH is a tasks/<id>/ folder, or Cline's storage folder (the one
    holding tasks/ and state/), whose every task comes in."""
    _run_import(
        ctx,
        import_cline,
        paths,
        as_json,
        "Cline tasks",
        history_path=history_path,
        replace=replace,
    )


@click.command("gemini")
@_paths
@_replace
@_as_json
@click.pass_context
@handle_errors
def import_gemini_command(
    ctx: click.Context, paths: tuple[Path, ...], replace: bool, as_json: bool
) -> None:
    """Import Gemini CLI chats: PATH is a session recording, a /chat save checkpoint, a
    /chat share file, or a folder holding them (chats/, ~/.gemini/tmp)."""
    _run_import(ctx, import_gemini, paths, as_json, "Gemini CLI chats", replace=replace)


@click.command("cline")
@click.argument("conversation_id")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace task files already in OUT_DIR.")
@click.option(
    "--history",
    "history_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The taskHistory.json to put the task's HistoryItem in (default: Cline's "
    "state/taskHistory.json when OUT_DIR is a tasks/<id>/ folder, else OUT_DIR/taskHistory.json).",
)
@_as_json
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
    store = open_store(ctx, auto_migrate=False)
    report = export_cline(
        store, conversation_id, out_dir, overwrite=force, history_path=history_path
    )
    _print_export(report, as_json)


@click.command("gemini")
@click.argument("conversation_id")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--checkpoint", is_flag=True, help="Write a /chat save checkpoint instead of a session."
)
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@_as_json
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
    """Write a conversation as a Gemini CLI session recording (OUT ending in .jsonl as
    current versions write, .json as older ones) or a checkpoint (--checkpoint)."""
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
