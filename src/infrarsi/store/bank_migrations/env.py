"""Alembic environment of the experience bank: its own version table, so a bank may share a
database (a team's PostgreSQL) with run stores."""

from alembic import context

from infrarsi.store.bank_schema import BankBase

config = context.config
connection = config.attributes.get("connection")
context.configure(
    connection=connection,
    target_metadata=BankBase.metadata,
    version_table="bank_alembic_version",
    render_as_batch=True,
)  # SQLite alters tables in batches
with context.begin_transaction():
    context.run_migrations()
