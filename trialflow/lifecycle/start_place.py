"""Where an experiment's trial tasks start when its author does not say ("auto"). No Airflow.

A trial task can start in a worker (a process per task: Airflow holds trialConcurrency) or in
the triggerer (no process: trialflow.triggers.trial_start; the store holds trialConcurrency).
The triggerer is cheaper for every trial, and most for short ones (bench/overhead.py: 0.96x
the hand-written DAG at (20,4,0), 1.56x from workers), but it is shared by every deferrable
task of the deployment, so "auto" keeps the worker where the triggerer would pay for one
experiment with everyone's latency or capacity:

* **a queue of its own** (``local_queue`` under a multi-host executor): local trials must start
  on the one host that serves the queue, and the triggerer may run anywhere;
* **an ask that fits a model in the asking process** (GP, SMAC, Metis, DNGO; an Optuna class
  named by its path, whose cost is not known here): seconds of the GIL per ask would stall
  every trigger of the triggerer, the deployment's sensors included. Custom classes ask in a
  process of their own (trialflow.tuning.custom): they stay light for the triggerer;
* **more trial tasks in a run than a quarter of the triggerer's capacity** (``[triggerer]
  capacity``, 1,000 by default): Airflow defers every such task of a run at once, and each
  waiting one holds a place of the capacity until its turn, which the deployment's other
  deferrable tasks would wait behind.

Everything else starts in the triggerer. The author's ``start_trials_in`` always wins.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Place = Literal["worker", "triggerer"]
AUTO = "auto"
#: The values of ``start_trials_in`` (trialflow.authoring.converter.ExperimentOptions).
START_PLACES = (AUTO, "worker", "triggerer")
#: "auto" starts in the triggerer only runs of at most this share of its capacity.
CAPACITY_SHARE = 4


class StartPlace(NamedTuple):
    """Where the trial tasks start, and the reason, as the DAG's doc says it."""

    place: Place
    why: str


def choose(
    requested: str,
    *,
    trial_tasks: int,
    queue: str | None,
    ask_fits_model: bool,
    algorithm: str | None,
    triggerer_capacity: int,
) -> StartPlace:
    """The place for ``requested`` (one of START_PLACES: "auto" decides by the rules above)."""
    if requested not in START_PLACES:
        raise ValueError(f"start_trials_in: expected one of {', '.join(START_PLACES)}, got {requested!r}")
    if requested == "worker":
        return StartPlace("worker", "start_trials_in='worker'")
    if requested == "triggerer":
        said = "start_trials_in='triggerer'"
        if trial_tasks >= triggerer_capacity:
            # Seen (bench/thousand.py, 1,000 at a capacity of 1,000): the run's watch got no
            # place until trials had ended, so nothing reconciled the run in the meantime.
            said += (
                f"; its {trial_tasks} trial tasks fill the triggerer's capacity ({triggerer_capacity}): the run's "
                "watch and other DAGs' deferred tasks wait for a place until trials end (raise [triggerer] capacity)"
            )
        return StartPlace("triggerer", said)
    if queue is not None:
        return StartPlace("worker", f"local trials start on the host that serves queue {queue!r}")
    if ask_fits_model:
        return StartPlace("worker", f"{algorithm or 'the tuner'} fits a model at each ask")
    share = max(1, triggerer_capacity // CAPACITY_SHARE)
    if trial_tasks > share:
        return StartPlace(
            "worker",
            f"{trial_tasks} trial tasks a run is more than a quarter of the triggerer's capacity "
            f"({triggerer_capacity}): each would hold a place of it while it waits",
        )
    return StartPlace("triggerer", "no worker process is needed to start a trial")
