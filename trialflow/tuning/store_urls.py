"""The experiment store's URLs and engines, with SQLAlchemy alone.

DAG parsing (a changed trialConcurrency, trialflow.from_airflow.concurrency_at_parse) and the pages' read
models need a store's engine without Optuna, which trialflow.tuning.experiment_store imports
(half a second per parse): what both need about URLs lives here, once, with how a SQLite
store's file is put in WAL mode.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from contextlib import closing
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlalchemy as sa

#: Seconds a SQLite writer waits for the lock (many trial tasks and the triggerer write at once).
SQLITE_TIMEOUT_SECONDS = 60


def use_wal(database: str | Path, timeout: float = SQLITE_TIMEOUT_SECONDS) -> None:
    """Put a SQLite store in WAL mode (readers, the progress line and the pages, then work while
    trials write; the mode sticks to the file).

    Switching needs a moment's exclusive lock, and when processes open a new file at once SQLite
    answers SQLITE_BUSY ("database is locked") at once, without waiting on the busy timeout
    (measured: 40 fresh files opened by 8 processes each, 11 and 22 of the 320 switches failed in
    two runs; CI's ``test-lowest`` met it). So a busy answer is tried again, with a short growing
    pause, until ``timeout``; a file already in WAL needs no lock and returns at once.
    """
    import tenacity  # here: this module is on the DAG-parse path, which opens no store (56 ms)

    for attempt in tenacity.Retrying(
        retry=tenacity.retry_if_exception(_busy),
        wait=tenacity.wait_exponential(multiplier=0.005, max=0.2),
        stop=tenacity.stop_after_delay(timeout),
        reraise=True,
    ):
        with attempt, closing(sqlite3.connect(database, timeout=timeout)) as conn:
            if conn.execute("PRAGMA journal_mode").fetchone() != ("wal",):
                conn.execute("PRAGMA journal_mode=WAL")


def _busy(exc: BaseException) -> bool:
    """SQLITE_BUSY and its extended codes (a recovery, a snapshot), by code, not by message."""
    return isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY


def safe_url(url: str) -> str:
    """The URL with any password hidden, for logs and messages."""
    from sqlalchemy.engine import make_url  # here, as in every function: see sqlite_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable storage URL>"


def with_installed_driver(url: str) -> str:
    """``postgresql://`` means psycopg2 to SQLAlchemy; trialflow's ``postgres`` extra installs
    psycopg 3, so a plain postgresql URL uses that when psycopg2 is absent."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        if importlib.util.find_spec("psycopg2") is None and importlib.util.find_spec("psycopg") is not None:
            return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def sqlite_url(path: str | Path) -> str:
    """A SQLite store's URL. Needs no SQLAlchemy, which this module imports only in the
    functions that use it: a warm `trialflow run` names its home's store before it triggers,
    and SQLAlchemy's import (0.4 s) would come before the trigger."""
    return f"sqlite:///{Path(path).expanduser().resolve()}"


@lru_cache(maxsize=4)
def engine_for(url: str) -> sa.Engine:
    """One engine per store URL and process, for readers that are not the store itself."""
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    url = with_installed_driver(url)
    if make_url(url).get_backend_name() == "sqlite":
        return sa.create_engine(url, connect_args={"timeout": SQLITE_TIMEOUT_SECONDS})
    return sa.create_engine(url, pool_pre_ping=True)
