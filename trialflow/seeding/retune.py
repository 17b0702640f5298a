"""Re-tuning on new data (``scheduledRuns: retune``): a new study that first re-evaluates the
previous experiment's best parameter sets. No Airflow.

When the data changes, ``new`` throws away what was learnt and ``continue`` trusts metrics
measured on data that is gone. ``retune`` keeps the knowledge and drops the numbers: the
previous experiment's top-k parameter sets are queued as this experiment's first trials (the
queue of asked-for trials, trialflow.store.trial_queue), so they are measured again on the new
data and the tuner learns from those fresh results, never from the old ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trialflow.experiment import Experiment
    from trialflow.store.experiment_store import ExperimentStore
    from trialflow.store.results import TrialRow

#: The experiment attribute naming what a re-tuning experiment took over (and from where).
RETUNED_FROM = "retuned_from"
#: The attribute of the earlier experiment listing the experiments that re-tuned it.
RETUNED_BY = "retuned_by"
#: Who asked for the queued trials (the pages show it beside a person's own).
REQUESTER = "retune"


@dataclass(frozen=True)
class Retune:
    """What a re-tuning experiment took over: the earlier experiment and the trials queued."""

    experiment_id: str | None
    queued: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    reason: str = ""


def ranked(rows: list[TrialRow], mode: str, objectives: list[dict[str, str]] | None = None) -> list[TrialRow]:
    """Succeeded trials with a final metric, best first (several objectives: front by front,
    as NSGA-II ranks); a parameter set tried twice counts once (its better result), so k
    distinct points come over."""
    from trialflow.store.pareto import fronts, with_values
    from trialflow.store.results import is_finite_number
    from trialflow.tuning.tuners import BUDGET_KEY

    if objectives:
        done = fronts(with_values([r for r in rows if r.counted], objectives), objectives)
    else:
        done = [r for r in rows if r.counted and is_finite_number(r.final_metric)]
        done.sort(key=lambda r: r.final_metric or 0.0, reverse=mode != "minimize")
    seen: set[str] = set()
    out = []
    for row in done:
        point = {k: v for k, v in (row.parameters or {}).items() if k != BUDGET_KEY}
        key = repr(sorted(point.items()))
        if key not in seen:
            seen.add(key)
            out.append(replace(row, parameters=point))
    return out


def previous_experiment(
    store: ExperimentStore, dag_id: str, experiment_id: str, group: str | None = None
) -> str | None:
    """The newest experiment of the same DAG (and task group) before this one that has a result."""
    from trialflow.experiment import GROUP_ATTR

    earlier = [
        e for e in store.experiments_with_attr("dag_id", dag_id) if store.experiment_attr(e, GROUP_ATTR) == group
    ]
    if experiment_id in earlier:
        earlier = earlier[: earlier.index(experiment_id)]
    for candidate in reversed(earlier):
        if ranked_trials(store, candidate):
            return candidate
    return None


def ranked_trials(store: ExperimentStore, experiment_id: str) -> list[TrialRow]:
    """The experiment's counted trials, best first, each parameter set once (``ranked``)."""
    from trialflow.store.pareto import OBJECTIVES_ATTR

    mode = store.experiment_attr(experiment_id, "optimize_mode") or "maximize"
    return ranked(store.trial_rows(experiment_id), mode, store.experiment_attr(experiment_id, OBJECTIVES_ATTR))


def seed_from_previous(store: ExperimentStore, experiment: Experiment, dag_id: str) -> Retune:
    """Queue the previous experiment's top-k parameter sets as this experiment's first trials,
    once: a retried or cleared start step finds the ``retuned_from`` attribute and queues
    nothing again. Sets that no longer fit the search space (it changed with the data) are
    left out and named."""
    experiment_id = experiment.experiment_id
    done = store.experiment_attr(experiment_id, RETUNED_FROM)
    if done is not None:
        return Retune(done.get("experiment_id"), done.get("queued", []), done.get("dropped", []), "already queued")
    previous = previous_experiment(store, dag_id, experiment_id, experiment.group)
    if previous is None:
        store.set_experiment_attrs(experiment_id, {RETUNED_FROM: {"experiment_id": None}})
        return Retune(None, reason=f"DAG {dag_id} has no earlier experiment with a result: the tuner starts fresh")
    queued, dropped = queue_best(
        store,
        experiment,
        previous,
        experiment.config.top_k,
        REQUESTER,
        lambda row, old: f"re-evaluates trial {row.trial_id} of experiment {previous} ({old} on the old data)",
    )
    store.set_experiment_attrs(
        experiment_id, {RETUNED_FROM: {"experiment_id": previous, "queued": queued, "dropped": dropped}}
    )
    later = list(store.experiment_attr(previous, RETUNED_BY) or [])
    if experiment_id not in later:
        store.set_experiment_attrs(previous, {RETUNED_BY: [*later, experiment_id]})
    reason = f"the first {len(queued)} trials re-evaluate experiment {previous}'s best parameter sets"
    return Retune(previous, queued, dropped, reason)


def queue_best(
    store: ExperimentStore,
    experiment: Experiment,
    source: str,
    k: int,
    requester: str,
    why: Callable[[TrialRow, str], str],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Queue ``source``'s ``k`` best parameter sets as ``experiment``'s next trials (each
    request says ``why(row, its old result)``); sets that do not fit the search space are
    left out and named. Returns (queued, dropped)."""
    from trialflow.config.search_space import SearchSpaceError, encode

    queued: list[dict[str, Any]] = []
    dropped: list[str] = []
    for row in ranked_trials(store, source):
        if len(queued) == k:
            break
        parameters = row.parameters or {}
        try:
            encode(experiment.space, parameters)
        except SearchSpaceError as exc:
            dropped.append(f"trial {row.trial_id}: {exc}")
            continue
        values = row.values
        old = ", ".join(f"{m} {v:.6g}" for m, v in values.items()) if values else f"{row.final_metric:.6g}"
        store.enqueue(
            experiment.experiment_id, parameters, {"by": requester, "reason": why(row, old), "at": time.time()}
        )
        queued.append({"trial_id": row.trial_id, "parameters": parameters, "metric": values or row.final_metric})
    return queued, dropped
