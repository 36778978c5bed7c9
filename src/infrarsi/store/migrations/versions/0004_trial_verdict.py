"""trials.verdict_json: what a stage concluded of a trial it ran (Apply's measurement of a
round, or the reference run it measured), so a resumed stage reads its journal from the store"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("verdict_json", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("verdict_json")
