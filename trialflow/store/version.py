"""Which schema a store is at: the revision this code reads and writes, the errors that say a
store is of another, and a look at a SQLite store's revision that needs neither SQLAlchemy nor
Optuna.

Why apart from trialflow.store.schema: that module holds the tables, the migrations'
entry points and the full check, and importing it costs SQLAlchemy and Optuna (~1 s of a
command's start on two cores, measured). A warm `trialflow run` (the home's Airflow kept up)
only needs to know that its home's store is the one this code reads before it triggers the
run: with this module the trigger goes out ~0.7 s after the command starts instead of ~1.8 s.
The look is strict: it answers "current" only where opening the store would find nothing to
do (trialflow's revision is ``HEAD`` and this Optuna version checked the store's Optuna
revision before, trialflow.store.schema_check); anything else, and every error, sends the
caller to the full open.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: Where trialflow's revision is kept (alembic's layout; Optuna's is ``alembic_version``).
VERSION_TABLE = "trialflow_alembic_version"
#: The schema this code reads and writes: the newest revision in migrations/versions (a test
#: checks the two agree, and that the migrations make exactly store_schema's tables).
HEAD = "0006"
#: The revisions, oldest first, and the release that introduced each (for messages).
RELEASES = {"0001": "0.1.0", "0002": "0.2.0", "0003": "0.2.0", "0004": "0.2.0", "0005": "0.2.0", "0006": "0.2.0"}
#: trialflow.store.schema_check's record of the Optuna versions that checked the store.
CHECKED_TABLE = "trialflow_checked_schema"


class StoreSchemaError(RuntimeError):
    """The store's trialflow tables are of another schema than this code's (the message says
    which and what to run)."""


class NotAStore(LookupError):
    """A database that holds no trialflow store (the message says what it holds instead). A
    command that only reads, or acts on what a store holds, never makes one. ``empty``: the
    database exists and holds no table at all (a store may be made there)."""

    def __init__(self, message: str, empty: bool = False):
        super().__init__(message)
        self.empty = empty


def sqlite_store_is_current(database: Path) -> bool:
    """True when the SQLite store at ``database`` is at ``HEAD`` and its Optuna schema was
    checked by the installed Optuna: opening it would create, check or change nothing. False
    for anything else (no file, another revision, never checked, a read that fails): open it
    the full way then, which says what is wrong."""
    if not database.is_file():
        return False
    try:
        optuna_version = version("optuna")
    except PackageNotFoundError:
        return False
    try:
        with closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True, timeout=5)) as conn:
            revisions = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall()
            checked = conn.execute(
                f"SELECT revision FROM {CHECKED_TABLE} WHERE optuna_version = ?",
                (optuna_version,),
            ).fetchall()
            optuna_revisions = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error:
        return False
    return revisions == [(HEAD,)] and len(checked) == 1 and optuna_revisions == checked
