"""Keeping a database healthy: schema upgrades, checks for damage, backup and recovery,
deleting a conversation."""

from __future__ import annotations

import dataclasses

import click

from contextstore.cli import terminal
from contextstore.cli.common import (
    WrittenPath,
    confirm_or_refuse,
    json_option,
    open_store,
    refuse_read_only_location,
    shown_location,
    sqlite_file,
    yes_option,
)
from contextstore.cli.new_store import store_removed_if_refused
from contextstore.cli.output import ordered_counts
from contextstore.core.errors import CorruptDatabaseError, ReadOnlyError, SchemaError
from contextstore.core.validate import check_path


@click.command()
@json_option
@click.pass_context
def migrate(ctx: click.Context, as_json: bool) -> None:
    """Upgrade the database schema to the current version (a new database gets it whole),
    and say from which revision."""
    from contextstore.storage.migrate import HEAD_REVISION

    if (ctx.find_root().obj or {}).get("read_only"):
        refuse_read_only_location(ctx)
        raise ReadOnlyError("migrate upgrades the schema, which writes; drop --read-only.")
    with store_removed_if_refused(ctx) as opened:  # a new file's first migration, stopped
        store = opened
    found, where = store.revision_found, shown_location(store.location)
    if as_json:
        terminal.print_json(
            {
                "location": where,
                "revision": HEAD_REVISION,
                "previous_revision": found,
                "upgraded": found != HEAD_REVISION,
            }
        )
    elif found == HEAD_REVISION:
        terminal.out(f"{where}: schema is up to date")
        terminal.note(f"revision {HEAD_REVISION}; nothing to upgrade.")
    elif found is None:
        terminal.out(f"{where}: schema created at revision {HEAD_REVISION}")
    else:
        terminal.out(f"{where}: schema upgraded from revision {found} to {HEAD_REVISION}")


@click.command()
@click.argument("conversation_id", metavar="[CID]", required=False)
@click.option(
    "--full",
    is_flag=True,
    help="SQLite's integrity_check (also every index) instead of quick_check, and every "
    "prepared request's payload rebuilt and compared with its stored hash (slower).",
)
@json_option
@click.pass_context
def check(ctx: click.Context, conversation_id: str | None, full: bool, as_json: bool) -> None:
    """Look for damage: SQLite's page check, then the store's invariants, for one
    conversation or all. Exits 5 when anything is found."""
    store = open_store(ctx, auto_migrate=False, read_only=True)
    report = store.check(conversation_id, full=full, raise_on_problems=False)
    if as_json:
        terminal.print_json(
            {
                "conversation_id": conversation_id,
                "ok": report.ok,
                "backend": report.backend,
                "integrity": report.integrity,
                "conversations_checked": report.conversations_checked,
                "checks": list(report.checks),
                "problems": [
                    {"check": p.check, "conversation_id": p.conversation_id, "detail": p.detail}
                    for p in report.problems
                ],
            }
        )
    elif report.ok:
        what = conversation_id or f"{report.conversations_checked} conversation(s)"
        terminal.out(f"{what}: ok")
        terminal.note(f"ran {', '.join(report.checks)} (page check: {report.integrity}).")
    else:
        terminal.table(
            ("check", "conversation", "problem"),
            [(p.check, p.conversation_id or "", p.detail) for p in report.problems],
            title=f"{len(report.problems)} problem(s) found",
            wrap=("problem",),
        )
    if not report.ok:
        terminal.error(
            "the database file is damaged; salvage it with 'contextstore recover SRC DEST' or "
            "restore a backup."
            if report.corrupt
            else "stored rows break the store's invariants; restore a backup or roll back."
        )
        ctx.exit(CorruptDatabaseError.exit_code)


def _sqlite_file_argument(name: str, value: str, command: str, wanted: str) -> None:
    """Refuse an argument that names no SQLite file (empty, too long for a path, a database
    URL) in the command's own words: SRC and DEST, where the library names its parameters
    ("destination must be a file path", "source 'postgresql://...' is a database URL").

    Raises:
        click.BadParameter: the argument is empty (exit 2).
        InvalidInputError: it is too long for a path, or a database URL (exit 2).
    """
    from contextstore.storage.engine import refuse_database_url

    if not value.strip():
        raise click.BadParameter(f"is empty; name {wanted}.", param_hint=f"'{name}'")
    refuse_database_url(name, check_path(name, value), command)


@click.command()
@click.argument("destination", metavar="DEST", type=WrittenPath("a backup", dir_okay=True))
@click.option("--force", is_flag=True, help="Replace DEST if it is an existing file.")
@json_option
@click.pass_context
def backup(ctx: click.Context, destination: str, force: bool, as_json: bool) -> None:
    """Copy the store (SQLite) to DEST, a new file or a directory, while it stays in use.

    A store whose schema needs 'contextstore migrate' is copied as it is (back it up, then
    migrate)."""
    from contextstore.storage.backup import backup_file, destination_path

    _sqlite_file_argument("DEST", destination, "backup", "a new file or a directory")
    try:
        store = open_store(ctx, auto_migrate=False, read_only=True)
    except SchemaError:
        path = sqlite_file(ctx)
        if path is None:
            raise
        result = backup_file(path, destination_path(destination), force=force)
    else:
        result = store.backup(destination, force=force)
    if as_json:
        terminal.print_json(dataclasses.asdict(result))
        return
    terminal.out(result.path)
    if result.removed_leftovers:
        terminal.note(
            f"removed {len(result.removed_leftovers)} temporary file(s) that interrupted "
            f"backups left: {', '.join(result.removed_leftovers)}"
        )
    terminal.note(
        f"backed up {result.conversations} conversation(s), {result.bytes} bytes; "
        f"restore by opening it (--db {result.path}) or copying it over the store."
    )


@click.command()
@click.argument("source", metavar="SRC", type=click.Path())
@click.argument("destination", metavar="DEST", type=WrittenPath("a recovered store"))
@json_option
def recover(source: str, destination: str, as_json: bool) -> None:
    """Salvage what a damaged SQLite store SRC still holds into a new store DEST; SRC is
    never changed. Prints what was recovered and what was lost, per table."""
    from contextstore.store import ContextStore

    _sqlite_file_argument("SRC", source, "recover", "the damaged database file")
    _sqlite_file_argument("DEST", destination, "recover", "a new file for the recovered store")
    report = ContextStore.recover(source, destination)
    if as_json:
        data = dataclasses.asdict(report)
        data["lost_rows"] = report.lost_rows
        data["complete"] = report.complete
        terminal.print_json(data)
        return
    terminal.table(
        ("table", "recovered", "unreadable", "dropped"),
        [
            (t.table, t.recovered, "unknown" if t.unreadable < 0 else t.unreadable, t.dropped)
            for t in report.tables
        ],
        title=f"recovered {source} into {destination}",
    )
    if report.header_repaired:
        terminal.note("the file's header was overwritten; it was rebuilt to read the rest.")
    for cid in report.damaged_conversations:
        terminal.note(f"conversation {cid} lost rows; its history ends before the loss.")
    for cid in report.recreated_conversations:
        terminal.note(f"conversation {cid} lost its own row; it was rebuilt from its rows.")
    for note in report.notes:
        terminal.note(note)
    terminal.note(
        "nothing was lost." if report.complete else f"check {destination} and keep {source}."
    )


@click.command()
@click.argument("conversation_id", metavar="CID")
@yes_option
@json_option
@click.pass_context
def delete(ctx: click.Context, conversation_id: str, yes: bool, as_json: bool) -> None:
    """Delete a conversation and every row it owns (cannot be undone).

    Without --yes it asks; off a terminal it refuses instead. Forks of it stay.
    """
    store = open_store(ctx, auto_migrate=False, writes=True)
    conv = store.get_conversation(conversation_id)
    counts = store.row_counts(conversation_id)
    rows = sum(n for name, n in counts.items() if name != "conversations")
    title = f" ({conv.title!r})" if conv.title else ""
    confirm_or_refuse(
        ctx,
        f"Delete conversation {conversation_id}{title} and its {rows} rows? This cannot be undone.",
        yes=yes,
        flag_hint="",
    )
    removed = store.delete_conversation(conversation_id)
    if as_json:
        terminal.print_json(
            {"conversation_id": conversation_id, "removed": dict(ordered_counts(removed))}
        )
        return
    terminal.table(
        ("table", "rows removed"),
        ordered_counts(removed),
        title=f"deleted conversation {conversation_id}{title}",
    )
