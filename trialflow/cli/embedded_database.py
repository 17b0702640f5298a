"""How a private Airflow (``trialflow run``, the tests' Airflow) connects to its SQLite
metadata database: kept apart from trialflow.cli.embedded because every Airflow component imports
it (``[database] sql_alchemy_connect_args`` names this module's dict) and must not pay for
more than a dict.

Python's sqlite3 waits 5 s for a lock by default, and Airflow sets no other wait. On a loaded
two-core machine the scheduler met a write lock held longer than that while ten trial tasks
were marked failed around their deferral (ten PATCHes, their deferrals, their heartbeats):
``sqlite3.OperationalError: database is locked`` past Airflow's own retries, and the scheduler
exited (measured in the full suite; every later run of that Airflow then waited for nothing),
and so did the triggerer in another run. The scheduler, the triggerer and the dag-processor
wait longer (SQLITE_TIMEOUT); given to every component, the same load
stalled the api-server for 60 s (its requests queued on one another's locks instead of
answering 500 at once, which a client retries), measured too. PostgreSQL deployments are not
touched.
"""

from __future__ import annotations

#: Seconds a connection waits for SQLite's write lock before "database is locked".
SQLITE_TIMEOUT = 30.0

#: ``[database] sql_alchemy_connect_args`` of a private Airflow's scheduler on SQLite (Airflow
#: adds check_same_thread to it).
CONNECT_ARGS: dict[str, object] = {"timeout": SQLITE_TIMEOUT}
