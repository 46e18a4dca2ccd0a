"""The root ``contextstore`` command group; each command lives in the module of its topic.

A command's module is imported when the command is used, not when the command line starts:
``contextstore --help`` lists every command from :data:`COMMANDS` without importing any of
them, and ``contextstore show ...`` imports the modules ``show`` needs and no others (the
store, SQLAlchemy, pydantic and the interop code cost about half a second to import).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, NamedTuple

import click

from contextstore.cli import terminal
from contextstore.cli.common import DB_HELP, READ_ONLY_HELP, ContextStoreGroup
from contextstore.cli.driver_logs import keep_driver_logs_off_stderr


class LazyCommand(NamedTuple):
    """Where a command is defined, and what ``contextstore --help`` says of it before its
    module is imported."""

    module: str
    attribute: str
    summary: str
    """The first paragraph of the command's help, from which click makes its line in the
    list of commands (empty for a hidden command, which is never listed)."""
    hidden: bool = False


COMMANDS: dict[str, LazyCommand] = {
    "demo": LazyCommand(
        "contextstore.cli.demo",
        "demo",
        "Write a realistic agent session, checkpoint it, break it, roll it back, audit it.",
    ),
    "migrate": LazyCommand(
        "contextstore.cli.maintenance",
        "migrate",
        "Upgrade the database schema to the current version (a new database gets it whole), "
        "and say from which revision.",
    ),
    "check": LazyCommand(
        "contextstore.cli.maintenance",
        "check",
        "Look for damage: SQLite's page check, then the store's invariants, for one "
        "conversation or all. Exits 5 when anything is found.",
    ),
    "backup": LazyCommand(
        "contextstore.cli.maintenance",
        "backup",
        "Copy the store (SQLite) to DEST, a new file or a directory, while it stays in use.",
    ),
    "recover": LazyCommand(
        "contextstore.cli.maintenance",
        "recover",
        "Salvage what a damaged SQLite store SRC still holds into a new store DEST; SRC is "
        "never changed. Prints what was recovered and what was lost, per table.",
    ),
    "delete": LazyCommand(
        "contextstore.cli.maintenance",
        "delete",
        "Delete a conversation and every row it owns (cannot be undone).",
    ),
    "conversations": LazyCommand(
        "contextstore.cli.history",
        "list_conversations",
        "List the conversations in the database, oldest first.",
    ),
    "show": LazyCommand(
        "contextstore.cli.history",
        "show",
        "Show a conversation as the model sees it (now, or as of a past moment).",
    ),
    "render": LazyCommand("contextstore.cli.history", "render", "", hidden=True),
    "checkpoint": LazyCommand(
        "contextstore.cli.timeline",
        "checkpoint",
        "Mark the present moment of a conversation; print the checkpoint.",
    ),
    "checkpoints": LazyCommand(
        "contextstore.cli.timeline",
        "checkpoints",
        "List a conversation's checkpoints, oldest first.",
    ),
    "rollback": LazyCommand(
        "contextstore.cli.timeline",
        "rollback",
        "Remove every row written after a moment, in one transaction (archived for restore).",
    ),
    "restore": LazyCommand(
        "contextstore.cli.timeline",
        "restore",
        "Put back the rows a rollback archived (refused once anything was written since).",
    ),
    "fork": LazyCommand(
        "contextstore.cli.timeline",
        "fork",
        "Start a new conversation from another's history up to a moment; print its id.",
    ),
    "set-model": LazyCommand(
        "contextstore.cli.settings",
        "set_model",
        "Change the model a conversation talks to, its context window, or both.",
    ),
    "requests": LazyCommand(
        "contextstore.cli.requests",
        "list_requests",
        "List a conversation's model requests: tokens, cost, failures, oldest first.",
    ),
    "request": LazyCommand(
        "contextstore.cli.requests",
        "show_request",
        "Show one model request; with --payload, its exact body (rebuilt and verified).",
    ),
    "audit": LazyCommand(
        "contextstore.cli.audit",
        "audit",
        "Audit a conversation: requests against the window, truncations, files read, "
        "de-duplication, masked secrets, failed tool calls, checkpoints, rollbacks.",
    ),
    "sql": LazyCommand(
        "contextstore.cli.audit",
        "sql",
        "Run one read-only SQL statement (the database refuses writes) and print the rows.",
    ),
    "search": LazyCommand(
        "contextstore.cli.audit",
        "search",
        "Find TEXT in every conversation's messages (and tool inputs), newest first.",
    ),
    "datasette-metadata": LazyCommand(
        "contextstore.cli.audit",
        "datasette_metadata_command",
        "Print Datasette metadata (titles, column descriptions, canned audit queries).",
    ),
    "report": LazyCommand(
        "contextstore.cli.report",
        "report",
        "Write an HTML report: tokens per request against the window, events, the "
        "conversation as the model saw it at the last request, secrets masked (--show-secrets: "
        "not). Needs the 'report' extra.",
    ),
    "import": LazyCommand(
        "contextstore.cli.interchange",
        "import_group",
        "Bring another agent's histories in (Cline tasks, Gemini CLI chats).",
    ),
    "export": LazyCommand(
        "contextstore.cli.interchange",
        "export_group",
        "Write a conversation back in another agent's files.",
    ),
    "import-cline": LazyCommand(
        "contextstore.cli.interchange", "import_cline_alias", "", hidden=True
    ),
    "export-cline": LazyCommand(
        "contextstore.cli.interchange", "export_cline_alias", "", hidden=True
    ),
    "import-gemini": LazyCommand(
        "contextstore.cli.interchange", "import_gemini_alias", "", hidden=True
    ),
    "crash-test": LazyCommand(
        "contextstore.cli.devtools",
        "crash_test",
        "Kill writers with SIGKILL mid-operation, reopen and verify; print the tally.",
    ),
    "bench": LazyCommand(
        "contextstore.cli.devtools",
        "bench",
        "Measure contextstore against the floor (raw sqlite3, raw psycopg with --url) and the "
        "installed peers, interleaved in rounds in this process; print medians and ratios.",
    ),
    "serve": LazyCommand(
        "contextstore.cli.serve",
        "serve",
        "Serve the whole store API as JSON-RPC 2.0 to agents in any language.",
    ),
    "mcp": LazyCommand(
        "contextstore.cli.serve",
        "mcp",
        "An MCP server (stdio) that lets an agent read its own durable history.",
    ),
}
"""Every command of the root group, by name, in the order they were registered."""


class LoadedOnUse(MutableMapping[str, click.Command]):
    """A group's ``commands``: a command of :data:`COMMANDS` is imported on first access
    and registered through ``register`` (the group's ``add_command``, which gives it the
    ``--db`` option). Names, ``in`` and ``len`` import nothing; ``values()`` and ``items()``
    import every command, as a caller going through them all expects."""

    def __init__(
        self,
        lazy: Mapping[str, LazyCommand],
        register: Callable[[click.Command, str], None],
    ) -> None:
        self._lazy = dict(lazy)
        self._loaded: dict[str, click.Command] = {}
        self._register = register

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            entry = self._lazy[name]  # KeyError for an unknown name, as a dict says
            module = importlib.import_module(entry.module)
            self._register(getattr(module, entry.attribute), name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._lazy.pop(name, None)
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._lazy or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        yield from self._lazy
        yield from (name for name in self._loaded if name not in self._lazy)

    def __len__(self) -> int:
        return len(self._lazy.keys() | self._loaded.keys())

    def listed(self, name: str) -> click.Command:
        """The command ``name`` as the list of commands shows it: the command itself once
        imported, else a stand-in with its summary and visibility."""
        if name in self._loaded or name not in self._lazy:
            return self[name]
        entry = self._lazy[name]
        return click.Command(name, help=entry.summary, hidden=entry.hidden)


class LazyGroup(ContextStoreGroup):
    """The root group: its commands are imported when used (see :class:`LoadedOnUse`)."""

    def __init__(
        self, *args: Any, lazy_commands: Mapping[str, LazyCommand] = COMMANDS, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.commands: LoadedOnUse = LoadedOnUse(lazy_commands, self.add_command)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's list of commands, made from the summaries: listing imports none."""
        shown = {name: self.commands.listed(name) for name in self.list_commands(ctx)}
        click.Group.format_commands(click.Group(self.name, commands=shown), ctx, formatter)


@click.group(cls=LazyGroup)
@click.option("--db", metavar="PATH_OR_URL", envvar="CONTEXTSTORE_DB", help=DB_HELP)
@click.option("--read-only", is_flag=True, help=READ_ONLY_HELP)
@click.version_option(package_name="contextstore")
@click.pass_context
def cli(ctx: click.Context, db: str | None, read_only: bool) -> None:
    """contextstore: durable, auditable conversation history for LLM agents."""
    keep_driver_logs_off_stderr()
    ctx.ensure_object(dict)
    ctx.obj["db"] = db
    if read_only:
        ctx.obj["read_only"] = True


def main() -> None:
    """Entry point of the ``contextstore`` console script.

    A standard stream the shell closed (``>&-``, ``2>&-``) is Python's None: what would go
    there goes nowhere, as to a reader that went away, and the command still ends with its
    own exit code (it was an internal error, or exit 1 in place of the error's code). A
    stream whose encoding is not UTF-8 gets what it cannot encode escaped
    (:func:`~contextstore.cli.terminal.tolerate_encoding`)."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:  # kept open until the process ends
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
        terminal.tolerate_encoding(getattr(sys, name))
    cli(obj={})
