"""A DAG run's life, from the core's side: start it, summarize it, cancel its trials. No Airflow.

trialflow.trial_lifecycle is one trial's life; this is the run around the trials. The start and end
operators, `trialflow run` and whatever stops an experiment call these and only turn their
outcomes into Airflow's words (a failed task, a log line), so the rules of an experiment (who
may drive it, what counts as its result, which trials a cancel reaches) live here, tested
without a scheduler.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trialflow.experiment import Continuation, Experiment, check_owner, continued_run
from trialflow.platforms.base import Connections, TrialStatus
from trialflow.retune import Retune, seed_from_previous
from trialflow.run_summary import (
    ExperimentSummary,
    FollowOn,
    best_trial,
    format_table,
    pareto_member,
    stopped_by,
    summary_trial,
)
from trialflow.run_windows import RunWindow
from trialflow.tuning.pareto import pareto_rows, with_values
from trialflow.tuning.results import TrialRow, best_row

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from trialflow.tuning.experiment_store import ExperimentStore


class RunHasNoTrials(Exception):
    """The end step of a run its start step gave no trials (it failed, or was skipped)."""


@dataclass(frozen=True)
class RunStart:
    """What the start step did: the run's trial window, and whether the experiment existed."""

    window: RunWindow
    resumed: bool
    #: ``scheduledRuns: retune``: what the experiment took over from the DAG's previous one.
    retune: Retune | None = None


def start_run(
    experiment: Experiment,
    store: ExperimentStore,
    dag_id: str,
    run_id: str,
    conf: dict[str, Any] | None,
    *,
    count: int | None = None,
    connections: Connections | None = None,
) -> RunStart:
    """Check the run may drive the experiment (ExperimentNotOwned if not: nothing is written),
    create or re-open it, give the run its trial indexes and deadline, and prepare each
    platform (stage code once)."""
    shared = experiment.config.scheduled_runs == "continue"
    check_owner(store, experiment.experiment_id, dag_id, conf, run_id, shared)
    resumed = store.experiment_exists(experiment.experiment_id)
    experiment.open(store)
    store.set_experiment_attrs(
        experiment.experiment_id, {**experiment.description(), "dag_id": dag_id, "run_id": run_id}
    )
    window = experiment.start_run(store, run_id, continues=continued_run(conf), count=count)
    retune = seed_from_previous(store, experiment, dag_id) if experiment.config.scheduled_runs == "retune" else None
    for i in range(len(experiment.config.training_service)):
        experiment.platform(i, connections).prepare_sync(experiment.experiment_id)
    return RunStart(window, resumed, retune)


@dataclass
class RunSummary:
    """The end step's verdict on one run: its trials, its best, the experiment's best, and
    whether the step succeeds (``failure`` None) or not (``failure`` says why)."""

    summary: ExperimentSummary
    rows: list[TrialRow]
    best: TrialRow | None
    failure: str | None = None
    notes: list[str] = field(default_factory=list)
    #: Several objectives: the trial indexes of the Pareto set (marked in the table).
    pareto_indexes: set[int] = field(default_factory=set)
    #: The follow-on run that carries the experiment on, or why none does.
    following: Continuation = field(default_factory=lambda: Continuation(None, {}, ""))

    @property
    def experiment_over(self) -> bool:
        """No follow-on run carries the experiment on: this run's end is the experiment's."""
        return self.following.run_id is None

    @property
    def table(self) -> str:
        marked = self.pareto_indexes or (
            {self.best.trial_index} if self.best and self.best.trial_index is not None else set()
        )
        return format_table(self.rows, marked)


def summarize_run(
    experiment: Experiment, store: ExperimentStore, run_id: str, conf: dict[str, Any] | None
) -> RunSummary:
    """The run's own trials (a run that continues a study reports its window, with the study's
    best beside), counts, best, the follow-on run an unbounded experiment needs, and the
    verdict: the step fails only when no trial of the run has a result, except for a follow-on
    run the experiment's deadline ended first (the best of the runs before stands)."""
    exists = store.experiment_exists(experiment.experiment_id)
    window = experiment.window(store, run_id) if exists else RunWindow()
    if not window.count:
        raise RunHasNoTrials(
            f"experiment {experiment.experiment_id}: this run has no trials (its start step did not give it any)"
        )
    all_rows = store.trial_rows(experiment.experiment_id)
    objectives = experiment.objectives
    several = bool(objectives)
    if objectives:
        all_rows = with_values(all_rows, objectives)
    rows = [r for r in all_rows if window.holds(r.trial_index or 0)]
    mode = experiment.config.optimize_mode
    pareto = pareto_rows(all_rows, objectives) if objectives else []
    if objectives:  # "best" is the Pareto set; its first member (by the first objective) stands for it
        best = next(iter(pareto_rows(rows, objectives)), None)
        study_best = next(iter(pareto), None)
    else:
        best = best_row(rows, mode)
        study_best = best_row(all_rows, mode)
    counts = Counter(r.status or "" for r in rows)
    following = experiment.continuation(store, run_id)
    summary = ExperimentSummary(
        experiment_id=experiment.experiment_id,
        experiment_name=experiment.config.experiment_name,
        optimize_mode=mode,
        status_counts=dict(counts),
        best=None if best is None else best_trial(best, several),
        study_best=None if study_best is None else best_trial(study_best, several),
        trials=[summary_trial(r, several) for r in rows],
        continuation=FollowOn(run_id=following.run_id, conf=following.conf, reason=following.reason),
        stopped=stopped_by(window.stopped),
    )
    if objectives:
        summary["objectives"] = objectives
        summary["pareto"] = [pareto_member(r) for r in pareto]
    indexes = {r.trial_index for r in pareto if r.trial_index is not None}
    result = RunSummary(summary, rows, best, pareto_indexes=indexes, following=following)
    if window.stopped:
        result.notes.append(
            f"Experiment {experiment.experiment_id} was stopped by {window.stopped.get('by') or '?'}: "
            f"{window.stopped.get('reason') or 'no reason given'}"
        )
    if best is None:
        if continued_run(conf) is not None and study_best is not None and window.expired():
            result.notes.append(f"No trial of this run succeeded ({dict(counts)}); the experiment's best stands")
        else:
            result.failure = (
                f"no trial of experiment {experiment.experiment_id} succeeded with a final result ({dict(counts)})"
            )
    return result


@dataclass(frozen=True)
class RunClosed:
    """What closing a run did, for the end step to say (and whether it should clean up)."""

    #: Asked-for trials that had not started when the experiment ended: dropped.
    dropped: int = 0
    #: A trialConcurrency a person changed went back to the config's for the DAG's next experiment.
    concurrency_reset: bool = False
    #: The experiment is over (no follow-on run needs its files): its platforms may be cleaned.
    may_clean_up: bool = False


def close_run(
    experiment: Experiment, store: ExperimentStore, dag_id: str, run_id: str, verdict: RunSummary
) -> RunClosed:
    """The end step's last writes: run ``run_id`` is over (steering acts on it no more); when no
    follow-on run carries the experiment on, the asked-for trials still waiting are dropped (and
    said so in its history) and a trialConcurrency a person changed goes back to the config's."""
    from trialflow.steering import drop_waiting
    from trialflow.tuning.concurrency_changes import clear

    experiment.end_run(store, run_id)
    if not verdict.experiment_over:
        return RunClosed()  # the next run's trial indexes take the waiting trials, its files are needed
    dropped = drop_waiting(store, experiment.experiment_id)
    reset = clear(store.engine, dag_id, experiment.experiment_id)
    return RunClosed(dropped, reset, may_clean_up=True)


def stop_run(store: ExperimentStore, experiment_id: str, dag_id: str | None, run_id: str, by: str, reason: str) -> None:
    """A whole DAG run stopped (Airflow's mark failed on the run): it is marked in the store (no
    trial of it starts, the others are asked to stop, its history line written with the mark),
    and the experiment will not go on, so a trialConcurrency a person changed goes back to the
    config's for the DAG's next one. Every trial task of the run may call this: it marks once."""
    from trialflow import steering
    from trialflow.tuning.concurrency_changes import clear

    if dag_id:
        clear(store.engine, dag_id, experiment_id)
    try:
        steering.stop_runs(store, experiment_id, by, reason, [run_id], "stop run")
    except steering.ActionRefused as exc:  # a run without a window has nothing more to stop
        log.info("%s", exc)


def cancel_trials(
    experiment: Experiment,
    store: ExperimentStore,
    reason: str,
    connections: Connections | None = None,
    status: TrialStatus = TrialStatus.USER_CANCELED,
) -> int:
    """Stop every trial of the experiment still running, on its own platform, and close it in
    the store as ``status`` with ``reason`` (a trial that ended meanwhile keeps its outcome).
    Returns how many were stopped."""
    if not store.experiment_exists(experiment.experiment_id):
        return 0
    cancelled = 0
    for trial in store.active_trials(experiment.experiment_id):
        if trial.handle:
            platform = experiment.platform(int(trial.service_index or 0), connections)
            platform.cancel_sync(trial.handle, status, reason)
            store.finish(trial.storage_id, status, trial.final, reason)
            cancelled += 1
    return cancelled
