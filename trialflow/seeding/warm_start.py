"""A new experiment that starts from an earlier one (the config's ``warmStart``). No Airflow.

NNI users carried knowledge from one experiment to the next with ``nnictl experiment import``:
the earlier results were fed to the new tuner. trialflow offers the two ways its retune rules
name (trialflow.config.model.WarmStartConfig):

* ``use: results`` trusts the numbers: every earlier counted trial becomes a prior trial of the
  new study (trialflow.store.prior_trials), which the tuner learns from as Optuna's own
  ``add_trials`` would make it learn, and which is no trial of this experiment;
* ``use: rerun`` trusts only the parameters: the earlier ``topK`` best sets are queued as the
  first trials and measured again (trialflow.seeding.retune.queue_best).

The earlier experiment is named by id from the config, so it is checked before anything is
written: it must exist and belong to the same DAG (an NNI experiment is attached to one when
it is imported), be another experiment, and measure the same objectives. The lineage is kept
both ways (``warm_started_from`` here, ``warm_started_by`` there) for the pages. Done once: a
retried start finds ``warm_started_from`` complete and does nothing again; a start that died
half-way adds the prior trials it had not (adding is idempotent per earlier trial).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trialflow.config.search_space import SearchSpaceError, encode
from trialflow.seeding.retune import queue_best, ranked_trials
from trialflow.store.pareto import OBJECTIVES_ATTR
from trialflow.store.prior_trials import PriorTrial
from trialflow.store.results import is_finite_number

if TYPE_CHECKING:
    from trialflow.config.model import WarmStartConfig
    from trialflow.experiment import Experiment
    from trialflow.store.experiment_store import ExperimentStore
    from trialflow.store.results import TrialRow
    from trialflow.tuning.tuners import RandomStart

#: The experiment attribute saying what it started from: {"experiment_id", "use", "learnt",
#: "queued", "dropped", "complete"}.
WARM_STARTED_FROM = "warm_started_from"
#: The earlier experiment's attribute listing the experiments that started from it.
WARM_STARTED_BY = "warm_started_by"
#: Who asked for the queued trials of ``use: rerun`` (the pages show it).
REQUESTER = "warm start"


class WarmStartError(ValueError):
    """The config's warmStart names an experiment this one may not start from (nothing was written)."""


@dataclass(frozen=True)
class WarmStart:
    """What the experiment took over: prior trials given to its tuner (``learnt``), or parameter
    sets queued to run first (``queued``); what did not fit the search space (``dropped``)."""

    experiment_id: str
    use: str
    learnt: int = 0
    queued: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    reason: str = ""


def check_source(store: ExperimentStore, experiment: Experiment, dag_id: str) -> WarmStartConfig | None:
    """The config's warmStart when this DAG's experiment may start from the experiment it
    names; WarmStartError saying why not (before anything is written)."""
    wanted = experiment.config.warm_start
    if wanted is None:
        return None
    source = wanted.experiment
    where = f"warmStart.experiment {source!r}"
    if source == experiment.experiment_id:
        raise WarmStartError(f"{where}: that is this experiment; name an earlier one")
    if not store.experiment_exists(source):
        raise WarmStartError(
            f"{where}: no such experiment in the store (`trialflow experiments` lists them; "
            f"an NNI experiment comes in with `trialflow import-nni PATH --dag {dag_id}`)"
        )
    owner = store.experiment_attr(source, "dag_id")
    if owner != dag_id:
        # An id from a config is checked against what this DAG may reach, as a run's conf is.
        raise WarmStartError(
            f"{where} belongs to another DAG, not {dag_id}: start from an experiment of this DAG "
            f"(import an NNI experiment with --dag {dag_id})"
        )
    theirs = store.experiment_attr(source, OBJECTIVES_ATTR)
    ours = [o.model_dump() for o in experiment.config.objectives] if experiment.config.objectives else None
    if _metrics(theirs) != _metrics(ours):
        raise WarmStartError(
            f"{where} measured {_said(theirs)}, this experiment measures {_said(ours)}: "
            "its results are no history for this tuner"
        )
    return wanted


def _metrics(objectives: Any) -> list[str] | None:
    return [str(o.get("metric")) for o in objectives] if isinstance(objectives, list) else None


def _said(objectives: Any) -> str:
    names = _metrics(objectives)
    return f"the objectives {', '.join(names)}" if names else "one metric"


def learning_said(start: RandomStart | None, tuner: str, results: int | None) -> str:
    """What earlier results do to a tuner with a random start-up phase, said plainly (measured:
    TPE warm-started from 10 results asked exactly what a cold start asked, value for value,
    since its 20 start-up trials were not over). ``results``: how many (None: not known yet,
    as for ``trialflow validate``). Empty for a tuner without such a phase."""
    if start is None or start.trials <= 0:
        return ""
    head = f"{tuner} draws its first {start.trials} trials at random ({start.argument})"
    if results is None:
        return (
            f"{head}; the earlier results count toward them, so with N of them it models from about "
            f"trial {start.trials} - N on, and with fewer than {start.trials} its first asks are a cold start's"
        )
    if results >= start.trials:
        return f"{head}; the {results} earlier results cover them, so it models from its first trial"
    return (
        f"{head}; the {results} earlier results count toward them, so it models from about trial "
        f"{start.trials - results} on, and its first {start.trials - results} asks are a cold start's"
    )


def warm_start(store: ExperimentStore, experiment: Experiment, dag_id: str) -> WarmStart | None:
    """Give the (open) experiment what its warmStart names, once; None without a warmStart."""
    wanted = check_source(store, experiment, dag_id)
    if wanted is None:
        return None
    experiment_id, source = experiment.experiment_id, wanted.experiment
    done = store.experiment_attr(experiment_id, WARM_STARTED_FROM)
    if isinstance(done, dict) and done.get("complete"):
        return WarmStart(
            source,
            wanted.use,
            int(done.get("learnt") or 0),
            list(done.get("queued") or []),
            list(done.get("dropped") or []),
            "already done",
        )
    if wanted.use == "results":
        priors, dropped = _priors(store, experiment, source)
        store.add_prior_trials(experiment_id, experiment.space, priors)
        started = WarmStart(
            source,
            "results",
            learnt=len(priors),
            dropped=dropped,
            reason=_given(experiment, len(priors), source),
        )
    else:
        k = wanted.top_k or experiment.config.top_k
        if experiment.config.max_trial_number:
            k = min(k, experiment.config.max_trial_number)
        queued, dropped = queue_best(
            store,
            experiment,
            source,
            k,
            REQUESTER,
            lambda row, old: f"runs again trial {row.trial_id} of experiment {source} ({old} there)",
        )
        started = WarmStart(
            source,
            "rerun",
            queued=queued,
            dropped=dropped,
            reason=f"the first {len(queued)} trials run experiment {source}'s best parameter sets again",
        )
    store.set_experiment_attrs(
        experiment_id,
        {
            WARM_STARTED_FROM: {
                "experiment_id": source,
                "use": started.use,
                "learnt": started.learnt,
                "queued": started.queued,
                "dropped": started.dropped,
                "complete": True,
            }
        },
    )
    store.update_experiment_attr(source, WARM_STARTED_BY, lambda later: _with(later, experiment_id))
    return started


def _with(later: Any, experiment_id: str) -> list[str]:
    known = [e for e in later if isinstance(e, str)] if isinstance(later, list) else []
    return known if experiment_id in known else [*known, experiment_id]


def _priors(store: ExperimentStore, experiment: Experiment, source: str) -> tuple[list[PriorTrial], list[str]]:
    """The earlier experiment's counted trials as prior trials of this one's space (each
    parameter set once, its better result); those outside the space are named instead."""
    objectives = [o.metric for o in experiment.config.objectives] if experiment.config.objectives else None
    priors: list[PriorTrial] = []
    dropped: list[str] = []
    for row in ranked_trials(store, source):
        values = _values(row, objectives)
        if values is None:
            continue
        try:
            encode(experiment.space, row.parameters or {})
        except SearchSpaceError as exc:
            dropped.append(f"trial {row.trial_id}: {exc}")
            continue
        priors.append(PriorTrial(source, str(row.trial_id), dict(row.parameters or {}), values))
    return priors, dropped


def _values(row: TrialRow, objectives: list[str] | None) -> list[float] | None:
    if objectives:
        got = row.values or {}
        values = [got.get(m) for m in objectives]
        return [float(v) for v in values if v is not None] if all(is_finite_number(v) for v in values) else None
    value = row.final_metric
    return [float(value)] if value is not None and is_finite_number(value) else None


def _given(experiment: Experiment, count: int, source: str) -> str:
    from trialflow.tuning.algorithms import canonical_tuner_name
    from trialflow.tuning.tuners import random_start

    said = f"the tuner was given {count} results of experiment {source} as its history"
    effect = learning_said(
        random_start(experiment.algorithm, experiment.space),
        experiment.algorithm.class_name or canonical_tuner_name(experiment.algorithm),
        count,
    )
    return f"{said}; {effect}" if effect else said
