"""trials.predicted_step_time_s renamed predicted_ranked_time_per_step_s: the models'
prediction is of what the search ranks by (the objective's time per step: the steady step, or
the end-to-end time per step), not of the steady step"""

from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.alter_column(
            "predicted_step_time_s", new_column_name="predicted_ranked_time_per_step_s"
        )


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.alter_column(
            "predicted_ranked_time_per_step_s", new_column_name="predicted_step_time_s"
        )
