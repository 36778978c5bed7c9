"""runs and trials"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.Column("workload", sa.String(128), nullable=False),
        sa.Column("scale", sa.String(64), nullable=False),
        sa.Column("contract_hash", sa.String(64), nullable=False),
        sa.Column("contract_json", sa.JSON, nullable=False),
        sa.Column("searcher", sa.String(32), nullable=False),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.Column("budget_trials", sa.Integer, nullable=True),
        sa.Column("budget_s", sa.Float, nullable=True),
        sa.Column("capacity_bytes", sa.Integer, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stop_reason", sa.Text, nullable=True),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "run_id", sa.String(64), sa.ForeignKey("runs.run_id"), nullable=False, index=True
        ),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("config_json", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("trial_id", sa.String(128), nullable=True),
        sa.Column("predicted_step_time_s", sa.Float, nullable=True),
        sa.Column("predicted_p_oom", sa.Float, nullable=True),
        sa.Column("predicted_peak_bytes", sa.Float, nullable=True),
        sa.Column("step_time_s", sa.Float, nullable=True),
        sa.Column("peak_mem_bytes", sa.Float, nullable=True),
        sa.Column("cost_s", sa.Float, nullable=True),
        sa.Column("started_unix_s", sa.Float, nullable=False),
        sa.Column("ended_unix_s", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("record_json", sa.JSON, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("trials")
    op.drop_table("runs")
