"""Creating trialflow's own tables in a store when they are first needed.

"CREATE TABLE" is not safe against a concurrent twin: two editors adding the first trials of
an experiment at once both found the queue table missing, and the loser failed with "table
trialflow_trial_queue already exists" (SQLite; PostgreSQL raises a unique violation on
pg_type), so its action was lost. The loser now looks again, and finds the table there.
"""

from __future__ import annotations

import sqlalchemy as sa

#: What a CREATE TABLE that lost to a concurrent one raises, by database.
_LOST_TO_A_TWIN = (sa.exc.OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError)


def create_tables(metadata: sa.MetaData, engine: sa.Engine) -> None:
    """Create ``metadata``'s tables that are missing; a concurrent creator's win is fine."""
    try:
        metadata.create_all(engine, checkfirst=True)
    except _LOST_TO_A_TWIN:
        metadata.create_all(engine, checkfirst=True)  # another process created them meanwhile
