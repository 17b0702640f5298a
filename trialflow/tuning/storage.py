"""Optuna's RDB storage with a bulk reader for trials: what makes an ask cheap.

Every tuner's ask reads the study's trials (TPE and GP every finished one). Optuna's
RDBStorage loads them as ORM objects, one per parameter, value and attribute row:
with 1,000 finished trials that is ~11,000 objects and ~0.1 s per read, and an ask
reads three times (waiting trials, the search space, the sample). Here the same rows
are read with six plain SQL queries over the same tables and turned into the same
FrozenTrials (each distinct distribution's JSON decoded once); the store then keeps one
Optuna cache per process (``_CachedStorage``) so a process that asks again reads only the
trials that changed since. The reader is checked against Optuna's own
(tests/tuning/test_storage.py), field for field.

Opening the storage costs ~0.3 s in every task process, most of it importing alembic to
check the schema's revision. Once a process with this Optuna version has done that full
check on a database, it records (Optuna version, revision) in a table of its own; later
opens that find the same pair skip the check (``TrialflowStorage.reopen``). A different
Optuna version, or a database migrated since, takes the full path again.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Container, Iterable
from functools import lru_cache
from typing import Any

import optuna
import sqlalchemy as sa
import sqlalchemy.orm as sa_orm
from optuna import distributions
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import FrozenTrial, TrialState

_STUDIES = models.StudyModel.__table__
_TRIALS = models.TrialModel.__table__
_PARAMS = models.TrialParamModel.__table__
_VALUES = models.TrialValueModel.__table__
_USER_ATTRS = models.TrialUserAttributeModel.__table__
_SYSTEM_ATTRS = models.TrialSystemAttributeModel.__table__
_INTERMEDIATE = models.TrialIntermediateValueModel.__table__


#: The schema checks done: which Optuna version found which alembic revision compatible.
_CHECKED = sa.Table(
    "trialflow_checked_schema",
    sa.MetaData(),
    sa.Column("optuna_version", sa.String(64), primary_key=True),
    sa.Column("revision", sa.String(64), nullable=False),
)
_ALEMBIC = sa.Table("alembic_version", sa.MetaData(), sa.Column("version_num", sa.String(32)))


@lru_cache(maxsize=4096)
def _distribution(distribution_json: str) -> distributions.BaseDistribution:
    """A study has a few distributions and many parameter rows: decode each JSON once."""
    return distributions.json_to_distribution(distribution_json)


class _DeferredVersionManager:
    """Optuna's schema version manager, built (alembic imported) only if something asks for it."""

    def __init__(self, storage: RDBStorage):
        self._storage = storage
        self._manager: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._manager is None:
            from optuna.storages._rdb.storage import _VersionManager

            self._manager = _VersionManager(self._storage.url, self._storage.engine, self._storage.scoped_session)
        return getattr(self._manager, name)


class TrialflowStorage(RDBStorage):
    """RDBStorage whose trial reads are plain SQL (same tables, same FrozenTrials)."""

    @classmethod
    def reopen(cls, url: str, engine_kwargs: dict[str, Any]) -> TrialflowStorage | None:
        """The storage of a database this Optuna version already checked, without checking it
        again; None when it has not (then open it the usual way and ``mark_checked``)."""
        url = cls._fill_storage_url_template(url)
        cls._set_default_engine_kwargs_for_mysql(url, engine_kwargs)
        engine = sa.create_engine(url, **engine_kwargs)
        try:
            with engine.connect() as conn:
                checked = conn.execute(
                    sa.select(_CHECKED.c.revision).where(_CHECKED.c.optuna_version == optuna.__version__)
                ).scalar()
                current = conn.execute(sa.select(_ALEMBIC.c.version_num)).scalars().all()
        except sa.exc.DBAPIError:
            checked, current = None, []
        if checked is None or current != [checked]:
            engine.dispose()
            return None
        storage = cls.__new__(cls)
        # What RDBStorage.__init__ sets, minus the tables' creation and the schema check (the
        # test compares the attributes with a storage opened the usual way).
        storage.engine_kwargs = engine_kwargs
        storage.url = url
        storage.skip_compatibility_check = True
        storage.heartbeat_interval = None
        storage.grace_period = None
        storage.heartbeat_stale_trial_callback = None
        storage.failed_trial_callback = None
        storage.engine = engine
        storage.scoped_session = sa_orm.scoped_session(sa_orm.sessionmaker(bind=engine))
        storage._version_manager = _DeferredVersionManager(storage)  # type: ignore[assignment]
        return storage

    def mark_checked(self) -> None:
        """Record that this Optuna version found the database's schema revision compatible."""
        with self.engine.begin() as conn:
            _CHECKED.create(conn, checkfirst=True)
            revision = conn.execute(sa.select(_ALEMBIC.c.version_num)).scalar()
            if revision is None:
                return
            conn.execute(_CHECKED.delete().where(_CHECKED.c.optuna_version == optuna.__version__))
            conn.execute(_CHECKED.insert().values(optuna_version=optuna.__version__, revision=revision))

    def set_trial_user_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        """Several user attributes in one transaction, through Optuna's own per-key write (which
        commits each key on its own: four keys were four commits, four fsyncs on SQLite)."""
        if not attrs:
            return
        with _create_scoped_session(self.scoped_session, True) as session:
            for key, value in attrs.items():
                self._set_trial_attr_without_commit(session, models.TrialUserAttributeModel, trial_id, key, value)

    def _get_trials(
        self,
        study_id: int,
        states: Container[TrialState] | None,
        included_trial_ids: set[int],
        trial_id_greater_than: int,
    ) -> list[FrozenTrial]:
        included = {i for i in included_trial_ids if i <= trial_id_greater_than}
        where = [_TRIALS.c.study_id == study_id]
        if states is not None:
            assert isinstance(states, Iterable)
            where.append(_TRIALS.c.state.in_(list(states)))
        if trial_id_greater_than > -1:
            newer = _TRIALS.c.trial_id > trial_id_greater_than
            where.append(sa.or_(newer, _TRIALS.c.trial_id.in_(sorted(included))) if included else newer)
        ids = sa.select(_TRIALS.c.trial_id).where(*where).scalar_subquery()
        with self.engine.connect() as conn:
            if conn.execute(sa.select(_STUDIES.c.study_id).where(_STUDIES.c.study_id == study_id)).first() is None:
                raise KeyError(models.NOT_FOUND_MSG)  # what Optuna's reader raises
            trials = conn.execute(
                sa.select(
                    _TRIALS.c.trial_id,
                    _TRIALS.c.number,
                    _TRIALS.c.state,
                    _TRIALS.c.datetime_start,
                    _TRIALS.c.datetime_complete,
                )
                .where(*where)
                .order_by(_TRIALS.c.trial_id)
            ).all()
            if not trials:
                return []
            params = _grouped(conn, _PARAMS, ids, _PARAMS.c.param_id)
            values = _grouped(conn, _VALUES, ids, _VALUES.c.objective)
            user_attrs = _grouped(conn, _USER_ATTRS, ids, _USER_ATTRS.c.trial_user_attribute_id)
            system_attrs = _grouped(conn, _SYSTEM_ATTRS, ids, _SYSTEM_ATTRS.c.trial_system_attribute_id)
            intermediate = _grouped(conn, _INTERMEDIATE, ids, _INTERMEDIATE.c.step)
        return [
            _frozen(
                row,
                params.get(row.trial_id, ()),
                values.get(row.trial_id, ()),
                user_attrs.get(row.trial_id, ()),
                system_attrs.get(row.trial_id, ()),
                intermediate.get(row.trial_id, ()),
            )
            for row in trials
        ]


def _grouped(conn: sa.Connection, table: sa.Table, ids: Any, order: sa.Column) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = defaultdict(list)
    for row in conn.execute(sa.select(table).where(table.c.trial_id.in_(ids)).order_by(table.c.trial_id, order)):
        out[row.trial_id].append(row)
    return out


def _frozen(
    trial: Any,
    params: Iterable[Any],
    values: Iterable[Any],
    user_attrs: Iterable[Any],
    system_attrs: Iterable[Any],
    intermediate: Iterable[Any],
) -> FrozenTrial:
    """One FrozenTrial, built exactly as RDBStorage._build_frozen_trial_from_trial_model does."""
    value_rows = list(values)
    decoded_values: list[float] | None = None
    if value_rows:
        decoded_values = [0.0] * len(value_rows)
        for v in value_rows:
            decoded_values[v.objective] = models.TrialValueModel.stored_repr_to_value(v.value, v.value_type)
    dists = {p.param_name: _distribution(p.distribution_json) for p in params}
    return FrozenTrial(
        number=trial.number,
        state=trial.state,
        value=None,
        values=decoded_values,
        datetime_start=trial.datetime_start,
        datetime_complete=trial.datetime_complete,
        params={p.param_name: dists[p.param_name].to_external_repr(p.param_value) for p in params},
        distributions=dists,
        user_attrs={a.key: json.loads(a.value_json) for a in user_attrs},
        system_attrs={a.key: json.loads(a.value_json) for a in system_attrs},
        intermediate_values={
            v.step: models.TrialIntermediateValueModel.stored_repr_to_intermediate_value(
                v.intermediate_value, v.intermediate_value_type
            )
            for v in intermediate
        },
        trial_id=trial.trial_id,
    )
