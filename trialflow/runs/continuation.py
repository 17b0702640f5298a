"""Whether a finished run of an unbounded experiment goes on in another run of its DAG. No Airflow.

One DAG run holds a finite fan-out of trial tasks; an experiment without maxTrialNumber (or
one a person raised) goes on in follow-on runs of the same DAG, each named for the trial index
it starts at (so a retried end step never starts a second one) and continuing its
predecessor's maxExperimentDuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trialflow.experiment import Experiment, tuner_points, unbounded

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

#: The run conf key a follow-on run names the run it continues with.
CONTINUES_KEY = "continues"


def continuation_run_id(experiment_id: str, first_index: int) -> str:
    """The follow-on run that starts an unbounded experiment's trials at ``first_index``: one name
    per step, so a retried end of the run before it can never start a second one."""
    return f"trialflow__{experiment_id}__from_{first_index:06d}"


def next_run_id(experiment: Experiment, store: ExperimentStore, run_id: str) -> str:
    """The follow-on run that run ``run_id`` starts when its experiment goes on: the one the
    continue step triggers and `trialflow run` then follows (whether it was triggered is
    Airflow's to say)."""
    return continuation_run_id(experiment.experiment_id, experiment.window(store, run_id).end_index)


def continued_run(conf: dict[str, Any] | None) -> str | None:
    """The run a follow-on run continues (its conf's ``continues``, set by the continue step);
    a hand-written conf with something else there is refused by name, not a traceback."""
    value = (conf or {}).get(CONTINUES_KEY)
    if value is None or isinstance(value, str) and value:
        return value
    raise ValueError(
        f"dag run conf {CONTINUES_KEY}: expected the run id (text) of the run this one continues, got {value!r}"
    )


@dataclass(frozen=True)
class Continuation:
    """Whether (and why not) a finished run of an unbounded experiment goes on in another one."""

    run_id: str | None
    conf: dict[str, Any]
    reason: str


def continuation(experiment: Experiment, store: ExperimentStore, run_id: str, now: float | None = None) -> Continuation:
    """After run ``run_id`` ended: the follow-on run an unbounded experiment needs, or why none.

    Only an experiment without maxTrialNumber whose tuner never runs out goes on, and only
    while its maxExperimentDuration lasts (without one, until someone stops it: pause the
    DAG or mark the run failed, as ``nnictl stop`` would). The follow-on run's conf names
    this experiment and this run (whose deadline it keeps)."""
    window = experiment.window(store, run_id)
    next_index = window.first_index + window.count
    limit = experiment.max_trial_number(store)
    if limit is None and not unbounded(experiment.config):
        return Continuation(None, {}, "the experiment's trials are all in this run")
    if window.stopped:
        return Continuation(None, {}, f"the run was stopped ({window.stopped.get('reason')})")
    if limit is not None and next_index >= limit:
        return Continuation(None, {}, f"maxTrialNumber ({limit}) reached")
    points = tuner_points(experiment.config)
    if points is not None and next_index >= points:
        return Continuation(None, {}, f"the tuner's {points} points are all tried")
    if window.expired(now):
        return Continuation(None, {}, "maxExperimentDuration reached")
    if experiment.group is not None:
        # A follow-on run would run the whole DAG again, the author's own tasks with it.
        return Continuation(None, {}, f"task group {experiment.group}'s experiment runs within its DAG run only")
    conf = {"experiment_id": experiment.experiment_id, CONTINUES_KEY: run_id}
    why = f"maxTrialNumber raised to {limit}" if limit is not None else "no maxTrialNumber"
    return Continuation(
        continuation_run_id(experiment.experiment_id, next_index),
        conf,
        f"{why}: trials {next_index}.. go on in the next run",
    )
