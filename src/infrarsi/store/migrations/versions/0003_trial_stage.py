"""trials.stage, label, proposed_by: every stage's trials in the store, with who proposed each"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("stage", sa.String(16), nullable=False, server_default="run"))
        batch.add_column(sa.Column("label", sa.String(128), nullable=True))
        batch.add_column(sa.Column("proposed_by", sa.String(256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("proposed_by")
        batch.drop_column("label")
        batch.drop_column("stage")
