"""trialflow's own tables in a store: their schema version, checked whenever a store opens, and
the migrations that move a store to it, run on purpose (``trialflow db upgrade``).

Experiments live for months and trialflow changes underneath them. Optuna versions its tables
with alembic (its ``alembic_version`` table, ``optuna storage upgrade``); trialflow's own tables
(the trial index, the trial queue, the DAG limits, the snapshots, the history windows, the
schema-check record, and trialflow's one index on Optuna's trials table) are versioned the
same way in a version table of their own (``trialflow_alembic_version``), with the revisions in
trialflow/store/migrations/versions.

Opening a store compares its revision with ``HEAD`` (one indexed read, no alembic import on a
trial task's path):

* a new store (no trialflow table yet) is created at ``HEAD`` and stamped;
* a store at ``HEAD`` opens;
* any other store is refused with StoreSchemaError, which says what it is and what to run:
  a store of trialflow 0.1.0 (its tables carry no version), or of an earlier schema, needs
  ``trialflow db upgrade``; one of a newer trialflow needs a newer trialflow. Never a
  traceback from a missing column in the middle of a run, never a silent partial upgrade.

``upgrade`` runs Optuna's own upgrade (as ``optuna storage upgrade`` does) and then every
trialflow migration in one transaction, DDL included on both databases (PostgreSQL's DDL is
transactional; SQLite's is made so, and alembic's batch mode copies a changed table inside
it), so trialflow's tables are moved whole or left as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from trialflow.store.tables import CHECKED, METADATA, TRIAL_INDEX, TRIALS_BY_STATE, create_index, create_tables
from trialflow.store.version import HEAD, RELEASES, VERSION_TABLE, NotAStore, StoreSchemaError

MIGRATIONS = Path(__file__).with_name("migrations")

_VERSION = sa.Table(
    VERSION_TABLE,
    sa.MetaData(),
    sa.Column("version_num", sa.String(32), primary_key=True),  # alembic's own definition
)


def head_metadata() -> sa.MetaData:
    """Every trialflow table (and index) of ``HEAD`` in one MetaData: trialflow.store.tables'
    declarations, what a new store is created with and the migrations are compared with."""
    return METADATA


@dataclass(frozen=True)
class SchemaState:
    """What a store holds: trialflow's revision (None: no version table, or an empty one) and
    whether trialflow's trial index is there: every store trialflow 0.1.0 opened has it (0.1.0
    had no versions). Its other tables were made when first needed, so one of them alone is
    a new store that something wrote to before it was opened, not an old one."""

    revision: str | None
    tables: bool

    @property
    def fresh(self) -> bool:
        return self.revision is None and not self.tables

    @property
    def current(self) -> bool:
        return self.revision == HEAD


def state(engine: sa.Engine) -> SchemaState:
    """The store's schema state, in one query when it is versioned.

    A new store is made whole in one transaction (version row and tables together), so tables
    seen without a revision are read again: the first read may have come before a twin's
    commit and the look at the tables after it (measured: eight workers opening a new
    PostgreSQL store at once, one called it trialflow 0.1.0's). Read after the tables were
    seen, a missing revision is conclusive."""
    revision = _revision(engine)
    if revision is not None:
        return SchemaState(revision, True)
    if TRIAL_INDEX.name not in sa.inspect(engine).get_table_names():
        return SchemaState(None, False)
    return SchemaState(_revision(engine), True)


def _revision(engine: sa.Engine) -> str | None:
    """The one revision recorded, or None (no version table, or not exactly one row)."""
    try:
        with engine.connect() as conn:
            revisions = conn.execute(sa.select(_VERSION.c.version_num)).scalars().all()
    except sa.exc.DBAPIError:
        return None  # no version table
    return revisions[0] if len(revisions) == 1 else None


def ensure_schema(engine: sa.Engine, checked: bool) -> None:
    """Create trialflow's tables in a new store; check an existing one (StoreSchemaError).
    ``checked``: this process's Optuna found the store before (its tables are all there)."""
    found = state(engine)
    if found.current:
        if not checked:
            # A table dropped by hand comes back, and so does the index on Optuna's trials (a
            # rebuild of that table by a migration of Optuna's own would lose it)
            create_tables(head_metadata(), engine)
            create_index(TRIALS_BY_STATE, engine)
        return
    if found.fresh:
        create_store(engine)
        return
    raise StoreSchemaError(refusal(engine, found))


def create_store(engine: sa.Engine) -> None:
    """Make a new store's trialflow tables and stamp them ``HEAD``, in one transaction: every
    other opener sees no trialflow table or all of them with their revision, never tables
    without a version (which is what a store of 0.1.0 looks like). A twin that made the store
    first is found inside the transaction on SQLite (BEGIN EXCLUSIVE waits for it); on
    PostgreSQL the loser's CREATE fails on commit of the winner and the opener tries again
    (ExperimentStore's open retries), finding the store current."""
    creating = _transactional(engine)
    try:
        with creating.begin() as conn:
            if _VERSION.name in sa.inspect(conn).get_table_names():
                if conn.execute(sa.select(_VERSION.c.version_num)).first() is not None:
                    return  # a twin made it while this one waited for the lock
            else:
                _VERSION.create(conn)
            head_metadata().create_all(conn, checkfirst=True)
            TRIALS_BY_STATE.create(conn, checkfirst=True)
            conn.execute(_VERSION.insert().values(version_num=HEAD))
    finally:
        if creating is not engine:
            creating.dispose()


#: Optuna's own tables: a database with these alone is an Optuna storage, not trialflow's.
_OPTUNA_MARK = "studies"


def existing_store(url: str) -> None:
    """Refuse (NotAStore) a store URL with no trialflow store behind it, without creating or
    writing anything: a SQLite path that does not exist is not opened (opening makes the
    file), an empty database is named as empty, a database of other tables as not trialflow's.
    A store of another trialflow passes here: opening it says what to run (StoreSchemaError)."""
    from trialflow.store.urls import safe_url

    parsed = sa.engine.make_url(url)
    shown = safe_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:") or not Path(database).is_file():
            raise NotAStore(f"{shown}: no experiment store there (no such file; a run or an import makes one)")
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        names = set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    if TRIAL_INDEX.name in names or VERSION_TABLE in names:
        return
    if not names:
        raise NotAStore(
            f"{shown}: the database is empty: no experiment store there (a run or an import makes one)", empty=True
        )
    if _OPTUNA_MARK in names:
        raise NotAStore(f"{shown}: an Optuna storage without trialflow's tables, not a trialflow experiment store")
    others = sorted(names)
    listed = ", ".join(n[:40] for n in others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    raise NotAStore(f"{shown}: not a trialflow experiment store (it holds other tables: {listed})")


def refusal(engine: sa.Engine, found: SchemaState) -> str:
    """Why a store does not open, and what to run."""
    from trialflow import __version__

    where = f"the experiment store {engine.url.render_as_string(hide_password=True)}"
    database = engine.url.database or ""
    if engine.dialect.name == "sqlite" and database.endswith("/experiments.db"):  # a `trialflow run` home
        named = f"--home {database.rsplit('/', 1)[0]}`"
    else:
        named = (
            "--store URL` with this store's URL (`trialflow db upgrade` alone for the store of the "
            "trialflow_default connection)"
        )
    command = f"back it up, then run `trialflow db upgrade {named}"
    if found.revision is None:
        return (
            f"{where} was written by trialflow 0.1.0 (its tables carry no schema version); trialflow "
            f"{__version__} needs schema {HEAD}: {command}"
        )
    if found.revision in RELEASES:
        return (
            f"{where} has schema {found.revision} (trialflow {RELEASES[found.revision]}); trialflow "
            f"{__version__} needs schema {HEAD}: {command}"
        )
    return (
        f"{where} has schema {found.revision[:32]!r}, which trialflow {__version__} does not know: it was "
        "written by a newer trialflow; install that version (or newer) to open it"
    )


def upgrade(engine: sa.Engine) -> tuple[str | None, str]:
    """Move the store to ``HEAD``: Optuna's tables first (its own upgrade), then trialflow's
    migrations, all of them in one transaction. Returns (revision before, after); a store of a
    newer trialflow is refused (StoreSchemaError), as is a database with no Optuna store."""
    from alembic import command
    from alembic.config import Config

    found = state(engine)
    if found.revision is not None and found.revision not in RELEASES:
        raise StoreSchemaError(refusal(engine, found))
    _upgrade_optuna(engine)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    migrating = _transactional(engine)
    try:
        with migrating.begin() as conn:
            config.attributes["connection"] = conn  # migrations/env.py runs them on it
            command.upgrade(config, "head")
    finally:
        if migrating is not engine:
            migrating.dispose()
    return found.revision, state(engine).revision or HEAD


def _transactional(engine: sa.Engine) -> sa.Engine:
    """An engine whose transactions hold DDL too. PostgreSQL's do; Python's sqlite3 runs a
    CREATE or ALTER outside any transaction until the first row is written, so a migration
    that failed half-way would leave its first tables behind: here SQLite's transactions are
    begun explicitly (BEGIN EXCLUSIVE: the store's other writers wait on their busy timeout
    while it migrates), as SQLAlchemy's pysqlite documentation shows."""
    if engine.dialect.name != "sqlite":
        return engine
    url = engine.url.render_as_string(hide_password=False)
    migrating = sa.create_engine(url, connect_args={"timeout": 60}, poolclass=sa.pool.NullPool)

    @sa.event.listens_for(migrating, "connect")
    def _no_implicit_transactions(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(migrating, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN EXCLUSIVE")

    return migrating


def _upgrade_optuna(engine: sa.Engine) -> None:
    from optuna.storages import RDBStorage

    url = engine.url.render_as_string(hide_password=False)
    storage = RDBStorage(url, skip_compatibility_check=True, skip_table_creation=True)
    try:
        if storage.get_current_version() != storage.get_head_version():
            storage.upgrade()
            with engine.begin() as conn:  # the schema-check record names the old revision
                CHECKED.create(conn, checkfirst=True)
                conn.execute(CHECKED.delete())
    finally:
        storage.engine.dispose()
