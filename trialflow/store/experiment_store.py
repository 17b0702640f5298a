"""The experiment store: what persists an experiment, in trialflow's terms.

One Optuna study per experiment (its name is the experiment id). The tuner, the end step,
``trialflow run``'s progress and ``optuna-dashboard`` all read the same rows. SQLite is the
embedded default (WAL, generous lock timeout: many trial tasks and the triggerer write at once);
PostgreSQL/MySQL URLs work unchanged for workers on several machines.

:class:`ExperimentStore` is what the core asks of the store: experiments by id, trials as
:class:`TrialRecord`, their attributes, results and closes. Under it, Optuna's storage made
cheap for a trial task (optuna_storage.py: grouped writes, plain-SQL reads, a remembered schema
check); beside it, the pure pieces it uses: the result rules (results.py), the asked-for queue
(trial_queue.py), the snapshot cache (snapshot.py). It persists and never samples: the asker
(asker.py) draws a trial's parameters and hands them here to be claimed (:meth:`claim_index`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import optuna
import sqlalchemy as sa
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url

from trialflow.config.search_space import SearchSpace, SearchSpaceError, encode
from trialflow.store import statements
from trialflow.store.optuna_internals import models, trial_storage_id
from trialflow.store.optuna_storage import HeldParam, open_storage
from trialflow.store.optuna_tables import STUDIES, STUDY_ATTRS, TRIAL_ATTRS, TRIALS
from trialflow.store.pareto import OBJECTIVES_ATTR
from trialflow.store.prior_trials import PRIOR_ATTR, PriorTrial, is_prior
from trialflow.store.prior_trials import template as prior_template
from trialflow.store.records import Lineage, Restart, restarts_from_attr
from trialflow.store.records import TrialHistory as TrialHistory  # where its readers have always found it
from trialflow.store.records import TrialRecord as TrialRecord  # where its readers have always found it
from trialflow.store.results import TrialRow, finite_or_none, jsonable, outcome, preview, scalar
from trialflow.store.snapshot import SnapshotCache
from trialflow.store.tables import RESULT_TIMES, SNAPSHOTS, TRIAL_QUEUE, WINDOWS
from trialflow.store.tables import TRIAL_INDEX as TRIAL_INDEX  # where the read models find it
from trialflow.store.trial_queue import Queued, claim, drop_waiting, enqueue, release, waiting, waiting_count
from trialflow.store.trial_reader import TrialSummary, read_summary, read_trials
from trialflow.store.urls import SQLITE_TIMEOUT_SECONDS, safe_url, use_wal, with_installed_driver
from trialflow.store.urls import sqlite_url as sqlite_url  # where the callers have always found it
from trialflow.trial.handle import TrialHandle
from trialflow.trial.protocol import Metric
from trialflow.trial.status import COUNTED_STATUSES, TrialStatus

log = logging.getLogger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)

#: Compare-and-set tries of update_experiment_attr before it gives up (each lost to another writer).
ATTR_UPDATE_ATTEMPTS = 200
#: Seconds after which an ask that never claimed its trial index is taken as dead (its claim
#: follows Optuna's commit within milliseconds; a loaded store may take seconds).
ABANDONED_AFTER = 60.0
#: Experiment attribute keys of the stops whose job is not yet known stopped: the prefix, then
#: the trial's storage id; JOB_STOP_END is the first key past them (":" + 1 is ";").
JOB_STOP_PREFIX = "job_stop:"
JOB_STOP_END = "job_stop;"


@dataclass(frozen=True)
class StartRead:
    """What a trial's start read of its experiment in one call (ExperimentStore.read_for_start)."""

    #: The experiment attributes named that are set, by key.
    attrs: dict[str, Any]
    #: The trials asked at the indexes named, by index.
    trials: dict[int, TrialRecord]
    #: The trials submitted and not closed, when asked for (hybrid placement), else None.
    active: list[TrialRecord] | None = None


#: The trial attribute naming the Airflow task instance that ran the trial (dag, run, task, map
#: index, try), recorded by its start for the outputs that link back to it.
TASK_ATTR = "task"


def _history(t: FrozenTrial, storage_id: int) -> TrialHistory:
    attrs = t.user_attrs
    prior = attrs.get(PRIOR_ATTR)
    started = attrs.get("started_at")
    if not isinstance(started, (int, float)):
        started = t.datetime_start.timestamp() if t.datetime_start else None
    return TrialHistory(
        storage_id=storage_id,
        trial_index=attrs.get("trial_index"),
        trial_id=str(attrs.get("trial_id") or (prior or {}).get("trial_id") or t.number),
        parameters=attrs.get("parameters") or dict(t.params),
        status=str(attrs.get("nni_status") or ("SUCCEEDED" if prior else TrialStatus.WAITING.value)),
        finished=t.state.is_finished(),
        started_at=float(started) if started is not None else None,
        ended_at=t.datetime_complete.timestamp() if t.datetime_complete else None,
        intermediate={int(k): float(v) for k, v in t.intermediate_values.items()},
        final=attrs.get("final_metric") if not prior else (t.values[0] if t.values else None),
        asked_by=attrs.get("asked_by"),
        task=attrs.get(TASK_ATTR),
        service_index=attrs.get("service_index"),
        imported="nni_trial_job_id" in attrs,
        prior_of=f"{prior.get('experiment_id')}/{prior.get('trial_id')}" if isinstance(prior, dict) else None,
    )


def _record(frozen: optuna.trial.FrozenTrial, storage_id: int) -> TrialRecord:
    return _record_of(TrialSummary.of(frozen, storage_id))


def _record_of(summary: TrialSummary) -> TrialRecord:
    attrs = summary.user_attrs
    return TrialRecord(
        storage_id=summary.trial_id,
        number=summary.number,
        trial_index=int(attrs.get("trial_index", summary.number)),
        trial_id=str(attrs.get("trial_id", "")),
        parameters=attrs.get("parameters") or {},
        status=TrialStatus(attrs.get("nni_status", TrialStatus.WAITING.value)),
        finished=summary.state.is_finished(),
        handle=attrs.get("handle"),
        service_index=attrs.get("service_index"),
        host=attrs.get("host"),
        started_at=attrs.get("started_at"),
        final=attrs.get("final_metric"),
        message=attrs.get("message"),
        intermediate_count=summary.intermediate_count,
        last_step=summary.last_step,
        asked_by=attrs.get("asked_by"),
        restarts=restarts_from_attr(attrs.get("restarts")),
        lineage=Lineage.from_attr(attrs.get("pbt")),
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
                use_wal(database)
            # pysqlite begins the write transaction at the first write, so writers queue on this
            # busy timeout instead of failing with "database is locked" (64 trials x 200 results
            # from 4 processes: tests/store/test_store_load.py).
            engine_kwargs["connect_args"] = {"timeout": SQLITE_TIMEOUT_SECONDS}
        else:
            engine_kwargs["pool_pre_ping"] = True
        self.storage = open_storage(url, engine_kwargs)
        # What the tuners and assessors read through: Optuna's own cache of finished trials, one
        # per store (a Study made from the bare storage would start an empty cache every time),
        # so a process that asks or checks again reads only what changed since.
        # The cache starts from the experiment's snapshot row (trialflow.store.snapshot), so a new
        # task process does not read every finished trial back.
        self.sampling_storage = SnapshotCache(self.storage)
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
        direction: Literal["maximize", "minimize"] = "maximize",
        objectives: list[dict[str, str]] | None = None,
    ) -> None:
        """Create the experiment, or re-open it (a cleared or continued run). ``objectives``
        (several, each {"metric", "mode"}): a multi-objective study, one direction each. Its
        tuner and assessor are not stored: the asker builds them at each ask (asker.py)."""
        directions = {"directions": [o["mode"] for o in objectives]} if objectives else {"direction": direction}
        optuna.create_study(storage=self.storage, study_name=experiment_id, load_if_exists=True, **directions)
        if objectives:
            self.set_experiment_attrs(experiment_id, {OBJECTIVES_ATTR: objectives})

    def delete_experiment(self, experiment_id: str) -> None:
        """Remove an experiment whole: what an import that failed half-way wrote (trialflow
        deletes no experiment otherwise). trialflow's own rows of its study go first, then
        Optuna's study, then this process's memory of its id."""
        if not self.experiment_exists(experiment_id):
            return
        study_id = self.study_id(experiment_id)
        present = set(sa.inspect(self.storage.engine).get_table_names())
        with self.storage.engine.begin() as conn:
            for table in (TRIAL_INDEX, TRIAL_QUEUE, SNAPSHOTS, WINDOWS):
                if table.name in present:  # a table this store never made holds nothing of it
                    conn.execute(table.delete().where(table.c.study_id == study_id))
        optuna.delete_study(study_name=experiment_id, storage=self.storage)
        self.storage.forget(experiment_id)

    def experiment_exists(self, experiment_id: str) -> bool:
        try:
            self.storage.get_study_id_from_name(experiment_id)
        except KeyError:
            return False
        return True

    def study_id(self, experiment_id: str) -> int:
        return self.storage.get_study_id_from_name(experiment_id)

    def experiment_attrs(self, experiment_id: str) -> dict[str, Any]:
        return self.storage.get_study_user_attrs(self.study_id(experiment_id))

    def experiment_attr(self, experiment_id: str, key: str) -> Any:
        """One of the experiment's attributes (None if unset), without reading the others: every
        trial task reads its run's window, and the study keeps one attribute per run."""
        bound = {"b_study": self.study_id(experiment_id), "b_key": key}
        with self.storage.engine.connect() as conn:
            raw = conn.execute(statements.STUDY_ATTR, bound).scalar_one_or_none()
        return None if raw is None else json.loads(raw)

    def experiment_attrs_named(self, experiment_id: str, keys: Iterable[str]) -> dict[str, Any]:
        """The experiment's attributes named in ``keys`` that are set, in one statement, without
        the others (one per run, one per custom class...)."""
        bound = {"b_study": self.study_id(experiment_id), "b_keys": list(keys)}
        with self.storage.engine.connect() as conn:
            return {row.key: json.loads(row.value_json) for row in conn.execute(statements.STUDY_ATTRS_NAMED, bound)}

    def read_for_start(
        self,
        experiment_id: str,
        keys: Sequence[str],
        indexes_of: Callable[[dict[str, Any]], Sequence[int]],
        active: bool = False,
    ) -> StartRead:
        """What a trial's start reads of its experiment, at once: the attributes named (those
        set: its run's window, the limits and search spaces a person changed...), the trials
        at the indexes ``indexes_of(those attributes)`` names that were asked (the trial's own,
        which a retry or a resumed run re-attaches to; PBT's generation before it), by index,
        and with ``active`` the trials running now (what NNI's hybrid mode places a trial by).
        The indexes come from its run's window, which the store does not read. One connection;
        a task's first read of the store, so it finds the study's id in the same statement."""
        with self.storage.engine.connect() as conn:
            rows = conn.execute(statements.STUDY_WITH_ATTRS, {"b_name": experiment_id, "b_keys": list(keys)}).all()
            if not rows:  # no such study (a remembered id of a deleted one is forgotten)
                self.storage.forget(experiment_id)
                raise KeyError(f"experiment {experiment_id!r} is not in the store")
            study_id = int(rows[0].study_id)
            self.storage.remember(experiment_id, study_id)
            self.storage.read_directions(conn, study_id)
            attrs = {row.key: json.loads(row.value_json) for row in rows if row.key is not None}
            trials = self._trials_at(conn, study_id, indexes_of(attrs))
            return StartRead(attrs, trials, self._active(conn, study_id) if active else None)

    def find_trials(self, experiment_id: str, trial_indexes: Iterable[int]) -> dict[int, TrialRecord]:
        """The trials at ``trial_indexes`` that were asked, by index (two statements however many)."""
        study_id = self.study_id(experiment_id)
        with self.storage.engine.connect() as conn:
            return self._trials_at(conn, study_id, trial_indexes)

    @staticmethod
    def _trials_at(conn: sa.Connection, study_id: int, trial_indexes: Iterable[int]) -> dict[int, TrialRecord]:
        indexes = sorted(set(trial_indexes))
        if not indexes:
            return {}
        bound = {"b_study": study_id, "b_indexes": indexes}
        ids = [int(i) for i in conn.execute(statements.TRIALS_AT, bound).scalars()]
        if not ids:
            return {}
        frozen = read_trials(conn, [TRIALS.c.trial_id.in_(ids)])
        records = (_record(trial, trial_storage_id(trial)) for trial in frozen)
        return {record.trial_index: record for record in records}

    def experiments_with_attr(self, key: str, value: Any) -> list[str]:
        """The experiments whose attribute ``key`` is ``value``, oldest first (e.g. a DAG's)."""
        table = STUDY_ATTRS
        studies = STUDIES
        query = (
            sa.select(studies.c.study_name)
            .join(table, table.c.study_id == studies.c.study_id)
            .where(table.c.key == key, table.c.value_json == json.dumps(value))
            .order_by(studies.c.study_id)
        )
        with self.storage.engine.connect() as conn:
            return [row[0] for row in conn.execute(query)]

    def view(self, experiment_id: str) -> ExperimentView:
        """The experiment as a tuner's call may see and change it (trialflow.tuning.study_view)."""
        return ExperimentView(self, experiment_id)

    def update_experiment_attr(self, experiment_id: str, key: str, change: Callable[[Any], Any]) -> Any:
        """Set attribute ``key`` to ``change(its current value)`` (None when unset) atomically,
        and return the new value: a compare-and-set on its row, tried again when another writer
        changed it in between. Read-modify-write of a shared attribute (the history, counters)
        lost changes under concurrency: twenty actions from two editors at once wrote 13
        history lines. No lock is held, so it works alike on SQLite and PostgreSQL."""
        study_id = self.study_id(experiment_id)
        bound = {"b_study": study_id, "b_key": key}
        for _ in range(ATTR_UPDATE_ATTEMPTS):
            with self.storage.engine.connect() as conn:
                raw = conn.execute(statements.STUDY_ATTR, bound).scalar_one_or_none()
            value = change(None if raw is None else json.loads(raw))
            new = json.dumps(value)
            if new == (raw if raw is not None else "null"):
                return value  # nothing changes: nothing is written
            try:
                with self.storage.engine.begin() as conn:
                    if raw is None:
                        conn.execute(
                            statements.INSERT_STUDY_ATTR, {"study_id": study_id, "key": key, "value_json": new}
                        )
                        return value
                    if (
                        conn.execute(statements.SWAP_STUDY_ATTR, {**bound, "b_old": raw, "value_json": new}).rowcount
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
        study_id = self.study_id(experiment_id)
        current = self.storage.get_study_user_attrs(study_id)
        for key, value in attrs.items():
            if current.get(key) != value:
                self.storage.set_study_user_attr(study_id, key, value)

    # -- trials -----------------------------------------------------------------------------

    def find_trial_id(self, experiment_id: str, trial_index: int) -> int | None:
        """The storage id of trial ``trial_index`` (one indexed query)."""
        bound = {"b_study": self.study_id(experiment_id), "b_index": trial_index}
        with self.storage.engine.begin() as conn:
            found = conn.execute(statements.TRIAL_AT, bound).scalar_one_or_none()
        return None if found is None else int(found)

    def asked_between(self, experiment_id: str, first: int, end: int) -> dict[int, bool]:
        """The trials asked at indexes ``first`` .. ``end - 1`` (a run's window), by index:
        whether each is closed. One statement."""
        bound = {"b_study": self.study_id(experiment_id), "b_first": first, "b_end": end}
        with self.storage.engine.connect() as conn:
            return {
                int(index): state != TrialState.RUNNING
                for index, state in conn.execute(statements.ASKED_BETWEEN, bound)
            }

    def asked_for_look(self, experiment_id: str, first: int, end: int, lowest: int) -> dict[int, bool]:
        """Of ``asked_between``'s trials, the running ones and every one at ``lowest`` or above
        (the lowest index a look for free slots decides): what it needs, without reading a
        run's thousands of closed trials at every look. One statement."""
        bound = {"b_study": self.study_id(experiment_id), "b_first": first, "b_end": end, "b_lowest": lowest}
        with self.storage.engine.connect() as conn:
            return {
                int(index): state != TrialState.RUNNING
                for index, state in conn.execute(statements.ASKED_FOR_LOOK, bound)
            }

    def asked_at(self, experiment_id: str, trial_indexes: Collection[int]) -> dict[int, bool]:
        """The trials asked at ``trial_indexes``, by index: whether each is closed. One statement."""
        if not trial_indexes:
            return {}
        bound = {"b_study": self.study_id(experiment_id), "b_indexes": sorted(set(trial_indexes))}
        with self.storage.engine.connect() as conn:
            return {
                int(index): state != TrialState.RUNNING for index, state in conn.execute(statements.ASKED_AT, bound)
            }

    def all_finished(self, experiment_id: str, trial_indexes: Collection[int]) -> bool:
        """Every trial of ``trial_indexes`` is in the store and no longer running (one indexed
        query; a trial not asked yet counts as not finished). The highest index is looked at
        first, alone: a run's watch asks this every moment with every index whose task is alive,
        and while its later trials wait to start (deferred tasks, in the triggerer: hundreds)
        the answer is no, in one row."""
        wanted = sorted(set(trial_indexes))
        if not wanted:
            return True
        study_id = self.study_id(experiment_id)
        with self.storage.engine.connect() as conn:
            if not conn.execute(statements.CLOSED_AT, {"b_study": study_id, "b_index": wanted[-1]}).scalar():
                return False
            if len(wanted) == 1:
                return True
            closed = conn.execute(statements.CLOSED_AMONG, {"b_study": study_id, "b_indexes": wanted}).scalar_one()
        return bool(closed == len(wanted))

    def find_trial(self, experiment_id: str, trial_index: int) -> TrialRecord | None:
        storage_id = self.find_trial_id(experiment_id, trial_index)
        return None if storage_id is None else self.trial(storage_id)

    def trial(self, storage_id: int) -> TrialRecord:
        return _record_of(self._summary(storage_id))

    def _summary(self, storage_id: int) -> TrialSummary:
        """The trial as its record needs it (trial_reader.TrialSummary); KeyError, Optuna's, for
        no such trial."""
        with self.storage.engine.connect() as conn:
            summary = read_summary(conn, storage_id)
        if summary is None:
            raise KeyError(models.NOT_FOUND_MSG)  # what Optuna's get_trial raises
        return summary

    def asked_for(
        self, study_id: int, trial_index: int, space: SearchSpace
    ) -> tuple[Queued | None, dict[str, Any] | None]:
        """Claim the trial a person asked for that runs as ``trial_index``, with its sampler
        values; one whose parameters no longer fit the space (the config changed) is dropped."""
        queued = claim(self.storage.engine, study_id, trial_index)
        if queued is None:
            return None, None
        try:
            return queued, encode(space, queued.parameters)
        except SearchSpaceError as exc:
            log.warning("asked-for trial %s dropped: its parameters no longer fit: %s", queued.seq, exc)
            release(self.storage.engine, queued.seq, dropped=True)
            return None, None

    def claim_index(
        self,
        study_id: int,
        trial_index: int,
        asked: optuna.trial.Trial,
        params: Sequence[HeldParam],
        attrs: dict[str, Any],
        queued: Queued | None,
    ) -> tuple[TrialRecord, bool]:
        """Give the trial Optuna just created (``asked``) index ``trial_index``: its held
        parameters, trialflow's attributes and the claim are one transaction, so another
        process sees the trial either without them or with all of them. Returns the trial that
        holds the index, and whether another attempt had claimed it first (an ask for the same
        index at the same moment): then this one is closed as superseded, and leaves nothing."""
        storage_id = trial_storage_id(asked)  # the trial Optuna just created (its id, as RDBStorage gave it)
        parameters = attrs["parameters"]
        try:
            with self.storage.transaction() as session:
                claim = {"study_id": study_id, "trial_index": trial_index, "trial_id": storage_id}
                session.execute(statements.INSERT_INDEX, claim)
                self.storage.write_params(session, params)
                self.storage.write_user_attrs(session, storage_id, attrs)
        except sa.exc.IntegrityError:
            winner = self._winner(study_id, trial_index)
            if queued is not None and self.trial(winner).parameters != parameters:
                release(self.storage.engine, queued.seq)  # the winner ran something else: it waits on
            self.storage.set_trial_user_attr(storage_id, "superseded_by", winner)
            self.storage.set_trial_state_values(storage_id, TrialState.FAIL)
            return self.trial(winner), True
        record = TrialRecord(
            storage_id,
            asked.number,
            trial_index,
            attrs["trial_id"],
            parameters,
            asked_by=attrs.get("asked_by"),
            lineage=Lineage.from_attr(attrs.get("pbt")),
        )
        return record, False

    def _winner(self, study_id: int, trial_index: int) -> int:
        with self.storage.engine.begin() as conn:
            return int(
                conn.execute(
                    sa.select(TRIAL_INDEX.c.trial_id).where(
                        TRIAL_INDEX.c.study_id == study_id, TRIAL_INDEX.c.trial_index == trial_index
                    )
                ).scalar_one()
            )

    def enqueue(
        self, experiment_id: str, parameters: dict[str, Any], request: dict[str, Any], most: int | None = None
    ) -> int:
        """Ask for a trial with these parameters: the next trial index to start runs it
        (trial_queue.QueueFull when ``most`` wait already)."""
        return enqueue(self.storage.engine, self.study_id(experiment_id), parameters, request, most)

    def waiting_trials(self, experiment_id: str) -> list[Queued]:
        return waiting(self.storage.engine, self.study_id(experiment_id))

    def waiting_count(self, experiment_id: str) -> int:
        return waiting_count(self.storage.engine, self.study_id(experiment_id))

    def drop_waiting(self, experiment_id: str) -> int:
        """Drop the asked-for trials no trial index will take (the experiment ended)."""
        return drop_waiting(self.storage.engine, self.study_id(experiment_id))

    def active_trials(self, experiment_id: str) -> list[TrialRecord]:
        """Trials submitted and not closed (for hybrid placement and for cancelling a run)."""
        study_id = self.study_id(experiment_id)
        with self.storage.engine.connect() as conn:
            return self._active(conn, study_id)

    @staticmethod
    def _active(conn: sa.Connection, study_id: int) -> list[TrialRecord]:
        running = read_trials(conn, [TRIALS.c.study_id == study_id, TRIALS.c.state == TrialState.RUNNING])
        return [_record(t, trial_storage_id(t)) for t in running if is_claimed(t)]

    def running_attr(self, experiment_id: str, key: str) -> dict[int, Any]:
        """User attribute ``key`` of every running trial that has it, by storage id: one indexed
        query of that key's rows alone (the run's watch asks it every second; loading every
        running trial whole would cost as much as the trials it watches)."""
        query = (
            sa.select(TRIAL_ATTRS.c.trial_id, TRIAL_ATTRS.c.value_json)
            .join(TRIALS, TRIALS.c.trial_id == TRIAL_ATTRS.c.trial_id)
            .where(
                TRIALS.c.study_id == self.study_id(experiment_id),
                TRIALS.c.state == TrialState.RUNNING,
                TRIAL_ATTRS.c.key == key,
            )
        )
        with self.storage.engine.connect() as conn:
            rows = conn.execute(query).all()
        found = {}
        for storage_id, text in rows:
            try:
                found[int(storage_id)] = json.loads(text)
            except (TypeError, ValueError):
                continue  # a value another writer left unreadable: not a request
        return found

    # -- stops whose job is not yet known stopped (trialflow.experiment.job_stops) ---------------
    # One experiment attribute row per stop, keyed by the trial: concurrent stops of a whole run
    # insert rows of their own instead of contending for one shared value.

    def note_job_stop(self, storage_id: int, value: dict[str, Any]) -> None:
        """Record, before the trial is closed, that its job is being stopped (``value``: the
        stop as trialflow.experiment.job_stops writes it); a second note replaces the first."""
        self.storage.set_study_attr_of_trial(storage_id, JOB_STOP_PREFIX + str(int(storage_id)), value)

    def clear_job_stop(self, storage_id: int) -> None:
        """The trial's job is stopped (its platform took the stop): forget the note."""
        key = JOB_STOP_PREFIX + str(int(storage_id))
        study_id = sa.select(TRIALS.c.study_id).where(TRIALS.c.trial_id == storage_id).scalar_subquery()
        with self.storage.engine.begin() as conn:
            conn.execute(sa.delete(STUDY_ATTRS).where(STUDY_ATTRS.c.study_id == study_id, STUDY_ATTRS.c.key == key))

    def job_stops(self, experiment_id: str) -> dict[int, Any]:
        """The experiment's noted stops not yet cleared, by the trial's storage id, as written
        (the reader checks them): one indexed range read of their rows alone, so the run's watch
        may ask every pass. A row whose value is not JSON is left out."""
        query = sa.select(STUDY_ATTRS.c.key, STUDY_ATTRS.c.value_json).where(
            STUDY_ATTRS.c.study_id == self.study_id(experiment_id),
            STUDY_ATTRS.c.key >= JOB_STOP_PREFIX,
            STUDY_ATTRS.c.key < JOB_STOP_END,
        )
        with self.storage.engine.connect() as conn:
            rows = conn.execute(query).all()
        found = {}
        for key, text in rows:
            suffix = key[len(JOB_STOP_PREFIX) :]
            if not suffix.isdigit() or len(suffix) > 18:
                continue
            try:
                found[int(suffix)] = json.loads(text)
            except (TypeError, ValueError):
                continue
        return found

    def close_abandoned_asks(self, experiment_id: str, older_than: float = ABANDONED_AFTER) -> int:
        """Finish (FAIL, ``abandoned_ask``) the Optuna trials an ask created and never claimed a
        trial index for: its process died between Optuna's commit and the claim (a worker
        killed, a deployment taken down). Nothing ran for them and no task follows them; left
        RUNNING, Optuna's own tools would show them running for ever. Only asks older than
        ``older_than`` seconds: a younger one may be a claim in flight. Returns how many."""
        study_id = self.study_id(experiment_id)
        now = datetime.now()
        closed = 0
        for t in self.storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            if "trial_index" in t.user_attrs or t.datetime_start is None:
                continue
            if (now - t.datetime_start).total_seconds() < older_than:
                continue
            storage_id = self.storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
            try:
                self.storage.set_trial_user_attr(storage_id, "abandoned_ask", True)
                self.storage.set_trial_state_values(storage_id, TrialState.FAIL)
            except UpdateFinishedTrialError:
                continue  # closed meanwhile by another end step
            closed += 1
        return closed

    def trial_attr(self, storage_id: int, key: str) -> Any:
        """One of a trial's attributes (None if unset), in one indexed query: the follow loop
        asks every poll whether someone asked the trial to stop, and reading the whole trial
        (all its intermediate values) for that would cost a long trial dearly."""
        with self.storage.engine.connect() as conn:
            raw = conn.execute(statements.TRIAL_ATTR, {"b_trial": storage_id, "b_key": key}).scalar_one_or_none()
        return None if raw is None else json.loads(raw)

    def trial_attrs(self, storage_id: int, keys: Iterable[str]) -> dict[str, Any]:
        """Some of a trial's attributes (those set), in one indexed query."""
        bound = {"b_trial": storage_id, "b_keys": list(keys)}
        with self.storage.engine.connect() as conn:
            return {key: json.loads(raw) for key, raw in conn.execute(statements.TRIAL_ATTRS_NAMED, bound)}

    def set_status(self, storage_id: int, status: TrialStatus, **attrs: Any) -> None:
        """A running trial's status (and facts beside it). A trial closed meanwhile (a stop
        that came between its follower's read and this write) keeps its outcome: nothing is
        written, and the follower sees the stop on its next look."""
        try:
            self.storage.set_trial_user_attrs(storage_id, {"nni_status": status.value, **attrs})
        except UpdateFinishedTrialError:
            log.debug("trial %s was closed before its status %s was written", storage_id, status.value)

    def set_attrs(self, storage_id: int, **attrs: Any) -> None:
        """Facts about a trial besides its status: handle, started_at, service_index, host."""
        self.storage.set_trial_user_attrs(storage_id, attrs)

    def add_restart(self, storage_id: int, restart: Restart, handle: TrialHandle | None = None) -> TrialRecord:
        """Record a restart (the trial back to WAITING, with its new job's ``handle`` once it
        has one) and return the trial as stored. A trial closed meanwhile is left alone."""
        record = self.trial(storage_id)
        if record.finished:
            return record
        restarts = [*(r.__dict__ for r in record.restarts if r.attempt != restart.attempt), restart.__dict__]
        attrs: dict[str, Any] = {"restarts": sorted(restarts, key=lambda r: r["attempt"])}
        if handle is not None:
            attrs["handle"] = handle
        self.set_status(storage_id, TrialStatus.WAITING, **attrs)  # nothing, if closed meanwhile
        return self.trial(storage_id)

    def intermediate_values(self, storage_id: int) -> dict[int, float]:
        """The trial's intermediate results by step."""
        return {int(k): float(v) for k, v in self.storage.get_trial(storage_id).intermediate_values.items()}

    def result_times(self, storage_id: int, after_step: int = -1) -> dict[int, float]:
        """When the trial's intermediate results of steps above ``after_step`` reached the store
        (epoch seconds, by step); a result stored before trialflow kept times has none."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(RESULT_TIMES.c.step, RESULT_TIMES.c.reported_at).where(
                    RESULT_TIMES.c.trial_id == storage_id, RESULT_TIMES.c.step > after_step
                )
            )
            return {int(step): float(at) for step, at in rows}

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
            if metric.is_checkpoint:
                continue  # no result: the follower keeps the checkpoint (trialflow.experiment.keeping)
            if metric.is_final:
                reported = jsonable(metric.value)
                if first_final is None:
                    first_final = self.storage.keep_first_user_attr(storage_id, "final_metric", reported)
                if reported != first_final:
                    skipped.append(
                        f"a second final result ({preview(reported)}) was ignored: the first "
                        f"({preview(first_final)}) counts, as in NNI"
                    )
                continue
            value = scalar(metric.value)
            if value is not None and math.isfinite(value):
                intermediate.append((metric.sequence, float(value)))
            else:
                skipped.append(
                    f"intermediate result {metric.sequence} ({preview(jsonable(metric.value))}) is not a finite number"
                )
        try:
            self.storage.write_intermediate_values(storage_id, intermediate, reported_at=time.time())
        except UpdateFinishedTrialError:  # closed meanwhile (stopped): its curve ends where it stopped
            skipped.append(f"{len(intermediate)} intermediate result(s) came after the trial was closed")
        return skipped

    def finish(self, storage_id: int, status: TrialStatus, final: Any = None, message: str | None = None) -> None:
        """Close the trial in the store; a second call (retry) leaves a finished trial alone."""
        self._finish(self._summary(storage_id), status, final, message)

    def close(self, storage_id: int, status: TrialStatus, message: str | None = None) -> TrialRecord:
        """Close the trial with the final result it reported (as stored) and return it as the
        store now holds it; a trial already closed (a retry, or a cancel that came first) keeps
        its first outcome. One read and one write."""
        summary = self._summary(storage_id)
        return self._finish(summary, status, summary.user_attrs.get("final_metric"), message)

    def fail_unlaunched(self, storage_id: int, message: str) -> None:
        """Close a trial that has its parameters and can never be launched (GPUs no machine
        has, code over the limits, sealing unavailable) as FAILED with why, in one write: it
        reported nothing, so there is no final result to read first and no objective to place.
        A trial closed meanwhile (a stop that came first) keeps its outcome."""
        attrs = {"nni_status": TrialStatus.FAILED.value, "message": message}
        try:
            self.storage.close_trial(storage_id, TrialState.FAIL, None, attrs)
        except UpdateFinishedTrialError:
            log.debug("trial %s was closed before it could be failed unlaunched", storage_id)

    def objectives_of_trial(self, storage_id: int, study_id: int | None = None) -> list[dict[str, str]] | None:
        """The objectives of the trial's experiment (None: one objective); read once per study
        (``study_id``, where the caller read it with the trial, saves finding it again)."""
        trials = TRIALS
        attrs = STUDY_ATTRS
        if study_id is not None and study_id in self._objectives:
            return self._objectives[study_id]
        with self.storage.engine.connect() as conn:
            if study_id is None:
                study_id = conn.execute(
                    sa.select(trials.c.study_id).where(trials.c.trial_id == storage_id)
                ).scalar_one()
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
        summary = self._summary(storage_id)
        return self._close(summary, status, summary.user_attrs.get("final_metric"), message)[1]

    def _finish(self, summary: TrialSummary, status: TrialStatus, final: Any, message: str | None) -> TrialRecord:
        return self._close(summary, status, final, message)[0]

    def _close(
        self, summary: TrialSummary, status: TrialStatus, final: Any, message: str | None
    ) -> tuple[TrialRecord, bool]:
        storage_id = summary.trial_id
        if summary.state.is_finished():
            return _record_of(summary), False  # Optuna freezes finished trials; the first outcome stands
        attrs: dict[str, Any] = {"nni_status": status.value}
        if message:
            attrs["message"] = message
        if final is not None:
            attrs["final_metric"] = jsonable(final)
            if isinstance(final, dict):
                attrs["final_metric_extra"] = {k: jsonable(v) for k, v in final.items() if k != "default"}
        objectives = self.objectives_of_trial(storage_id, summary.study_id) if status in COUNTED_STATUSES else None
        state, values, problem = outcome(status, final, objectives)
        if problem:
            attrs["message"] = problem + (f"; {message}" if message else "")
        try:
            self.storage.close_trial(storage_id, state, values, attrs)
        except UpdateFinishedTrialError:
            # finished concurrently by another process (a cancel racing the trigger): first wins
            return self.trial(storage_id), False
        return _record_of(replace(summary, state=state, user_attrs={**summary.user_attrs, **attrs})), True

    def set_trial_times(self, storage_id: int, started: float | None, ended: float | None) -> None:
        """When the trial ran, as another system measured it (an NNI import: its events' times,
        not the import's), so every page, duration and export reads those. Epoch seconds, kept
        as Optuna keeps its own: naive local time. None is a time that system did not record:
        stored as none (the pages say "unknown"), never as the moment of the import."""
        values = {
            column: None if stamp is None else datetime.fromtimestamp(stamp)
            for column, stamp in (("datetime_start", started), ("datetime_complete", ended))
        }
        with self.storage.engine.begin() as conn:
            conn.execute(TRIALS.update().where(TRIALS.c.trial_id == storage_id).values(**values))

    def add_prior_trials(self, experiment_id: str, space: SearchSpace, priors: Iterable[PriorTrial]) -> int:
        """Give the experiment's tuner these earlier results as history (trialflow.tuning.
        prior_trials: finished trials without a trial index); those added before (a retried
        start) are skipped. Returns how many were added now."""
        study_id = self.study_id(experiment_id)
        table = TRIAL_ATTRS
        query = (
            sa.select(table.c.value_json)
            .join(TRIALS, TRIALS.c.trial_id == table.c.trial_id)
            .where(TRIALS.c.study_id == study_id, table.c.key == PRIOR_ATTR)
        )
        with self.storage.engine.connect() as conn:
            found = [json.loads(raw) for raw in conn.execute(query).scalars()]
        have = {(str(v.get("experiment_id")), str(v.get("trial_id"))) for v in found if isinstance(v, dict)}
        added = 0
        for prior in priors:
            if prior.key in have:
                continue
            self.storage.create_new_trial(study_id, template_trial=prior_template(space, prior))
            have.add(prior.key)
            added += 1
        return added

    # -- reading --------------------------------------------------------------------------

    def trial_rows(self, experiment_id: str) -> list[TrialRow]:
        """Every trial, in trial-index order, for summaries and progress (not the superseded
        asks, nor the prior trials a warm start gave the tuner: neither ran here)."""
        frozen = self.storage.get_all_trials(self.study_id(experiment_id), deepcopy=False)
        rows = [_row(t) for t in frozen if is_claimed(t)]
        return sorted(rows, key=lambda r: (r.trial_index is None, r.trial_index or 0))

    def trial_history(self, storage_id: int) -> TrialHistory:
        """One trial's TrialHistory (its curve and times)."""
        return _history(self.storage.get_trial(storage_id), storage_id)

    def trial_histories(self, experiment_id: str) -> list[TrialHistory]:
        """Every trial of the experiment with its curve and times, and the prior trials a warm
        start gave its tuner, for outputs that copy the experiment elsewhere (TrialHistory)."""
        frozen = self.storage.get_all_trials(self.study_id(experiment_id), deepcopy=False)
        return [_history(t, trial_storage_id(t)) for t in frozen if is_claimed(t) or is_prior(t)]


@dataclass(frozen=True)
class ExperimentView:
    """One experiment of the store, as trialflow.tuning.study_view.StudyView says a tuner may
    reach it: its attributes (changed by compare-and-set) and its trials' histories."""

    store: ExperimentStore
    experiment_id: str

    def attr(self, key: str) -> Any:
        return self.store.experiment_attr(self.experiment_id, key)

    def change_attr(self, key: str, change: Callable[[Any], Any]) -> Any:
        return self.store.update_experiment_attr(self.experiment_id, key, change)

    def histories(self) -> list[TrialHistory]:
        return self.store.trial_histories(self.experiment_id)


def is_claimed(t: FrozenTrial) -> bool:
    """A trial of the experiment: one whose ask claimed its trial index (the claim and the
    ``trial_index`` attribute are one transaction) and was not superseded by a twin's. Not the
    asks that died before their claim (Optuna committed the trial, the claim never came: no
    task asked for a row), nor the prior trials a warm start gave the tuner (no index)."""
    return "trial_index" in t.user_attrs and "superseded_by" not in t.user_attrs and not is_prior(t)


def _row(t: FrozenTrial) -> TrialRow:
    attrs = t.user_attrs
    return TrialRow(
        trial_index=attrs.get("trial_index"),
        trial_id=attrs.get("trial_id"),
        parameters=attrs.get("parameters"),
        status=attrs.get("nni_status"),
        final_metric=finite_or_none(scalar(attrs.get("final_metric"))),
        final_metric_raw=attrs.get("final_metric"),
        final_extra=attrs.get("final_metric_extra") or {},
        objective_values=list(t.values) if t.values is not None else None,
        intermediate_count=len(t.intermediate_values),
        message=attrs.get("message"),
    )
