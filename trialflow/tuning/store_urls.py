"""The experiment store's URLs and engines, with SQLAlchemy alone.

DAG parsing (a changed trialConcurrency, trialflow.hooks.concurrency_at_parse) and the pages' read
models need a store's engine without Optuna, which trialflow.tuning.experiment_store imports
(half a second per parse): what both need about URLs lives here, once.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

#: Seconds a SQLite writer waits for the lock (many trial tasks and the triggerer write at once).
SQLITE_TIMEOUT_SECONDS = 60


def safe_url(url: str) -> str:
    """The URL with any password hidden, for logs and messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable storage URL>"


def with_installed_driver(url: str) -> str:
    """``postgresql://`` means psycopg2 to SQLAlchemy; trialflow's ``postgres`` extra installs
    psycopg 3, so a plain postgresql URL uses that when psycopg2 is absent."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        if importlib.util.find_spec("psycopg2") is None and importlib.util.find_spec("psycopg") is not None:
            return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def sqlite_url(path: str | Path) -> str:
    return f"sqlite:///{Path(path).expanduser().resolve()}"


@lru_cache(maxsize=4)
def engine_for(url: str) -> sa.Engine:
    """One engine per store URL and process, for readers that are not the store itself."""
    url = with_installed_driver(url)
    if make_url(url).get_backend_name() == "sqlite":
        return sa.create_engine(url, connect_args={"timeout": SQLITE_TIMEOUT_SECONDS})
    return sa.create_engine(url, pool_pre_ping=True)
