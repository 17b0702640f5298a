"""Optuna's schema check, done once per database and Optuna version instead of every open.

Opening Optuna's RDB storage costs ~0.3 s in every task process, most of it importing alembic
to check the schema's revision. Once a process with this Optuna version has done that full
check on a database, the store records (Optuna version, revision) in a table of its own; later
opens that find the same pair skip the check (``TrialflowStorage.reopen``). A different Optuna
version, or a database migrated since, takes the full path again.
"""

from __future__ import annotations

from typing import Any

import optuna
import sqlalchemy as sa
import sqlalchemy.orm as sa_orm
from optuna.storages import RDBStorage

from trialflow.store.optuna_internals import version_manager
from trialflow.store.tables import CHECKED

_ALEMBIC = sa.Table("alembic_version", sa.MetaData(), sa.Column("version_num", sa.String(32)))


class DeferredVersionManager:
    """Optuna's schema version manager, built (alembic imported) only if something asks for it."""

    def __init__(self, storage: RDBStorage):
        self._storage = storage
        self._manager: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._manager is None:
            self._manager = version_manager(self._storage.url, self._storage.engine, self._storage.scoped_session)
        return getattr(self._manager, name)


def was_checked(engine: sa.Engine) -> bool:
    """This Optuna version found the database's current revision compatible before."""
    try:
        with engine.connect() as conn:
            checked = conn.execute(
                sa.select(CHECKED.c.revision).where(CHECKED.c.optuna_version == optuna.__version__)
            ).scalar()
            current = conn.execute(sa.select(_ALEMBIC.c.version_num)).scalars().all()
    except sa.exc.DBAPIError:
        return False
    return checked is not None and current == [checked]


def fill_unchecked(storage: RDBStorage, url: str, engine: sa.Engine, engine_kwargs: dict[str, Any]) -> None:
    """What RDBStorage.__init__ sets, minus the tables' creation and the schema check (the test
    compares the attributes with a storage opened the usual way)."""
    storage.engine_kwargs = engine_kwargs
    storage.url = url
    storage.skip_compatibility_check = True
    storage.heartbeat_interval = None
    storage.grace_period = None
    storage.heartbeat_stale_trial_callback = None
    storage.failed_trial_callback = None
    storage.engine = engine
    storage.scoped_session = sa_orm.scoped_session(sa_orm.sessionmaker(bind=engine))
    storage._version_manager = DeferredVersionManager(storage)  # type: ignore[assignment]


def mark_checked(engine: sa.Engine) -> None:
    """Record that this Optuna version found the database's schema revision compatible."""
    with engine.begin() as conn:
        CHECKED.create(conn, checkfirst=True)
        revision = conn.execute(sa.select(_ALEMBIC.c.version_num)).scalar()
        if revision is None:
            return
        conn.execute(CHECKED.delete().where(CHECKED.c.optuna_version == optuna.__version__))
        conn.execute(CHECKED.insert().values(optuna_version=optuna.__version__, revision=revision))
