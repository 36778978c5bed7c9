"""experiences.step_time_s and baseline_step_time_s renamed ranked_time_per_step_s and
baseline_ranked_time_per_step_s: an experience keeps what the search ranked by (the objective's
time per step: the steady step, or the end-to-end time per step), not the steady step"""

from alembic import op

revision = "0003"
down_revision = "0002"
RENAMED = {
    "step_time_s": "ranked_time_per_step_s",
    "baseline_step_time_s": "baseline_ranked_time_per_step_s",
}


def upgrade() -> None:
    with op.batch_alter_table("experiences") as batch:
        for old, new in RENAMED.items():
            batch.alter_column(old, new_column_name=new)


def downgrade() -> None:
    with op.batch_alter_table("experiences") as batch:
        for old, new in RENAMED.items():
            batch.alter_column(new, new_column_name=old)
