"""Alembic environment of the store: migrations run on the connection the store hands over."""

from alembic import context

from infrarsi.store.schema import Base

config = context.config
connection = config.attributes.get("connection")
context.configure(
    connection=connection, target_metadata=Base.metadata, render_as_batch=True
)  # SQLite alters tables in batches
with context.begin_transaction():
    context.run_migrations()
