"""Lineage and processor runs as rows: ``lineage`` and ``processor_runs``.

Revision ID: 0009
Revises: 0006
Create Date: 2026-12-10

- ``lineage`` (new): one row per edge from a derived node (a context update, a deleted
  range with a summary) to a node it was made from (a stored block, an earlier update, an
  earlier range), on the timeline (``ts`` is the derived node's; ``source_ts < ts`` is a
  constraint, so lineage is acyclic).
- ``processor_runs`` (new): one row per processor whose trigger fired in a recorded run,
  with what it was given, what it returned and whether it was applied or dropped as stale.

The upgrade fills ``lineage`` for the rows an existing store already holds: every context
update replaces the block's previous update (or the block), and every range with a summary
abstracts the previous range with a summary and the blocks it newly hides. Processor runs
from before this revision were not recorded, so ``processor_runs`` starts empty. The
downgrade drops both tables; no other table changes either way.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

BACKFILL = (
    # Each update replaces the block's newest earlier update, or the block itself.
    """
    INSERT INTO lineage (conversation_id, ts, derived_kind, derived_message_idx,
                         derived_block_idx, relation,
                         source_kind, source_ts, source_message_idx, source_block_idx)
    SELECT u.conversation_id, u.ts, 'update', u.message_idx, u.block_idx, 'replaces',
           CASE WHEN p.ts IS NULL THEN 'block' ELSE 'update' END, COALESCE(p.ts, m.ts),
           u.message_idx, u.block_idx
    FROM context_updates u
    JOIN messages m ON m.conversation_id = u.conversation_id AND m.idx = u.message_idx
    LEFT JOIN context_updates p
      ON p.conversation_id = u.conversation_id AND p.message_idx = u.message_idx
     AND p.block_idx = u.block_idx
     AND p.ts = (SELECT max(q.ts) FROM context_updates q
                 WHERE q.conversation_id = u.conversation_id AND q.message_idx = u.message_idx
                   AND q.block_idx = u.block_idx AND q.ts < u.ts)
    WHERE COALESCE(p.ts, m.ts) < u.ts
    ORDER BY u.id
    """,
    # A summary abstracts the newest earlier range that carried a summary.
    """
    INSERT INTO lineage (conversation_id, ts, derived_kind, derived_message_idx,
                         derived_block_idx, relation,
                         source_kind, source_ts, source_message_idx, source_block_idx)
    SELECT r.conversation_id, r.ts, 'range', NULL, NULL, 'abstracts', 'range', p.ts,
           NULL, NULL
    FROM deleted_ranges r
    JOIN deleted_ranges p
      ON p.conversation_id = r.conversation_id
     AND p.ts = (SELECT max(q.ts) FROM deleted_ranges q
                 WHERE q.conversation_id = r.conversation_id AND q.ts < r.ts
                   AND q.summary IS NOT NULL)
    WHERE r.summary IS NOT NULL
    ORDER BY r.id
    """,
    # ... and every block it newly hides, as it was then (its newest earlier update).
    """
    INSERT INTO lineage (conversation_id, ts, derived_kind, derived_message_idx,
                         derived_block_idx, relation,
                         source_kind, source_ts, source_message_idx, source_block_idx)
    SELECT r.conversation_id, r.ts, 'range', NULL, NULL, 'abstracts',
           CASE WHEN u.ts IS NULL THEN 'block' ELSE 'update' END, COALESCE(u.ts, m.ts),
           b.message_idx, b.block_idx
    FROM deleted_ranges r
    JOIN blocks b ON b.conversation_id = r.conversation_id AND b.message_idx <= r.end_idx
     AND b.message_idx > COALESCE(
         (SELECT max(q.end_idx) FROM deleted_ranges q
          WHERE q.conversation_id = r.conversation_id AND q.ts < r.ts), 1)
    JOIN messages m ON m.conversation_id = b.conversation_id AND m.idx = b.message_idx
    LEFT JOIN context_updates u
      ON u.conversation_id = b.conversation_id AND u.message_idx = b.message_idx
     AND u.block_idx = b.block_idx
     AND u.ts = (SELECT max(q.ts) FROM context_updates q
                 WHERE q.conversation_id = b.conversation_id AND q.message_idx = b.message_idx
                   AND q.block_idx = b.block_idx AND q.ts < r.ts)
    WHERE r.summary IS NOT NULL AND COALESCE(u.ts, m.ts) < r.ts
    ORDER BY r.id, b.message_idx, b.block_idx
    """,
)


def upgrade() -> None:
    op.create_table(
        "lineage",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("derived_kind", sa.String(length=16), nullable=False),
        sa.Column("derived_message_idx", sa.Integer(), nullable=True),
        sa.Column("derived_block_idx", sa.Integer(), nullable=True),
        sa.Column("relation", sa.String(length=16), nullable=False),
        sa.Column("source_kind", sa.String(length=16), nullable=False),
        sa.Column("source_ts", sa.BigInteger(), nullable=False),
        sa.Column("source_message_idx", sa.Integer(), nullable=True),
        sa.Column("source_block_idx", sa.Integer(), nullable=True),
        sa.CheckConstraint(
            "derived_kind IN ('update', 'range')", name=op.f("ck_lineage_derived_kind")
        ),
        sa.CheckConstraint(
            "source_kind IN ('block', 'update', 'range')", name=op.f("ck_lineage_source_kind")
        ),
        sa.CheckConstraint(
            "relation IN ('replaces', 'abstracts')", name=op.f("ck_lineage_relation")
        ),
        sa.CheckConstraint("source_ts < ts", name=op.f("ck_lineage_source_older")),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_lineage_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lineage")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_lineage_derived", "lineage", ["conversation_id", "ts"])
    op.create_index("ix_lineage_source", "lineage", ["conversation_id", "source_ts"])
    op.create_table(
        "processor_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(length=64), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("processor", sa.String(length=200), nullable=False),
        sa.Column("config_sha256", sa.String(length=64), nullable=False),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("nodes_given", sa.Integer(), nullable=False),
        sa.Column("first_message_idx", sa.Integer(), nullable=True),
        sa.Column("last_message_idx", sa.Integer(), nullable=True),
        sa.Column("seen_through", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("proposed", sa.Integer(), nullable=False),
        sa.Column("applied", sa.Integer(), nullable=False),
        sa.Column("dropped", sa.Integer(), nullable=False),
        sa.Column("result", JSON, nullable=False),
        sa.CheckConstraint(
            "outcome IN ('applied', 'dropped_stale', 'no_change', 'failed')",
            name=op.f("ck_processor_runs_outcome"),
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_processor_runs_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_processor_runs")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_processor_runs_processor", "processor_runs", ["conversation_id", "processor", "ts"]
    )
    for statement in BACKFILL:
        op.execute(statement)


def downgrade() -> None:
    op.drop_index("ix_processor_runs_processor", table_name="processor_runs")
    op.drop_table("processor_runs")
    op.drop_index("ix_lineage_source", table_name="lineage")
    op.drop_index("ix_lineage_derived", table_name="lineage")
    op.drop_table("lineage")
