"""The experiment store's URLs and engines, with SQLAlchemy alone.

DAG parsing (a changed trialConcurrency, trialflow.from_airflow.concurrency_at_parse) and the pages' read
models need a store's engine without Optuna, which trialflow.store.experiment_store imports
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


class StoreUrlError(ValueError):
    """A store URL that cannot be split unambiguously (the message shows its scheme alone)."""


def check_store_url(url: str) -> None:
    """Refuse a URL whose credentials SQLAlchemy would split at the wrong place, before any
    part of it reaches a parser, a driver or a message.

    SQLAlchemy ends a password at its first '@': ``alice:p@ssW0rd@host`` gives the password
    ``p`` and the host ``ssW0rd@host``, and the driver's "failed to resolve host" then said the
    rest of the password (measured, psycopg). So the part before the path holding more than
    one '@' is refused, as is one SQLAlchemy cannot read at all (an '@' or ':' moved into the
    port, whose int() error repeated it); a SQLite URL has no such part.
    """
    from sqlalchemy.engine import make_url

    scheme, sep, rest = url.partition("://")
    shown = f"{_scheme(url)}://..."
    head = rest.split("?", 1)[0] if sep and not rest.startswith("/") else ""
    expected = (
        "expected dialect://user:password@host:port/database or sqlite:///path; a password "
        "holding '@', ':' or '/' must be percent-encoded (@ as %40)"
    )
    if head.count("@") > 1:
        raise StoreUrlError(f"the store URL ({shown}) holds more than one '@' before its host: {expected}")
    try:
        make_url(url)
    except Exception:
        raise StoreUrlError(f"the store URL ({shown}) is not one SQLAlchemy reads: {expected}") from None


def safe_url(url: str) -> str:
    """The URL with any password hidden, for logs and messages; one that cannot be split
    unambiguously shows its scheme alone."""
    from sqlalchemy.engine import make_url  # here, as in every function: see sqlite_url

    try:
        check_store_url(url)
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return f"{_scheme(url)}://..."


def _scheme(url: str) -> str:
    """A URL's scheme, when it reads as one (letters, digits, '+', '.', '-'), else '?'."""
    scheme, sep, _ = url[:40].partition("://")
    return scheme if sep and scheme and all(c.isalnum() or c in "+.-" for c in scheme) else "?"


def with_installed_driver(url: str) -> str:
    """``postgresql://`` means psycopg2 to SQLAlchemy; trialflow's ``postgres`` extra installs
    psycopg 3, so a plain postgresql URL uses that when psycopg2 is absent. Every store engine
    is made from what this returns, so an ambiguous URL is refused here (check_store_url)."""
    from sqlalchemy.engine import make_url

    check_store_url(url)
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
