"""Runs trialflow's store migrations on the connection trialflow.store.schema.upgrade
hands over (alembic's recipe for sharing a connection): in its transaction, with trialflow's
own version table, batch mode for SQLite's ALTERs. Online only: there is no offline SQL mode."""

from __future__ import annotations

from alembic import context

from trialflow.store.tables import METADATA
from trialflow.store.version import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=METADATA, version_table=VERSION_TABLE, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
