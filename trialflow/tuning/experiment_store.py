"""The experiment store: an Optuna storage holding parameters, results, states and config.

One study per experiment (its name is the experiment id). The tuner, the end
step, ``trialflow run``'s progress and ``optuna-dashboard`` all read the same
rows. SQLite is the embedded default (WAL, generous lock timeout: many trial
tasks and the triggerer write at once); PostgreSQL/MySQL URLs work unchanged
for workers on several machines.

Why one large file (~700 lines): it is the only module that knows Optuna's storage
and user-attribute details (the rest of trialflow sees TrialRecords), so those
details stay together rather than leaking into a second module.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import optuna
import sqlalchemy as sa
import tenacity
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState
from sqlalchemy.engine import make_url

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import SearchSpace, SearchSpaceError, encode
from trialflow.trial.protocol import Metric, describe_result
from trialflow.trial.protocol import scalar as _plain_scalar
from trialflow.trial.status import COUNTED_STATUS_NAMES, COUNTED_STATUSES, TrialStatus
from trialflow.tuning.algorithms import canonical_tuner_name
from trialflow.tuning.history import asking_storage
from trialflow.tuning.optuna_internals import models, trial_storage_id
from trialflow.tuning.pareto import OBJECTIVES_ATTR, objective_values
from trialflow.tuning.rdb_storage import TrialflowStorage
from trialflow.tuning.snapshot import SNAPSHOTS, SnapshotCache
from trialflow.tuning.store_urls import SQLITE_TIMEOUT_SECONDS, safe_url, with_installed_driver
from trialflow.tuning.store_urls import sqlite_url as sqlite_url  # where the callers have always found it
from trialflow.tuning.trial_queue import Queued, claim, drop_waiting, enqueue, release, waiting, waiting_count
from trialflow.tuning.tuners import BUDGET_KEY, make_sampler, sample_parameters

if TYPE_CHECKING:
    from optuna.pruners import BasePruner

log = logging.getLogger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)

#: Compare-and-set tries of update_experiment_attr before it gives up (each lost to another writer).
ATTR_UPDATE_ATTEMPTS = 200


#: trial index -> Optuna trial, one row per (study, index). Optuna can only find a trial by a
#: user attribute by loading every trial; this makes the lookup one indexed query and makes
#: "one Optuna trial per trial index" a constraint the database enforces, on every backend.
_METADATA = sa.MetaData()
TRIAL_INDEX = sa.Table(
    "trialflow_trial_index",
    _METADATA,
    sa.Column("study_id", sa.Integer, primary_key=True),
    sa.Column("trial_index", sa.Integer, primary_key=True),
    sa.Column("trial_id", sa.Integer, nullable=False),
)
#: Pages join from Optuna's trials to their index: without this, SQLite scans the table per trial.
TRIAL_INDEX_BY_TRIAL = sa.Index("ix_trialflow_trial_index_trial_id", TRIAL_INDEX.c.trial_id)


@tenacity.retry(
    retry=tenacity.retry_if_exception_type((sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError)),
    stop=tenacity.stop_after_attempt(6),
    wait=tenacity.wait_incrementing(0.1, 0.1),
    before_sleep=tenacity.before_sleep_log(log, logging.INFO),
    reraise=True,
)
def _open_storage(url: str, engine_kwargs: dict[str, Any]) -> TrialflowStorage:
    """Optuna's storage with trialflow's table, created if missing.

    Workers that start together on an empty database all try to create the tables, and
    "CREATE TABLE" is not safe against a concurrent twin (PostgreSQL: a unique violation on
    pg_type; SQLite: "table ... already exists"). The loser retries, and by then the tables
    exist (both found by the load test).
    """
    known = TrialflowStorage.reopen(url, engine_kwargs)  # checked before by this Optuna version
    if known is not None:
        return known
    storage = TrialflowStorage(url, engine_kwargs=engine_kwargs, skip_table_creation=False)
    _METADATA.create_all(storage.engine, checkfirst=True)
    TRIAL_INDEX_BY_TRIAL.create(storage.engine, checkfirst=True)  # stores made before it existed
    SNAPSHOTS.create(storage.engine, checkfirst=True)
    storage.mark_checked()
    return storage


@dataclass(frozen=True)
class AskedTrial:
    """A trial's identity and parameters, as the tuner gave them (``resumed``: it had them
    already: a retry or a resumed run re-attaches), and the trial as the store holds it now."""

    number: int
    storage_id: int
    parameters: dict[str, Any]
    resumed: bool
    record: TrialRecord


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the store holds it, in trialflow's terms (Optuna's stay in this module)."""

    storage_id: int
    number: int
    trial_index: int
    trial_id: str
    parameters: dict[str, Any]
    # The defaults are a trial just asked: waiting, not launched, nothing reported.
    status: TrialStatus = TrialStatus.WAITING
    #: Closed in the store (Optuna froze it): its outcome no longer changes.
    finished: bool = False
    handle: dict[str, Any] | None = None
    service_index: int | None = None
    #: The host a host-bound (local) trial was claimed for before its launch, when pinned.
    host: str | None = None
    started_at: float | None = None
    #: The final result as reported (a number, a dict with ``default``, or what the trial sent).
    final: Any = None
    message: str | None = None
    intermediate_count: int = 0
    last_step: int | None = None
    #: Who asked for this trial's parameters (a person's added trial or re-run: ``by``,
    #: ``reason``, ``at``); None when the tuner chose them.
    asked_by: dict[str, Any] | None = None

    @property
    def parameter_source(self) -> str:
        """parameter.cfg's ``parameter_source``, as NNI wrote it: ``customized`` or ``algorithm``."""
        return "customized" if self.asked_by else "algorithm"


def _record(frozen: optuna.trial.FrozenTrial, storage_id: int) -> TrialRecord:
    attrs = frozen.user_attrs
    return TrialRecord(
        storage_id=storage_id,
        number=frozen.number,
        trial_index=int(attrs.get("trial_index", frozen.number)),
        trial_id=str(attrs.get("trial_id", "")),
        parameters=attrs.get("parameters") or {},
        status=TrialStatus(attrs.get("nni_status", TrialStatus.WAITING.value)),
        finished=frozen.state.is_finished(),
        handle=attrs.get("handle"),
        service_index=attrs.get("service_index"),
        host=attrs.get("host"),
        started_at=attrs.get("started_at"),
        final=attrs.get("final_metric"),
        message=attrs.get("message"),
        intermediate_count=len(frozen.intermediate_values),
        last_step=frozen.last_step,
        asked_by=attrs.get("asked_by"),
    )


class ExperimentStore:
    """The experiment store: experiments by id, trials as :class:`TrialRecord`. Optuna (studies,
    trials, user attributes, states) stays inside this class."""

    def __init__(self, url: str):
        url = with_installed_driver(url)
        self.url = url
        engine_kwargs: dict[str, Any] = {}
        backend = make_url(url).get_backend_name()
        if backend == "sqlite":
            database = make_url(url).database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
                # WAL lets readers (progress, UI) work while trials write; it sticks to the file.
                with sqlite3.connect(database, timeout=SQLITE_TIMEOUT_SECONDS) as conn:
                    conn.execute("PRAGMA journal_mode=WAL")
            # pysqlite begins the write transaction at the first write, so writers queue on this
            # busy timeout instead of failing with "database is locked" (64 trials x 200 results
            # from 4 processes: tests/tuning/test_store_load.py).
            engine_kwargs["connect_args"] = {"timeout": SQLITE_TIMEOUT_SECONDS}
        else:
            engine_kwargs["pool_pre_ping"] = True
        self.storage = _open_storage(url, engine_kwargs)
        # What the tuners and assessors read through: Optuna's own cache of finished trials, one
        # per store (a Study made from the bare storage would start an empty cache every time),
        # so a process that asks or checks again reads only what changed since.
        # The cache starts from the experiment's snapshot row (trialflow.tuning.snapshot), so a new
        # task process does not read every finished trial back.
        self._sampling_storage = SnapshotCache(self.storage)
        self._objectives: dict[int, list[dict[str, str]] | None] = {}

    def __repr__(self) -> str:
        return f"ExperimentStore({safe_url(self.url)})"

    @property
    def engine(self) -> sa.Engine:
        """For the read models (trialflow.queries), which query the same tables in SQL."""
        return self.storage.engine

    # -- experiments ------------------------------------------------------------------------

    def open_experiment(
        self,
        experiment_id: str,
        tuner: AlgorithmConfig | None = None,
        space: SearchSpace | None = None,
        direction: Literal["maximize", "minimize"] = "maximize",
        pruner: BasePruner | None = None,
        objectives: list[dict[str, str]] | None = None,
    ) -> None:
        """Create the experiment, or re-open it (a cleared or continued run). ``objectives``
        (several, each {"metric", "mode"}): a multi-objective study, one direction each."""
        sampler = make_sampler(tuner, space) if tuner is not None and space is not None else None
        directions = {"directions": [o["mode"] for o in objectives]} if objectives else {"direction": direction}
        optuna.create_study(
            storage=self.storage,
            study_name=experiment_id,
            sampler=sampler,
            pruner=pruner,
            load_if_exists=True,
            **directions,
        )
        if objectives:
            self.set_experiment_attrs(experiment_id, {OBJECTIVES_ATTR: objectives})

    def experiment_exists(self, experiment_id: str) -> bool:
        try:
            self.storage.get_study_id_from_name(experiment_id)
        except KeyError:
            return False
        return True

    def _study_id(self, experiment_id: str) -> int:
        return self.storage.get_study_id_from_name(experiment_id)

    def experiment_attrs(self, experiment_id: str) -> dict[str, Any]:
        return self.storage.get_study_user_attrs(self._study_id(experiment_id))

    def experiment_attr(self, experiment_id: str, key: str) -> Any:
        """One of the experiment's attributes (None if unset), without reading the others: every
        trial task reads its run's window, and the study keeps one attribute per run."""
        table = models.StudyUserAttributeModel.__table__
        query = sa.select(table.c.value_json).where(
            table.c.study_id == self._study_id(experiment_id), table.c.key == key
        )
        with self.storage.engine.connect() as conn:
            raw = conn.execute(query).scalar_one_or_none()
        return None if raw is None else json.loads(raw)

    def experiments_with_attr(self, key: str, value: Any) -> list[str]:
        """The experiments whose attribute ``key`` is ``value``, oldest first (e.g. a DAG's)."""
        table = models.StudyUserAttributeModel.__table__
        studies = models.StudyModel.__table__
        query = (
            sa.select(studies.c.study_name)
            .join(table, table.c.study_id == studies.c.study_id)
            .where(table.c.key == key, table.c.value_json == json.dumps(value))
            .order_by(studies.c.study_id)
        )
        with self.storage.engine.connect() as conn:
            return [row[0] for row in conn.execute(query)]

    def update_experiment_attr(self, experiment_id: str, key: str, change: Callable[[Any], Any]) -> Any:
        """Set attribute ``key`` to ``change(its current value)`` (None when unset) atomically,
        and return the new value: a compare-and-set on its row, tried again when another writer
        changed it in between. Read-modify-write of a shared attribute (the history, counters)
        lost changes under concurrency: twenty actions from two editors at once wrote 13
        history lines. No lock is held, so it works alike on SQLite and PostgreSQL."""
        table = models.StudyUserAttributeModel.__table__
        study_id = self._study_id(experiment_id)
        where = sa.and_(table.c.study_id == study_id, table.c.key == key)
        for _ in range(ATTR_UPDATE_ATTEMPTS):
            with self.storage.engine.connect() as conn:
                raw = conn.execute(sa.select(table.c.value_json).where(where)).scalar_one_or_none()
            value = change(None if raw is None else json.loads(raw))
            new = json.dumps(value)
            if new == (raw if raw is not None else "null"):
                return value  # nothing changes: nothing is written
            try:
                with self.storage.engine.begin() as conn:
                    if raw is None:
                        conn.execute(sa.insert(table).values(study_id=study_id, key=key, value_json=new))
                        return value
                    if (
                        conn.execute(
                            sa.update(table).where(where, table.c.value_json == raw).values(value_json=new)
                        ).rowcount
                        == 1
                    ):
                        return value
            except sa.exc.IntegrityError:
                pass  # another writer inserted it first: read it again
        raise RuntimeError(
            f"experiment {experiment_id}: attribute {key!r} changed under every one of {ATTR_UPDATE_ATTEMPTS} tries"
        )

    def set_experiment_attrs(self, experiment_id: str, attrs: dict[str, Any]) -> None:
        """Set what changed (an unchanged value is not written again)."""
        study_id = self._study_id(experiment_id)
        current = self.storage.get_study_user_attrs(study_id)
        for key, value in attrs.items():
            if current.get(key) != value:
                self.storage.set_study_user_attr(study_id, key, value)

    # -- trials -----------------------------------------------------------------------------

    def find_trial_id(self, experiment_id: str, trial_index: int) -> int | None:
        """The storage id of trial ``trial_index`` (one indexed query)."""
        query = sa.select(TRIAL_INDEX.c.trial_id).where(
            TRIAL_INDEX.c.study_id == self._study_id(experiment_id), TRIAL_INDEX.c.trial_index == trial_index
        )
        with self.storage.engine.begin() as conn:
            return conn.execute(query).scalar_one_or_none()

    def find_trial(self, experiment_id: str, trial_index: int) -> TrialRecord | None:
        storage_id = self.find_trial_id(experiment_id, trial_index)
        return None if storage_id is None else self.trial(storage_id)

    def trial(self, storage_id: int) -> TrialRecord:
        return _record(self.storage.get_trial(storage_id), storage_id)

    def _winner(self, study_id: int, trial_index: int) -> int:
        with self.storage.engine.begin() as conn:
            return int(
                conn.execute(
                    sa.select(TRIAL_INDEX.c.trial_id).where(
                        TRIAL_INDEX.c.study_id == study_id, TRIAL_INDEX.c.trial_index == trial_index
                    )
                ).scalar_one()
            )

    def ask(
        self,
        experiment_id: str,
        trial_index: int,
        trial_id: str,
        tuner: AlgorithmConfig,
        space: SearchSpace,
        pruner: BasePruner | None = None,
    ) -> AskedTrial:
        """Parameters for trial ``trial_index``: the ones it already has (a retry or a resumed
        run re-attaches), or new ones from the tuner, which has seen every earlier result.

        Optuna creates the trial (one commit); its parameters, trialflow's attributes and the
        claim of the index are then one transaction, so another process sees the trial either
        without them or with all of them, and a claim that loses leaves nothing of it behind."""
        existing = self.find_trial(experiment_id, trial_index)
        if existing is not None:
            return AskedTrial(existing.number, existing.storage_id, existing.parameters, True, existing)
        # A study object of its own: the sampler is per trial (seeded by index), and callers may
        # ask from many threads (the triggerer follows many trials in one process).
        study_id = self._study_id(experiment_id)
        sampler = make_sampler(tuner, space, trial_index)
        queued, fixed = self._asked_for(study_id, trial_index, space)
        if fixed is not None:
            # A person's own trial: the sampler replays their values, so the tuner learns from
            # its result like from any other trial's.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                sampler = optuna.samplers.PartialFixedSampler(fixed, sampler)
        storage = asking_storage(self._sampling_storage, self.storage, study_id, canonical_tuner_name(tuner))
        asking = optuna.Study(study_name=experiment_id, storage=storage, sampler=sampler, pruner=pruner)
        with self.storage.holding_params() as params:
            trial = asking.ask()
            parameters = sample_parameters(tuner, space, trial, trial_index)
        storage_id = trial_storage_id(trial)  # the trial Optuna just created (its id, as RDBStorage gave it)
        attrs: dict[str, Any] = {
            "trial_index": trial_index,
            "trial_id": trial_id,
            "parameters": parameters,
            "nni_status": TrialStatus.WAITING.value,
        }
        if queued is not None and fixed is not None:
            budget = parameters.get(BUDGET_KEY)
            attrs["parameters"] = parameters = {**queued.parameters, **({BUDGET_KEY: budget} if budget else {})}
            attrs["asked_by"] = queued.request
        try:
            with self.storage.transaction() as session:
                session.execute(
                    TRIAL_INDEX.insert().values(study_id=study_id, trial_index=trial_index, trial_id=storage_id)
                )
                self.storage.write_params(session, params)
                self.storage.write_user_attrs(session, storage_id, attrs)
        except sa.exc.IntegrityError:
            # Another attempt asked for the same index at the same moment; its trial stands.
            winner = self._winner(study_id, trial_index)
            if queued is not None and self.trial(winner).parameters != parameters:
                release(self.storage.engine, queued.seq)  # the winner ran something else: it waits on
            self.storage.set_trial_user_attr(storage_id, "superseded_by", winner)
            self.storage.set_trial_state_values(storage_id, TrialState.FAIL)
            record = self.trial(winner)
            return AskedTrial(record.number, winner, record.parameters, True, record)
        record = TrialRecord(
            storage_id, trial.number, trial_index, trial_id, parameters, asked_by=attrs.get("asked_by")
        )
        return AskedTrial(trial.number, storage_id, parameters, False, record)

    def _asked_for(
        self, study_id: int, trial_index: int, space: SearchSpace
    ) -> tuple[Queued | None, dict[str, Any] | None]:
        """The trial a person asked for that runs as ``trial_index``, and its sampler values;
        one whose parameters no longer fit the space (the config changed) is dropped."""
        queued = claim(self.storage.engine, study_id, trial_index)
        if queued is None:
            return None, None
        try:
            return queued, encode(space, queued.parameters)
        except SearchSpaceError as exc:
            log.warning("asked-for trial %s dropped: its parameters no longer fit: %s", queued.seq, exc)
            release(self.storage.engine, queued.seq, dropped=True)
            return None, None

    def enqueue(
        self, experiment_id: str, parameters: dict[str, Any], request: dict[str, Any], most: int | None = None
    ) -> int:
        """Ask for a trial with these parameters: the next trial index to start runs it
        (trial_queue.QueueFull when ``most`` wait already)."""
        return enqueue(self.storage.engine, self._study_id(experiment_id), parameters, request, most)

    def waiting_trials(self, experiment_id: str) -> list[Queued]:
        return waiting(self.storage.engine, self._study_id(experiment_id))

    def waiting_count(self, experiment_id: str) -> int:
        return waiting_count(self.storage.engine, self._study_id(experiment_id))

    def drop_waiting(self, experiment_id: str) -> int:
        """Drop the asked-for trials no trial index will take (the experiment ended)."""
        return drop_waiting(self.storage.engine, self._study_id(experiment_id))

    def should_stop(self, experiment_id: str, storage_id: int, pruner: BasePruner) -> bool:
        """The assessor's verdict on a running trial, from the intermediate results stored so far."""
        frozen = self.storage.get_trial(storage_id)
        if frozen.state.is_finished() or not frozen.intermediate_values:
            return False
        study = optuna.load_study(study_name=experiment_id, storage=self._sampling_storage, pruner=pruner)
        return bool(pruner.prune(study, frozen))

    def active_trials(self, experiment_id: str) -> list[TrialRecord]:
        """Trials submitted and not closed (for hybrid placement and for cancelling a run)."""
        study_id = self._study_id(experiment_id)
        frozen = self.storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        return [
            _record(t, self.storage.get_trial_id_from_study_id_trial_number(study_id, t.number))
            for t in frozen
            if "superseded_by" not in t.user_attrs
        ]

    def trial_attr(self, storage_id: int, key: str) -> Any:
        """One of a trial's attributes (None if unset), in one indexed query: the follow loop
        asks every poll whether someone asked the trial to stop, and reading the whole trial
        (all its intermediate values) for that would cost a long trial dearly."""
        table = models.TrialUserAttributeModel.__table__
        query = sa.select(table.c.value_json).where(table.c.trial_id == storage_id, table.c.key == key)
        with self.storage.engine.connect() as conn:
            raw = conn.execute(query).scalar_one_or_none()
        return None if raw is None else json.loads(raw)

    def trial_attrs(self, storage_id: int, keys: Iterable[str]) -> dict[str, Any]:
        """Some of a trial's attributes (those set), in one indexed query."""
        table = models.TrialUserAttributeModel.__table__
        query = sa.select(table.c.key, table.c.value_json).where(
            table.c.trial_id == storage_id, table.c.key.in_(list(keys))
        )
        with self.storage.engine.connect() as conn:
            return {key: json.loads(raw) for key, raw in conn.execute(query)}

    def set_status(self, storage_id: int, status: TrialStatus, **attrs: Any) -> None:
        self.storage.set_trial_user_attrs(storage_id, {"nni_status": status.value, **attrs})

    def set_attrs(self, storage_id: int, **attrs: Any) -> None:
        """Facts about a trial besides its status: handle, started_at, service_index, host."""
        self.storage.set_trial_user_attrs(storage_id, attrs)

    def record_metrics(self, storage_id: int, metrics: Iterable[Metric]) -> list[str]:
        """Intermediate results become Optuna intermediate values (idempotent per sequence, so a
        re-read after a restart changes nothing); the final result waits for ``finish``.

        Returns why records were not counted, for the trial's message: an intermediate result
        that is not a finite number (NaN, infinity, a string, a dict without ``default``) has
        no place on a curve or before an assessor; a second, different final result is ignored,
        as NNI keeps the first one the trial reported (the same final read again after a
        restart is the first one, not a second)."""
        skipped: list[str] = []
        first_final: Any = None
        intermediate: list[tuple[int, float]] = []
        for metric in metrics:
            if metric.is_final:
                reported = _jsonable(metric.value)
                if first_final is None:
                    first_final = self.storage.get_trial(storage_id).user_attrs.get("final_metric")
                if first_final is None:
                    self.storage.set_trial_user_attr(storage_id, "final_metric", reported)
                    first_final = reported
                elif reported != first_final:
                    skipped.append(
                        f"a second final result ({_preview(reported)}) was ignored: the first "
                        f"({_preview(first_final)}) counts, as in NNI"
                    )
                continue
            value = scalar(metric.value)
            if value is not None and math.isfinite(value):
                intermediate.append((metric.sequence, float(value)))
            else:
                skipped.append(
                    f"intermediate result {metric.sequence} ({_preview(_jsonable(metric.value))}) "
                    "is not a finite number"
                )
        self.storage.write_intermediate_values(storage_id, intermediate)
        return skipped

    def finish(self, storage_id: int, status: TrialStatus, final: Any = None, message: str | None = None) -> None:
        """Close the trial in the store; a second call (retry) leaves a finished trial alone."""
        self._finish(self.storage.get_trial(storage_id), storage_id, status, final, message)

    def close(self, storage_id: int, status: TrialStatus, message: str | None = None) -> TrialRecord:
        """Close the trial with the final result it reported (as stored) and return it as the
        store now holds it; a trial already closed (a retry, or a cancel that came first) keeps
        its first outcome. One read and one write."""
        frozen = self.storage.get_trial(storage_id)
        return self._finish(frozen, storage_id, status, frozen.user_attrs.get("final_metric"), message)

    def objectives_of_trial(self, storage_id: int) -> list[dict[str, str]] | None:
        """The objectives of the trial's experiment (None: one objective); read once per study."""
        trials = models.TrialModel.__table__
        attrs = models.StudyUserAttributeModel.__table__
        with self.storage.engine.connect() as conn:
            study_id = conn.execute(sa.select(trials.c.study_id).where(trials.c.trial_id == storage_id)).scalar_one()
            if study_id not in self._objectives:
                query = sa.select(attrs.c.value_json).where(
                    attrs.c.study_id == study_id, attrs.c.key == OBJECTIVES_ATTR
                )
                raw = conn.execute(query).scalar_one_or_none()
                self._objectives[study_id] = json.loads(raw) if raw else None
        return self._objectives[study_id]

    def close_first(self, storage_id: int, status: TrialStatus, message: str | None = None) -> bool:
        """``close``, saying whether this call closed the trial (False: it was closed already, or
        another process closed it first): of two stops racing for one trial, exactly one is told
        it stopped it, and so one history line is written."""
        frozen = self.storage.get_trial(storage_id)
        return self._close(frozen, storage_id, status, frozen.user_attrs.get("final_metric"), message)[1]

    def _finish(
        self, frozen: optuna.trial.FrozenTrial, storage_id: int, status: TrialStatus, final: Any, message: str | None
    ) -> TrialRecord:
        return self._close(frozen, storage_id, status, final, message)[0]

    def _close(
        self, frozen: optuna.trial.FrozenTrial, storage_id: int, status: TrialStatus, final: Any, message: str | None
    ) -> tuple[TrialRecord, bool]:
        if frozen.state.is_finished():
            return _record(frozen, storage_id), False  # Optuna freezes finished trials; the first outcome stands
        attrs: dict[str, Any] = {"nni_status": status.value}
        if message:
            attrs["message"] = message
        if final is not None:
            attrs["final_metric"] = _jsonable(final)
            if isinstance(final, dict):
                attrs["final_metric_extra"] = {k: _jsonable(v) for k, v in final.items() if k != "default"}
        objectives = self.objectives_of_trial(storage_id) if status in COUNTED_STATUSES else None
        if objectives:
            state, values, problem = _several_outcome(final, objectives)
        else:
            state, values, problem = _outcome(status, final)
        if problem:
            attrs["message"] = problem + (f"; {message}" if message else "")
        try:
            self.storage.close_trial(storage_id, state, values, attrs)
        except UpdateFinishedTrialError:
            # finished concurrently by another process (a cancel racing the trigger): first wins
            return self.trial(storage_id), False
        frozen.state = state
        frozen.values = values
        frozen.user_attrs.update(attrs)
        return _record(frozen, storage_id), True

    # -- reading --------------------------------------------------------------------------

    def trial_rows(self, experiment_id: str) -> list[dict[str, Any]]:
        """One dict per trial, in trial-index order, for summaries and progress."""
        frozen = self.storage.get_all_trials(self._study_id(experiment_id), deepcopy=False)
        rows = []
        for t in frozen:
            if "superseded_by" in t.user_attrs:
                continue
            rows.append(
                {
                    "trial_index": t.user_attrs.get("trial_index"),
                    "trial_id": t.user_attrs.get("trial_id"),
                    "parameters": t.user_attrs.get("parameters"),
                    "status": t.user_attrs.get("nni_status"),
                    "final_metric": _finite_or_none(scalar(t.user_attrs.get("final_metric"))),
                    "final_metric_raw": t.user_attrs.get("final_metric"),
                    "final_extra": t.user_attrs.get("final_metric_extra") or {},
                    # Optuna's values, one per objective, for a COMPLETE trial (several objectives
                    # read them by name through trialflow.tuning.pareto).
                    "objective_values": list(t.values) if t.values is not None else None,
                    "intermediate_count": len(t.intermediate_values),
                    "message": t.user_attrs.get("message"),
                }
            )
        return sorted(rows, key=lambda r: (r["trial_index"] is None, r["trial_index"] or 0))


def _outcome(status: TrialStatus, final: Any) -> tuple[TrialState, list[float] | None, str | None]:
    """Optuna's state and value for one objective, and why a SUCCEEDED trial has no value."""
    value = scalar(final)
    if status in COUNTED_STATUSES and value is not None and math.isfinite(value):
        return TrialState.COMPLETE, [value], None
    if status == TrialStatus.EARLY_STOPPED:
        return TrialState.PRUNED, None, None
    if status != TrialStatus.SUCCEEDED:
        return TrialState.FAIL, None, None
    if final is None:
        reason = "no final result reported"
    elif value is not None:  # stored as "inf" / "nan": the kind is known, the number is not
        reason = f"the final result ({final}) is not a finite number"
    else:
        reason = describe_result(final) or "the final result is not a number"
    return TrialState.FAIL, None, reason


def _several_outcome(final: Any, objectives: list[dict[str, str]]) -> tuple[TrialState, list[float] | None, str | None]:
    """A succeeded trial of a multi-objective experiment: one value per objective, or FAIL with
    the reason (a missing or non-finite objective has no place on the front)."""
    values, problem = objective_values(final, objectives)
    return (TrialState.COMPLETE if values is not None else TrialState.FAIL), values, problem


def _preview(value: Any, limit: int = 40) -> str:
    """A reported value as the message quotes it: short, whatever the trial sent."""
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def best_row(rows: list[dict[str, Any]], optimize_mode: str) -> dict[str, Any] | None:
    """The best succeeded trial by final metric, honouring maximize/minimize."""
    done = [
        r
        for r in rows
        if r["status"] in COUNTED_STATUS_NAMES and r["final_metric"] is not None and math.isfinite(r["final_metric"])
    ]
    if not done:
        return None
    pick = min if optimize_mode == "minimize" else max
    return pick(done, key=lambda r: r["final_metric"])


_NON_FINITE = {"nan": math.nan, "infinity": math.inf, "inf": math.inf, "-infinity": -math.inf, "-inf": -math.inf}


def scalar(value: Any) -> float | None:
    """NNI's scalar reward, also reading NaN/Infinity back from their stored string form."""
    if isinstance(value, dict):
        value = value.get("default")
    if isinstance(value, str) and value.lower() in _NON_FINITE:
        return _NON_FINITE[value.lower()]
    return _plain_scalar(value)


def _jsonable(value: Any) -> Any:
    """Optuna user attrs are JSON: NaN/Infinity are kept as strings, as nni's json_tricks writes them."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
        return str(_plain_scalar(value))  # beyond what databases and JSON readers keep: "inf"
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)
