"""The root ``contextstore`` command group; each command lives in the module of its topic."""

from __future__ import annotations

import os
import sys

import click

from contextstore.cli import (
    audit,
    demo,
    devtools,
    history,
    interchange,
    maintenance,
    report,
    requests,
    serve,
    settings,
    terminal,
    timeline,
)
from contextstore.cli.common import DB_HELP, READ_ONLY_HELP, ContextStoreGroup, add_db_option
from contextstore.cli.driver_logs import keep_driver_logs_off_stderr


@click.group(cls=ContextStoreGroup)
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


for _command in (
    demo.demo,
    maintenance.migrate,
    maintenance.check,
    maintenance.backup,
    maintenance.recover,
    maintenance.delete,
    history.list_conversations,
    history.show,
    history.render,
    timeline.checkpoint,
    timeline.checkpoints,
    timeline.rollback,
    timeline.restore,
    timeline.fork,
    settings.set_model,
    requests.list_requests,
    requests.show_request,
    audit.audit,
    audit.sql,
    audit.search,
    audit.datasette_metadata_command,
    report.report,
    interchange.import_group,
    interchange.export_group,
    interchange.import_cline_alias,
    interchange.export_cline_alias,
    interchange.import_gemini_alias,
    devtools.crash_test,
    devtools.bench,
    serve.serve,
    serve.mcp,
):
    cli.add_command(_command)

# Commands added to nested groups after registration get the option too.
add_db_option(cli)


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
