"""The root ``contextstore`` command group; each command lives in the module of its topic."""

from __future__ import annotations

import click

from contextstore.cli import demo, devtools, history, interchange, maintenance, serve, timeline


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


for _command in (
    demo.demo,
    maintenance.migrate,
    maintenance.check,
    history.list_conversations,
    history.render,
    timeline.checkpoints,
    timeline.rollback,
    interchange.import_cline,
    interchange.export_cline,
    interchange.import_gemini,
    devtools.crash_test,
    devtools.bench,
    serve.serve,
    serve.mcp,
):
    cli.add_command(_command)


def main() -> None:
    """Entry point of the ``contextstore`` console script."""
    cli(obj={})
