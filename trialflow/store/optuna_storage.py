"""Optuna's RDB storage made cheap for a trial task: what persists a trial, and only that.

Airflow runs a trial's life in many short task processes, each paying for its writes. Optuna
commits each parameter, attribute and state change on its own (a trial task made 25 commits,
each an fsync on SQLite, and 93 statements); :class:`TrialflowStorage` groups them: an asked
trial's parameters are held while the sampler draws them (Optuna never reads them back during an
ask) and written with its attributes in one transaction, and a trial is closed (attributes,
value, state) in one, each through Optuna's own per-row helpers. Its trial reads are plain SQL
(trial_reader.py). A study's id and directions never change, so each storage looks them up once.

Opening checks Optuna's schema once per database and Optuna version (schema_check.py), and
trialflow's own tables at the revision this code needs (store_schema.py).

Nothing here samples: the asker (asker.py) drives the tuners over this storage, as Optuna's Study
drives a sampler over an RDBStorage that only persists.
"""

from __future__ import annotations

import copy
import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple, cast

import sqlalchemy as sa
import sqlalchemy.orm as sa_orm
import tenacity
from optuna import distributions
from optuna.exceptions import StorageInternalError, UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from trialflow.store import schema_check, statements
from trialflow.store.optuna_internals import create_scoped_session as _create_scoped_session
from trialflow.store.optuna_internals import models, share_alembic_scripts, trial_storage_id
from trialflow.store.optuna_tables import (
    DIRECTIONS,
    PARAMS,
    STUDY_ATTRS,
    TRIALS,
    VALUES,
)
from trialflow.store.schema import ensure_schema
from trialflow.store.trial_reader import read_trials

log = logging.getLogger(__name__)

# A process that makes several new stores (a test session, an api-server importing NNI history)
# reads Optuna's migration files once (optuna_internals.share_alembic_scripts).
share_alembic_scripts()


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

    def remember(self, study_name: str, study_id: int) -> None:
        """The id of a study read by a query of the caller's own (one statement fewer)."""
        self._study_ids[study_name] = study_id

    def forget(self, study_name: str) -> None:
        """Drop the remembered id of a study that was deleted (ExperimentStore.delete_experiment)."""
        self._study_ids.pop(study_name, None)

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        known = self._directions.get(study_id)
        if known is None:
            known = super().get_study_directions(study_id)
            if StudyDirection.NOT_SET not in known:
                self._directions[study_id] = known
        return known

    def read_directions(self, conn: sa.Connection, study_id: int) -> None:
        """Remember the study's directions, read on the caller's connection (one statement, no
        commit: a trial task's first read takes them with the rest, for the ask's Study)."""
        if study_id in self._directions:
            return
        query = sa.select(DIRECTIONS.c.direction).where(DIRECTIONS.c.study_id == study_id)
        found = list(conn.execute(query.order_by(DIRECTIONS.c.objective)).scalars())
        if found and StudyDirection.NOT_SET not in found:
            self._directions[study_id] = found

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
            self._held.params = self._held.made = None

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

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        """Optuna's, and within :meth:`holding_params` (an ask) the trial as made is kept for
        the one read that follows at once: ``Study.ask`` makes ``optuna.Trial(study, id)``,
        which reads the trial back (six statements) before anything could have written it."""
        if template_trial is not None:
            return super()._create_new_trial(study_id, template_trial)
        made = self._create_plain_trial(study_id)
        if getattr(self._held, "params", None) is not None:
            self._held.made = made
        return made

    @tenacity.retry(  # as Optuna's: a deadlock or a busy database, five tries, a random pause
        retry=tenacity.retry_if_exception_type(StorageInternalError),
        stop=tenacity.stop_after_attempt(5),
        wait=tenacity.wait_random(0, 2),
        reraise=True,
    )
    def _create_plain_trial(self, study_id: int) -> FrozenTrial:
        """A new RUNNING trial, numbered as Optuna numbers it (the study's trials before it),
        in the statements Optuna's ORM makes (the study's row locked, the insert, the count,
        the number) but as plain SQL: Optuna's ORM path for it was 14 % of the trigger runner's
        samples holding the GIL under bench/thousand.py (py-spy)."""
        started = datetime.now()
        with self.transaction() as session:
            if session.execute(statements.STUDY_LOCKED, {"b_study": study_id}).first() is None:
                raise KeyError(models.NOT_FOUND_MSG)  # what Optuna's lookup raises
            row = {"study_id": study_id, "number": None, "state": TrialState.RUNNING, "datetime_start": started}
            key = cast("sa.CursorResult[Any]", session.execute(statements.INSERT_TRIAL, row)).inserted_primary_key
            assert key is not None  # an insert of one row always has its key
            trial_id = int(key[0])
            before = {"b_study": study_id, "b_trial": trial_id}
            number = int(session.execute(statements.TRIALS_BEFORE, before).scalar_one())
            session.execute(statements.UPDATE_TRIAL, {"b_trial": trial_id, "number": number})
        return FrozenTrial(
            number=number,
            state=TrialState.RUNNING,
            value=None,
            values=None,
            datetime_start=started,
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs={},
            system_attrs={},
            intermediate_values={},
            trial_id=trial_id,
        )

    def get_trial(self, trial_id: int) -> FrozenTrial:
        """One trial by the same plain-SQL reader (Optuna's loads it through six lazy ORM loads);
        the trial an ask just made, as made (once: a later read is the store's)."""
        made: FrozenTrial | None = getattr(self._held, "made", None)
        if made is not None:
            self._held.made = None
            if trial_storage_id(made) == trial_id:
                return copy.deepcopy(made)
        with self.engine.connect() as conn:
            trials = read_trials(conn, [TRIALS.c.trial_id == trial_id])
        if not trials:
            raise KeyError(models.NOT_FOUND_MSG)  # what Optuna's get_trial raises
        return trials[0]

    @contextmanager
    def transaction(self) -> Iterator[sa_orm.Session]:
        """One session and transaction for several writes (committed at the end, rolled back
        on an error, which is raised)."""
        with _create_scoped_session(self.scoped_session) as session:
            yield session

    def write_params(self, session: sa_orm.Session, params: Iterable[HeldParam]) -> None:
        """Held parameters, with Optuna's own checks (the trial is updatable; a parameter's
        distribution agrees with the study's earlier ones), in three statements per trial
        however many parameters it has: Optuna's ``_set_trial_param_without_commit`` makes
        three per parameter (the trial, the study's earlier parameter of that name, the row)."""
        by_trial: dict[int, list[HeldParam]] = {}
        for held in params:
            by_trial.setdefault(held.trial_id, []).append(held)
        for trial_id, held_params in by_trial.items():
            trial = session.execute(statements.TRIAL_STUDY_AND_STATE, {"b_trial": trial_id}).first()
            if trial is None:
                raise KeyError(models.NOT_FOUND_MSG)  # what Optuna raises
            self.check_trial_is_updatable(trial_id, trial.state)
            earlier = self._earlier_distributions(
                session, int(trial.study_id), {h.name for h in held_params if h.previous_distribution is None}
            )
            rows = []
            for held in held_params:
                previous = held.previous_distribution or earlier.get(held.name)
                if previous is not None:
                    distributions.check_distribution_compatibility(previous, held.distribution)
                rows.append(
                    {
                        "trial_id": trial_id,
                        "param_name": held.name,
                        "param_value": held.value_internal,
                        "distribution_json": distributions.distribution_to_json(held.distribution),
                    }
                )
            session.execute(sa.insert(PARAMS), rows)

    @staticmethod
    def _earlier_distributions(
        session: sa_orm.Session, study_id: int, names: set[str]
    ) -> dict[str, distributions.BaseDistribution]:
        """The distribution of one earlier parameter of each name in the study (any one: each
        was checked against the first when it was written), in one statement."""
        if not names:
            return {}
        rows = session.execute(statements.EARLIER_DISTRIBUTIONS, {"b_study": study_id, "b_names": sorted(names)})
        return {name: distributions.json_to_distribution(raw) for name, raw in rows}

    def lock_unfinished(self, session: sa_orm.Session, trial_id: int) -> None:
        """Take the database's write lock on a trial that is not finished, in this session's
        transaction, before anything of it is written; UpdateFinishedTrialError if it is
        finished (KeyError, Optuna's, if there is no such trial).

        A read-then-write check is not enough: pysqlite reads before it begins the transaction
        and SQLite ignores FOR UPDATE, so a close committed between the check and the write was
        overwritten (a stop closed a restarting trial USER_CANCELED, then the restart's write
        set it back to WAITING: seen under load by tests/experiment/test_keeping.py). This
        no-op UPDATE guarded by the state is the check and the lock in one statement, on SQLite
        and PostgreSQL alike; of two writers racing a close, the later one finds it finished."""
        written = cast("sa.CursorResult[Any]", session.execute(statements.LOCK_UNFINISHED, {"b_trial": trial_id}))
        if written.rowcount != 1:
            models.TrialModel.find_or_raise_by_id(trial_id, session)  # KeyError for no such trial
            raise UpdateFinishedTrialError(f"trial {trial_id} is finished: nothing more of it is written")

    def write_user_attrs(
        self, session: sa_orm.Session, trial_id: int, attrs: dict[str, Any], checked: bool = False
    ) -> None:
        """A trial's user attributes in one statement where the database upserts (SQLite,
        PostgreSQL: the same ON CONFLICT upsert Optuna writes per key), else Optuna's per-key
        write. ``checked``: the caller already found the trial updatable in this session."""
        if not attrs:
            return
        if not checked:
            self.lock_unfinished(session, trial_id)
        if self._upsert() is None:
            for key, value in attrs.items():
                self._set_trial_attr_without_commit(session, models.TrialUserAttributeModel, trial_id, key, value)
            return
        rows = [{"trial_id": trial_id, "key": key, "value_json": json.dumps(value)} for key, value in attrs.items()]
        session.execute(statements.attrs_upsert(self.engine.name), rows)

    def _upsert(self) -> Callable[[sa.Table], Any] | None:
        """This database's INSERT ... ON CONFLICT, or None where it has none (SQLite before
        3.24): the writers below then take Optuna's row-by-row path."""
        if self.engine.name == "sqlite" and sqlite3.sqlite_version_info < (3, 24, 0):
            return None
        return statements.UPSERTS.get(self.engine.name)

    def set_study_attr_of_trial(self, trial_id: int, key: str, value: Any) -> None:
        """User attribute ``key`` of the study trial ``trial_id`` belongs to, in one upsert that
        finds the study itself (two writers at once: no error, one value stands); Optuna's own
        write where the database has no upsert."""
        text = json.dumps(value)
        upsert = self._upsert()
        if upsert is None:
            with self.engine.connect() as conn:
                study_id = conn.execute(sa.select(TRIALS.c.study_id).where(TRIALS.c.trial_id == trial_id)).scalar_one()
            self.set_study_user_attr(study_id, key, value)
            return
        insert = upsert(STUDY_ATTRS).from_select(
            ["study_id", "key", "value_json"],
            # (a WHERE clause: SQLite's upsert after a SELECT needs one to parse)
            sa.select(TRIALS.c.study_id, sa.literal(key), sa.literal(text)).where(TRIALS.c.trial_id == trial_id),
        )
        statement = insert.on_conflict_do_update(
            index_elements=[STUDY_ATTRS.c.study_id, STUDY_ATTRS.c.key], set_={"value_json": insert.excluded.value_json}
        )
        with self.engine.begin() as conn:
            conn.execute(statement)

    def keep_first_user_attr(self, trial_id: int, key: str, value: Any) -> Any:
        """Keep ``value`` as the trial's user attribute ``key`` unless it has one already, and
        return the one it keeps, in one transaction (the trial's lock, an insert that leaves a
        present row alone, the read): NNI keeps the first final result a trial reported. Read
        first and written through Optuna's ORM, it was eight statements and most of a trial's
        result ingestion in the triggerer (bench/thousand.py). A finished trial keeps what it
        has; one that has nothing raises UpdateFinishedTrialError, as Optuna's write does."""
        stored, bound = statements.TRIAL_ATTR, {"b_trial": trial_id, "b_key": key}
        with self.transaction() as session:
            try:
                self.lock_unfinished(session, trial_id)
            except UpdateFinishedTrialError:
                found = session.execute(stored, bound).scalar()
                if found is None:
                    raise
                return json.loads(found)
            if self._upsert() is None:
                found = session.execute(stored, bound).scalar()
                if found is not None:
                    return json.loads(found)
                self._set_trial_attr_without_commit(session, models.TrialUserAttributeModel, trial_id, key, value)
                return value
            row = {"trial_id": trial_id, "key": key, "value_json": json.dumps(value)}
            session.execute(statements.attr_keep_first(self.engine.name), [row])
            return json.loads(session.execute(stored, bound).scalar_one())

    #: Rows per INSERT: SQLite allows 32,766 bound values; three per row, with room to spare.
    INTERMEDIATE_BATCH = 5000

    def write_intermediate_values(
        self, trial_id: int, values: Sequence[tuple[int, float]], reported_at: float | None = None
    ) -> None:
        """Many intermediate values of one running trial in one transaction: multi-row upserts
        (the same row Optuna's set_trial_intermediate_value writes, a re-read step overwriting
        its own) where the database has them, Optuna's per-step write in one session elsewhere.
        ``reported_at``: when they reached the store, kept per step beside them (RESULT_TIMES;
        a step read again keeps its first time), where the database has upserts.

        One commit per step stored 300-700 rows/s: a trial that reported a million results
        stayed RUNNING for 41 minutes after it ended. Finite values only (the caller counts the
        others): Optuna's value-type column then always says FINITE."""
        if not values:
            return
        with self.transaction() as session:
            self.lock_unfinished(session, trial_id)
            if self._upsert() is None:
                for step, value in values:
                    self._set_trial_intermediate_value_without_commit(session, trial_id, step, value)
                return
            statement = statements.intermediate_upsert(self.engine.name)
            finite = models.TrialIntermediateValueModel.TrialIntermediateValueType.FINITE
            latest = dict(values)  # one row per step: a step reported twice keeps its last value
            rows = [
                {"trial_id": trial_id, "step": step, "intermediate_value": value, "intermediate_value_type": finite}
                for step, value in latest.items()
            ]
            connection = session.connection()  # Core, not the ORM's bulk path (no RETURNING wanted)
            for start in range(0, len(rows), self.INTERMEDIATE_BATCH):
                connection.execute(statement, rows[start : start + self.INTERMEDIATE_BATCH])
            if reported_at is None:
                return
            stamp = statements.result_times_keep_first(self.engine.name)
            times = [{"trial_id": trial_id, "step": step, "reported_at": reported_at} for step in latest]
            for start in range(0, len(times), self.INTERMEDIATE_BATCH):
                connection.execute(stamp, times[start : start + self.INTERMEDIATE_BATCH])

    def close_trial(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None, attrs: dict[str, Any]
    ) -> None:
        """Finish a trial in one transaction: its user attributes, its values and its final
        state, as Optuna's set_trial_state_values writes them. Raises Optuna's
        UpdateFinishedTrialError if it was finished already (another process was first)."""
        if not state.is_finished():
            raise ValueError(f"close_trial finishes a trial; {state.name} is not a finished state")
        rows = []
        for objective, value in enumerate(values or ()):
            stored, kind = models.TrialValueModel.value_to_stored_repr(value)
            rows.append({"trial_id": trial_id, "objective": objective, "value": stored, "value_type": kind})
        with self.transaction() as session:
            self.lock_unfinished(session, trial_id)  # KeyError for no such trial, as Optuna's lookup
            self.write_user_attrs(session, trial_id, attrs, checked=True)
            if rows:  # the rows Optuna's per-objective write leaves, in plain SQL (no ORM loads)
                session.execute(sa.delete(VALUES).where(VALUES.c.trial_id == trial_id))
                session.execute(sa.insert(VALUES), rows)
            closed = {"b_trial": trial_id, "state": state, "datetime_complete": datetime.now()}
            session.execute(statements.UPDATE_TRIAL, closed)

    @classmethod
    def reopen(cls, url: str, engine_kwargs: dict[str, Any]) -> TrialflowStorage | None:
        """The storage of a database this Optuna version already checked, without checking it
        again; None when it has not (then open it the usual way and ``mark_checked``)."""
        url = cls._fill_storage_url_template(url)
        cls._set_default_engine_kwargs_for_mysql(url, engine_kwargs)
        engine = sa.create_engine(url, **engine_kwargs)
        if not schema_check.was_checked(engine):
            engine.dispose()
            return None
        storage = cls.__new__(cls)
        schema_check.fill_unchecked(storage, url, engine, engine_kwargs)
        storage._init_local_state()
        return storage

    def mark_checked(self) -> None:
        """Record that this Optuna version found the database's schema revision compatible."""
        schema_check.mark_checked(self.engine)

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
        with self.engine.connect() as conn:
            if conn.execute(statements.STUDY_EXISTS, {"b_study": study_id}).first() is None:
                raise KeyError(models.NOT_FOUND_MSG)  # what Optuna's reader raises
            rows = None
            if states is not None:
                assert isinstance(states, Iterable)
                states = list(states)
                if trial_id_greater_than == -1:  # every ask's question (its waiting trials): usually none
                    bound = {"b_study": study_id, "b_states": states}
                    rows = conn.execute(statements.TRIALS_IN_STATES, bound).all()
                    if not rows:
                        return []
            where = [TRIALS.c.study_id == study_id]
            if states is not None:
                where.append(TRIALS.c.state.in_(states))
            if trial_id_greater_than > -1:
                newer = TRIALS.c.trial_id > trial_id_greater_than
                included = sorted(i for i in included_trial_ids if i <= trial_id_greater_than)
                where.append(sa.or_(newer, TRIALS.c.trial_id.in_(included)) if included else newer)
            return read_trials(conn, where, rows=rows)


@tenacity.retry(
    retry=tenacity.retry_if_exception_type((sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError)),
    stop=tenacity.stop_after_attempt(6),
    wait=tenacity.wait_incrementing(0.1, 0.1),
    before_sleep=tenacity.before_sleep_log(log, logging.INFO),
    reraise=True,
)
def open_storage(url: str, engine_kwargs: dict[str, Any]) -> TrialflowStorage:
    """Optuna's storage, and trialflow's tables at the schema this code needs: created in a new
    store, checked in an existing one (StoreSchemaError, saying what to run, when it is of
    another trialflow: trialflow.store.schema).

    Workers that start together on an empty database all try to create the tables, and
    "CREATE TABLE" is not safe against a concurrent twin (PostgreSQL: a unique violation on
    pg_type; SQLite: "table ... already exists"). The loser retries, and by then the tables
    exist (both found by the load test).
    """
    known = TrialflowStorage.reopen(url, engine_kwargs)  # checked before by this Optuna version
    if known is not None:
        ensure_schema(known.engine, checked=True)
        return known
    storage = TrialflowStorage(url, engine_kwargs=engine_kwargs, skip_table_creation=False)
    ensure_schema(storage.engine, checked=False)
    storage.mark_checked()
    return storage
