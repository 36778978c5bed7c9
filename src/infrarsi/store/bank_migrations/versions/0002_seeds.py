"""seeds: what the bank gave each run, and whether it held there"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    op.create_table(
        "seeds",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False, index=True),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.Column("knobs_json", sa.JSON, nullable=False),
        sa.Column("patches_json", sa.JSON, nullable=False),
        sa.Column("expected_speedup", sa.Float, nullable=False),
        sa.Column("similarity", sa.Float, nullable=False),
        sa.Column("source_json", sa.JSON, nullable=False),
        sa.Column("measured_speedup", sa.Float, nullable=True),
        sa.Column("held", sa.Boolean, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("seeds")
