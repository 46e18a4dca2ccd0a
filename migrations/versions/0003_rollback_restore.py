"""Remember when a rollback's archived rows were put back (``rollbacks.restored_ts``).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

``ContextStore.restore`` puts the rows a rollback archived back into the timeline; the
rollback row stays for the audit trail and records the restore's own ``ts``, so a second
restore of the same rollback is refused.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rollbacks") as batch:
        batch.add_column(sa.Column("restored_ts", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rollbacks") as batch:
        batch.drop_column("restored_ts")
