"""A DAG run ends: its verdict (trials, best, whether the step fails), then its last writes. No Airflow.

The end step asks Airflow for the run's trial task states, then calls :func:`end_run`, which
refuses a run that is not its DAG's, reconciles the trials still running with their ended tasks
(trialflow.runs.reconcile), summarizes and closes the run; the step only logs what it returns
and turns a failure into Airflow's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trialflow.experiment import Experiment
from trialflow.experiment.run_windows import RunWindow, RunWindows
from trialflow.platforms.base import Connections
from trialflow.runs.continuation import Continuation, continuation, continued_run
from trialflow.runs.ownership import check_owner
from trialflow.runs.reconcile import Reconciled, finish_job_stops, reconcile_run
from trialflow.runs.summary import (
    ExperimentSummary,
    FollowOn,
    best_trial,
    format_table,
    pareto_member,
    stopped_by,
    summary_trial,
)
from trialflow.store.pareto import pareto_rows, with_values
from trialflow.store.results import TrialRow, best_row

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

log = logging.getLogger(__name__)


class RunHasNoTrials(Exception):
    """The end step of a run its start step gave no trials (it failed, or was skipped)."""


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
    following = continuation(experiment, store, run_id)
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
        elif window.stopped:
            result.failure = (
                f"experiment {experiment.experiment_id} was stopped by {window.stopped.get('by') or '?'} "
                f"({window.stopped.get('reason') or 'no reason given'}) before any trial succeeded with a final "
                f"result ({dict(counts)})"
            )
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
    from trialflow.store.concurrency_changes import clear, limits_key

    mark_ended(experiment, store, run_id)
    if not verdict.experiment_over:
        return RunClosed()  # the next run's trial indexes take the waiting trials, its files are needed
    dropped = drop_waiting(store, experiment.experiment_id)
    reset = clear(store.engine, limits_key(dag_id, experiment.group), experiment.experiment_id)
    return RunClosed(dropped, reset, may_clean_up=True)


def mark_ended(experiment: Experiment, store: ExperimentStore, run_id: str, now: float | None = None) -> None:
    """Mark run ``run_id`` over (its end step ran): the steering actions refuse an experiment
    whose runs are all over, on the pages and on the command line alike."""
    at = time.time() if now is None else now
    RunWindows(store, experiment.experiment_id).mark_ended(run_id, at)


@dataclass(frozen=True)
class RunEnded:
    """What the end step did: the trials it stopped (their tasks had ended), the verdict, and
    the run's last writes."""

    reconciled: list[Reconciled]
    verdict: RunSummary
    closed: RunClosed


def tell_custom_classes(experiment: Experiment, store: ExperimentStore) -> list[str]:
    """Tell the experiment's own tuner, advisor and assessor classes every result and end they
    have not heard (trialflow.tuning.custom.runner.tell): the last trials end after the last ask.
    A class that fails here fails no run (its trials have ended); what it said is a note."""
    from trialflow.tuning.custom.runner import CustomAlgorithmError, custom_classes, tell

    notes = []
    for custom in custom_classes(experiment.algorithm, experiment.config.assessor):
        try:
            if tell(store.view(experiment.experiment_id), custom, experiment.space):
                notes.append(f"{custom.label} ({custom.role}) was told the results and ends it had not heard")
        except CustomAlgorithmError as exc:
            notes.append(f"{custom.label} ({custom.role}) could not be told the last results: {exc}")
    return notes


async def end_run(
    experiment: Experiment,
    store: ExperimentStore,
    dag_id: str,
    run_id: str,
    conf: dict[str, Any] | None,
    task_states: Mapping[int, str | None],
    connections: Connections | None = None,
) -> RunEnded:
    """The end step, whole: refuse a run that is not its DAG's (ExperimentNotOwned, before
    anything is read), stop and close every trial still running whose task has ended (every
    trial task has ended by now: the step runs after all of them) and the asks that died before
    they claimed a trial index, then the verdict and the
    run's last writes (RunHasNoTrials when the start step gave the run none)."""
    if not store.experiment_exists(experiment.experiment_id):
        raise RunHasNoTrials(
            f"experiment {experiment.experiment_id} never started: its start step failed or was skipped "
            "(its log says why), so no trial ran"
        )
    check_owner(store, experiment.experiment_id, dag_id, conf, group=experiment.group)
    reconciled = await reconcile_run(experiment, store, run_id, task_states, run_over=True, connections=connections)
    # Stops left half done, at once (no stopper of this run is still at work: every task ended);
    # one done twice is a second call to an idempotent stop.
    reconciled += await finish_job_stops(experiment, store, time.time(), connections, grace=0.0)
    await asyncio.to_thread(store.close_abandoned_asks, experiment.experiment_id)
    told = await asyncio.to_thread(tell_custom_classes, experiment, store)
    verdict = summarize_run(experiment, store, run_id, conf)
    verdict.notes[:0] = told
    closed = close_run(experiment, store, dag_id, run_id, verdict)
    return RunEnded(reconciled, verdict, closed)
