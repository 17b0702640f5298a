"""Optuna's RDB storage with a bulk reader for trials: what makes an ask cheap.

Every tuner's ask reads the study's trials (TPE and GP every finished one). Optuna's
RDBStorage loads them as ORM objects, one per parameter, value and attribute row:
with 1,000 finished trials that is ~11,000 objects and ~0.1 s per read, and an ask
reads three times (waiting trials, the search space, the sample). Here the same rows
are read with six plain SQL queries over the same tables and turned into the same
FrozenTrials (each distinct distribution's JSON decoded once); the store then keeps one
Optuna cache per process (``_CachedStorage``) so a process that asks again reads only the
trials that changed since. The reader is checked against Optuna's own
(tests/tuning/test_rdb_storage.py), field for field.

Writes are grouped the same way. Optuna commits each parameter, attribute and state change on
its own (a trial task made 25 commits, each an fsync on SQLite, and 93 statements); here an
asked trial's parameters are held while the sampler draws them (Optuna never reads them back
during an ask) and written with its attributes in one transaction, and a trial is closed
(attributes, value, state) in one, each through Optuna's own per-row helpers. A study's id and
directions never change, so each storage looks them up once.

Opening the storage costs ~0.3 s in every task process, most of it importing alembic to
check the schema's revision. Once a process with this Optuna version has done that full
check on a database, it records (Optuna version, revision) in a table of its own; later
opens that find the same pair skip the check (``TrialflowStorage.reopen``). A different
Optuna version, or a database migrated since, takes the full path again.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import defaultdict
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple, cast

import optuna
import sqlalchemy as sa
import sqlalchemy.orm as sa_orm
from optuna import distributions
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.dialects import postgresql as postgresql_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect

from trialflow.tuning.optuna_internals import create_scoped_session as _create_scoped_session
from trialflow.tuning.optuna_internals import models, version_manager

_STUDIES = models.StudyModel.__table__
_TRIALS = models.TrialModel.__table__
_PARAMS = models.TrialParamModel.__table__
_VALUES = models.TrialValueModel.__table__
_USER_ATTRS = models.TrialUserAttributeModel.__table__
_SYSTEM_ATTRS = models.TrialSystemAttributeModel.__table__
_INTERMEDIATE = models.TrialIntermediateValueModel.__table__
#: The dialects whose INSERT ... ON CONFLICT DO UPDATE writes several attributes at once.
_UPSERTS: dict[str, Callable[[sa.Table], Any]] = {
    "sqlite": sqlite_dialect.insert,
    "postgresql": postgresql_dialect.insert,
}


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
            self._manager = version_manager(self._storage.url, self._storage.engine, self._storage.scoped_session)
        return getattr(self._manager, name)


class HeldParam(NamedTuple):
    """A parameter the sampler drew, not yet written (see TrialflowStorage.holding_params)."""

    trial_id: int
    name: str
    value_internal: float
    distribution: distributions.BaseDistribution
    previous_distribution: distributions.BaseDistribution | None


class TrialflowStorage(RDBStorage):
    """RDBStorage whose trial reads are plain SQL (same tables, same FrozenTrials) and whose
    trial writes can share one transaction."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_local_state()

    def _init_local_state(self) -> None:
        self._study_ids: dict[str, int] = {}
        self._directions: dict[int, list[StudyDirection]] = {}
        self._held = threading.local()  # per thread: the triggerer follows many trials at once

    # -- what never changes for a study (trialflow deletes no study) --------------------------

    def get_study_id_from_name(self, study_name: str) -> int:
        known = self._study_ids.get(study_name)
        if known is None:
            known = self._study_ids[study_name] = super().get_study_id_from_name(study_name)
        return known

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        known = self._directions.get(study_id)
        if known is None:
            known = super().get_study_directions(study_id)
            if StudyDirection.NOT_SET not in known:
                self._directions[study_id] = known
        return known

    # -- grouped writes -----------------------------------------------------------------------

    @contextmanager
    def holding_params(self) -> Iterator[list[HeldParam]]:
        """Within the block, parameters the sampler sets (this thread) are held in the yielded
        list instead of written one commit each; write them with :meth:`write_params`."""
        held: list[HeldParam] = []
        self._held.params = held
        try:
            yield held
        finally:
            self._held.params = None

    def _set_trial_param(
        self,
        trial_id: int,
        param_name: str,
        param_value_internal: float,
        distribution: distributions.BaseDistribution,
        previous_distribution: distributions.BaseDistribution | None,
    ) -> None:
        held = getattr(self._held, "params", None)
        if held is None:
            super()._set_trial_param(trial_id, param_name, param_value_internal, distribution, previous_distribution)
            return
        held.append(HeldParam(trial_id, param_name, param_value_internal, distribution, previous_distribution))

    @contextmanager
    def transaction(self) -> Iterator[sa_orm.Session]:
        """One session and transaction for several writes (committed at the end, rolled back
        on an error, which is raised)."""
        with _create_scoped_session(self.scoped_session) as session:
            yield session

    def write_params(self, session: sa_orm.Session, params: Iterable[HeldParam]) -> None:
        """Held parameters, with Optuna's own checks (the trial is updatable; a parameter's
        distribution agrees with the study's earlier ones)."""
        for held in params:
            self._set_trial_param_without_commit(session, *held)

    def write_user_attrs(
        self, session: sa_orm.Session, trial_id: int, attrs: dict[str, Any], checked: bool = False
    ) -> None:
        """A trial's user attributes in one statement where the database upserts (SQLite,
        PostgreSQL: the same ON CONFLICT upsert Optuna writes per key), else Optuna's per-key
        write. ``checked``: the caller already found the trial updatable in this session."""
        if not attrs:
            return
        upsert = _UPSERTS.get(self.engine.name)
        if upsert is None or (self.engine.name == "sqlite" and sqlite3.sqlite_version_info < (3, 24, 0)):
            for key, value in attrs.items():
                self._set_trial_attr_without_commit(session, models.TrialUserAttributeModel, trial_id, key, value)
            return
        if not checked:
            trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
            self.check_trial_is_updatable(trial_id, cast(TrialState, trial.state))
        insert = upsert(_USER_ATTRS)
        statement = insert.on_conflict_do_update(
            index_elements=[_USER_ATTRS.c.trial_id, _USER_ATTRS.c.key],
            set_={"value_json": insert.excluded.value_json},
        )
        rows = [{"trial_id": trial_id, "key": key, "value_json": json.dumps(value)} for key, value in attrs.items()]
        session.execute(statement, rows)

    #: Rows per INSERT: SQLite allows 32,766 bound values; three per row, with room to spare.
    INTERMEDIATE_BATCH = 5000

    def write_intermediate_values(self, trial_id: int, values: Sequence[tuple[int, float]]) -> None:
        """Many intermediate values of one running trial in one transaction: multi-row upserts
        (the same row Optuna's set_trial_intermediate_value writes, a re-read step overwriting
        its own) where the database has them, Optuna's per-step write in one session elsewhere.

        One commit per step stored 300-700 rows/s: a trial that reported a million results
        stayed RUNNING for 41 minutes after it ended. Finite values only (the caller counts the
        others): Optuna's value-type column then always says FINITE."""
        if not values:
            return
        upsert = _UPSERTS.get(self.engine.name)
        with self.transaction() as session:
            trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
            self.check_trial_is_updatable(trial_id, cast(TrialState, trial.state))
            if upsert is None or (self.engine.name == "sqlite" and sqlite3.sqlite_version_info < (3, 24, 0)):
                for step, value in values:
                    self._set_trial_intermediate_value_without_commit(session, trial_id, step, value)
                return
            insert = upsert(_INTERMEDIATE)
            statement = insert.on_conflict_do_update(
                index_elements=[_INTERMEDIATE.c.trial_id, _INTERMEDIATE.c.step],
                set_={
                    "intermediate_value": insert.excluded.intermediate_value,
                    "intermediate_value_type": insert.excluded.intermediate_value_type,
                },
            )
            finite = models.TrialIntermediateValueModel.TrialIntermediateValueType.FINITE
            latest = dict(values)  # one row per step: a step reported twice keeps its last value
            rows = [
                {"trial_id": trial_id, "step": step, "intermediate_value": value, "intermediate_value_type": finite}
                for step, value in latest.items()
            ]
            connection = session.connection()  # Core, not the ORM's bulk path (no RETURNING wanted)
            for start in range(0, len(rows), self.INTERMEDIATE_BATCH):
                connection.execute(statement, rows[start : start + self.INTERMEDIATE_BATCH])

    def close_trial(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None, attrs: dict[str, Any]
    ) -> None:
        """Finish a trial in one transaction: its user attributes, its values and its final
        state, as Optuna's set_trial_state_values writes them. Raises Optuna's
        UpdateFinishedTrialError if it was finished already (another process was first)."""
        if not state.is_finished():
            raise ValueError(f"close_trial finishes a trial; {state.name} is not a finished state")
        with self.transaction() as session:
            trial = models.TrialModel.find_or_raise_by_id(trial_id, session, for_update=True)
            self.check_trial_is_updatable(trial_id, cast(TrialState, trial.state))
            # The state first, and only if the trial is still running: SQLite ignores FOR UPDATE
            # (and pysqlite reads before it begins the transaction), so two closers could both
            # pass the check above; this write takes the database's write lock, and the second
            # one finds the trial finished.
            table = models.TrialModel.__table__
            running = sa.and_(table.c.trial_id == trial_id, table.c.state == TrialState.RUNNING)
            written = cast("sa.CursorResult[Any]", session.execute(sa.update(table).where(running).values(state=state)))
            if written.rowcount != 1:
                raise UpdateFinishedTrialError(f"trial {trial_id} was finished by another process first")
            self.write_user_attrs(session, trial_id, attrs, checked=True)
            for objective, value in enumerate(values or ()):
                self._set_trial_value_without_commit(session, trial, objective, value)
            trial.state = state
            trial.datetime_complete = datetime.now()

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
        storage._init_local_state()
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
            self.write_user_attrs(session, trial_id, attrs)

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
        with self.engine.connect() as conn:
            if conn.execute(sa.select(_STUDIES.c.study_id).where(_STUDIES.c.study_id == study_id)).first() is None:
                raise KeyError(models.NOT_FOUND_MSG)  # what Optuna's reader raises
            return read_trials(conn, where)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        """One trial by the same plain-SQL reader (Optuna's loads it through six lazy ORM loads)."""
        with self.engine.connect() as conn:
            trials = read_trials(conn, [_TRIALS.c.trial_id == trial_id])
        if not trials:
            raise KeyError(models.NOT_FOUND_MSG)  # what Optuna's get_trial raises
        return trials[0]


def read_trials(
    conn: sa.Connection, where: list[Any], last_step_only: bool = False, user_attrs: bool = True
) -> list[FrozenTrial]:
    """The trials matching ``where`` (conditions on the trials table), oldest first. For a
    tuner's window (trialflow.tuning.history): ``last_step_only`` keeps each trial's last
    intermediate value alone and ``user_attrs=False`` leaves out trialflow's attributes, the
    two things no tuner reads of a finished trial."""
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
    ids = sa.select(_TRIALS.c.trial_id).where(*where).scalar_subquery()
    params = _grouped(conn, _PARAMS, ids, _PARAMS.c.param_id)
    values = _grouped(conn, _VALUES, ids, _VALUES.c.objective)
    attrs = _grouped(conn, _USER_ATTRS, ids, _USER_ATTRS.c.trial_user_attribute_id) if user_attrs else {}
    system_attrs = _grouped(conn, _SYSTEM_ATTRS, ids, _SYSTEM_ATTRS.c.trial_system_attribute_id)
    intermediate = _grouped(conn, _INTERMEDIATE, ids, _INTERMEDIATE.c.step, last_step_only)
    return [
        _frozen(
            row,
            params.get(row.trial_id, ()),
            values.get(row.trial_id, ()),
            attrs.get(row.trial_id, ()),
            system_attrs.get(row.trial_id, ()),
            intermediate.get(row.trial_id, ()),
        )
        for row in trials
    ]


def _grouped(
    conn: sa.Connection, table: sa.Table, ids: Any, order: sa.Column[Any], last_only: bool = False
) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = defaultdict(list)
    query = sa.select(table).where(table.c.trial_id.in_(ids))
    if last_only:  # one index lookup per trial on (trial_id, step)
        inner = table.alias("later")
        last = sa.select(sa.func.max(inner.c[order.name])).where(inner.c.trial_id == table.c.trial_id)
        query = query.where(order == last.scalar_subquery())
    for row in conn.execute(query.order_by(table.c.trial_id, order)):
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
