"""Block indexes chosen by measurement: tool calls only by id, no index on ``path``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

Measured with SQLite's ``dbstat`` on the benchmark's 10,000 messages (2 KB tool results,
README "Performance", "Disk"), each of the two indexes took 0.056x of the content:

- ``ix_blocks_tool_use_id`` (recreated, same columns ``(conversation_id, tool_use_id)``)
  covers only ``type = 'tool_use'`` rows. The one statement that reads it looks up the calls
  a tool result answers; results held an entry each (half the index) that nothing read.
- ``ix_blocks_path`` (dropped): no statement looks blocks up by ``path``, and the views'
  queries that group by it read a conversation's blocks through the primary key.

No table changes and no row moves. The downgrade puts both indexes back as revisions 0006
and 0008 made them. On SQLite the freed pages are reused by later writes; the file shrinks
only when it is vacuumed (``contextstore`` never vacuums on its own).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

CALLS = "type = 'tool_use'"
WITH_ID = "tool_use_id IS NOT NULL"
WITH_PATH = "path IS NOT NULL"


def _tool_use_index(where: str) -> None:
    op.create_index(
        "ix_blocks_tool_use_id",
        "blocks",
        ["conversation_id", "tool_use_id"],
        unique=False,
        sqlite_where=sa.text(where),
        postgresql_where=sa.text(where),
    )


def upgrade() -> None:
    op.drop_index("ix_blocks_path", table_name="blocks")
    op.drop_index("ix_blocks_tool_use_id", table_name="blocks")
    _tool_use_index(CALLS)


def downgrade() -> None:
    op.drop_index("ix_blocks_tool_use_id", table_name="blocks")
    _tool_use_index(WITH_ID)
    op.create_index(
        "ix_blocks_path",
        "blocks",
        ["conversation_id", "path"],
        unique=False,
        sqlite_where=sa.text(WITH_PATH),
        postgresql_where=sa.text(WITH_PATH),
    )
