"""experiences and patch texts"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "experiences",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(255), nullable=False, unique=True),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False, index=True),
        sa.Column("contract_hash", sa.String(64), nullable=False),
        sa.Column("stage", sa.String(16), nullable=False),
        sa.Column("workload", sa.String(128), nullable=False),
        sa.Column("scale", sa.String(64), nullable=False),
        sa.Column("hardware_fp", sa.String(32), nullable=False, index=True),
        sa.Column("hardware_json", sa.JSON, nullable=False),
        sa.Column("workload_fp", sa.String(32), nullable=False, index=True),
        sa.Column("workload_json", sa.JSON, nullable=False),
        sa.Column("knobs_json", sa.JSON, nullable=False),
        sa.Column("patches_json", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("speedup", sa.Float, nullable=True),
        sa.Column("censored", sa.Boolean, nullable=False),
        sa.Column("step_time_s", sa.Float, nullable=True),
        sa.Column("baseline_step_time_s", sa.Float, nullable=True),
        sa.Column("peak_mem_bytes", sa.Float, nullable=True),
        sa.Column("baseline_peak_mem_bytes", sa.Float, nullable=True),
        sa.Column("capacity_bytes", sa.Float, nullable=True),
        sa.Column("peak_share", sa.Float, nullable=True),
        sa.Column("cost_s", sa.Float, nullable=True),
    )
    op.create_table(
        "patch_texts",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("patch_id", sa.String(128), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("patch_texts")
    op.drop_table("experiences")
