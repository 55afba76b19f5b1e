"""Alembic environment: runs migrations on the connection the Database hands over."""

from alembic import context

from corral.storage.tables import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
