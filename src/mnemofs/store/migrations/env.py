"""Alembic environment: always run with a connection handed in by ``mnemofs.store.engine``."""

from alembic import context

from mnemofs.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
