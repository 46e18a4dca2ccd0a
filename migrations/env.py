"""Alembic environment: uses the caller's connection, or opens the configured database."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from contextstore.storage.tables import metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from contextstore.storage.migrate import engine_for_cli

    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    engine = engine_for_cli(url)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit(
        "contextstore migrations run online only: pass a database with -x url=... or "
        "$CONTEXTSTORE_DB."
    )
_run_online()
