"""Every private part of Optuna that trialflow uses, in one place, with the range it was tested on.

Why use them at all: the store is an Optuna RDB storage made cheap for Airflow's many short
task processes (trialflow/store/optuna_storage.py writes a trial in one transaction, snapshot.py
seeds Optuna's per-process cache from one row); both subclass Optuna's storage classes and call
their private helpers. A minor Optuna release may change any of that, so:

* pyproject caps Optuna at the newest minor the suite passed on, and its lower bound is the
  oldest `make test-lowest` passes on; ``TESTED`` says the same range and a test holds the two
  equal (tests/store/test_optuna_internals.py);
* every private module is imported here and nowhere else, and every private method or attribute
  the subclasses call or override is named in ``RDB_STORAGE_MEMBERS`` / ``CACHED_STORAGE_MEMBERS``
  / ``TRIAL_MEMBERS``: the same test checks each still exists, so a new Optuna fails one test
  that names what moved, not every experiment at run time.

Optuna's tables are its models' (``models.*.__table__``), named once for every reader in
trialflow/store/optuna_tables.py: the store, the tuners' history and the read models
(trialflow/queries) query the schema Optuna migrates on purpose, through one declaration.
"""

from __future__ import annotations

import threading
from typing import Any

from optuna.storages._cached_storage import _CachedStorage, _StudyInfo
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session

__all__ = [
    "CACHED_STORAGE_MEMBERS",
    "RDB_STORAGE_MEMBERS",
    "TESTED",
    "TRIAL_MEMBERS",
    "CachedStorage",
    "StudyInfo",
    "create_scoped_session",
    "VERSION_MANAGER_MEMBERS",
    "models",
    "share_alembic_scripts",
    "trial_storage_id",
    "version_manager",
]

#: Optuna versions the suite passed on (pyproject's range for optuna, word for word).
TESTED = ">=4.9,<5.1"

CachedStorage = _CachedStorage
StudyInfo = _StudyInfo
create_scoped_session = _create_scoped_session

#: RDBStorage's private members that TrialflowStorage calls or overrides.
RDB_STORAGE_MEMBERS = (
    "_create_new_trial",
    "_set_trial_param",
    "_set_trial_attr_without_commit",
    "_set_trial_intermediate_value_without_commit",
    "_set_trial_value_without_commit",
    "_fill_storage_url_template",
    "_set_default_engine_kwargs_for_mysql",
    "_version_manager",
)
#: _CachedStorage's private members that SnapshotCache calls or reads.
CACHED_STORAGE_MEMBERS = ("_read_trials_from_remote_storage", "_add_trials_to_cache", "_studies", "_lock")
#: Optuna's schema version manager's private method share_alembic_scripts wraps.
VERSION_MANAGER_MEMBERS = ("_create_alembic_script",)
#: optuna.Trial's (and FrozenTrial's) private attribute the store reads.
TRIAL_MEMBERS = ("_trial_id",)


def trial_storage_id(trial: Any) -> int:
    """The storage id of a trial Optuna just created with ``study.ask()`` (Optuna keeps it in a
    private attribute; the public ``number`` is per study)."""
    return int(trial._trial_id)


def version_manager(url: str, engine: Any, scoped_session: Any) -> Any:
    """Optuna's schema version manager (imports alembic: built only when something asks)."""
    from optuna.storages._rdb.storage import _VersionManager

    return _VersionManager(url, engine, scoped_session)


_scripts_lock = threading.Lock()
_scripts: list[Any] = []


def share_alembic_scripts() -> None:
    """One alembic ScriptDirectory of Optuna's migrations per process, not one per new database.

    Optuna builds it (reading and executing its ~30 migration files, each declaring SQLAlchemy
    models) twice at every new database's first open, to stamp the head revision: 0.15 s each
    time, a fifth of `make test-unit` (measured 2026-12-02, cProfile). The files are Optuna's own
    and do not change while it runs; the scripts hold no database (Optuna's ``upgrade`` builds its
    own configuration, untouched here). Idempotent."""
    from optuna.storages._rdb.storage import _VersionManager

    original = _VersionManager._create_alembic_script
    if getattr(original, "shared_by_trialflow", False):
        return

    def shared(self: Any) -> Any:
        with _scripts_lock:
            if not _scripts:
                _scripts.append(original(self))
            return _scripts[0]

    shared.shared_by_trialflow = True  # type: ignore[attr-defined]
    _VersionManager._create_alembic_script = shared  # type: ignore[method-assign]
