"""The asker: the experiment's tuner and assessor, driven over the store.

Optuna's own line: a Study drives a sampler over a storage that only persists. Here
:func:`ask` builds the trial's sampler (seeded by its index) and an Optuna Study over the store's
reading cache, draws the trial's parameters, and hands them to the store, which claims the trial
index in one transaction (``ExperimentStore.claim_index``); :func:`judge` asks the assessor about
a running trial's stored results. Neither writes a row itself, and the store never builds a
sampler.

A Study of its own per ask: the sampler is per trial (seeded by index), and callers may ask
from many threads (the triggerer follows many trials in one process).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import optuna

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import SearchSpace
from trialflow.trial.status import TrialStatus
from trialflow.tuning.assessors import CustomAssessorPruner, Judgment
from trialflow.tuning.assessors import judge as judge_steps
from trialflow.tuning.custom.runner import CustomAlgorithmError, assess
from trialflow.tuning.history import asking_storage
from trialflow.tuning.parameter_sources import NewTrial, replaying, source_for
from trialflow.tuning.pbt import (
    UNASKED_ATTR,
    PbtArgs,
    previous_generation,
    unasked_of,
)
from trialflow.tuning.space_versions import VERSION_ATTR, SpaceView
from trialflow.tuning.tuners import BUDGET_KEY

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from optuna.pruners import BasePruner

    from trialflow.store.experiment_store import ExperimentStore, TrialRecord


@dataclass(frozen=True)
class AskedTrial:
    """A trial's identity and parameters, as the tuner gave them (``resumed``: it had them
    already: a retry or a resumed run re-attaches), and the trial as the store holds it now."""

    number: int
    storage_id: int
    parameters: dict[str, Any]
    resumed: bool
    record: TrialRecord

    @classmethod
    def resumed_from(cls, record: TrialRecord) -> AskedTrial:
        """The trial already asked at its index, as a retry re-attaches to it."""
        return cls(record.number, record.storage_id, record.parameters, True, record)


def ask(
    store: ExperimentStore,
    experiment_id: str,
    trial_index: int,
    trial_id: str,
    tuner: AlgorithmConfig,
    space: SearchSpace,
    pruner: BasePruner | None = None,
    population_floor: int | None = None,
    space_version: int = 0,
) -> AskedTrial:
    """Parameters for trial ``trial_index``: the ones it already has (a retry or a resumed
    run re-attaches), or new ones from the tuner, which has seen every earlier result
    (:func:`ask_new`). A trial's start reads what this reads with the rest of its experiment
    (trialflow.lifecycle.start_state) and calls :func:`ask_new` itself."""
    existing = store.find_trial(experiment_id, trial_index)
    if existing is not None:
        return AskedTrial.resumed_from(existing)
    new = NewTrial(experiment_id, trial_index, trial_id, tuner, space, population_floor, space_version)
    if new.population_based:
        before = previous_generation(trial_index, PbtArgs.from_class_args(tuner.class_args).population_size)
        found = store.find_trials(experiment_id, before)
        unasked = unasked_of(store.experiment_attr(experiment_id, UNASKED_ATTR))
        new = replace(new, unasked=unasked, generation={i: found.get(i) for i in before})
    return ask_new(store, new, pruner)


def ask_new(store: ExperimentStore, new: NewTrial, pruner: BasePruner | None = None) -> AskedTrial:
    """New parameters for trial ``new.trial_index``, which has none yet, from the tuner.

    Population Based Training (trialflow.tuning.pbt): with ``new.population_floor`` (the first
    trial index of the asking run: an earlier index without a trial belongs to a run that
    ended, and is not waited for), a trial of a later generation raises PopulationNotReady
    until every trial of ``new.generation`` (the generation before, as the caller read it: a
    trial's start with its experiment, :func:`ask` on its own) has ended or is in
    ``new.unasked`` (its task ended without asking), then gets the member's plan. Where the
    parameters come from is the tuner's ParameterSource (trialflow.tuning.parameter_sources);
    this drives it as Optuna's Study drives a sampler.

    Optuna creates the trial (one commit); the store then writes its parameters, trialflow's
    attributes and the claim of the index as one transaction, and a claim that loses to a twin
    ask leaves nothing of it behind (the twin's trial stands)."""
    experiment_id, trial_index, space, space_version = new.experiment_id, new.trial_index, new.space, new.space_version
    source = source_for(store, new)
    source.ready()  # before a person's queued trial is claimed for this index
    study_id = store.study_id(experiment_id)
    queued, fixed = store.asked_for(study_id, trial_index, space)
    fixed = source.fixed(fixed)
    lineage = source.lineage()
    storage: Any = asking_storage(store.sampling_storage, store.storage, study_id, source.name)
    if space_version > 0:  # a changed space: earlier trials reach the tuner only where they fit
        storage = SpaceView(storage, space, space_version)
    sampler = replaying(source.sampler(), fixed)
    asking = optuna.Study(study_name=experiment_id, storage=storage, sampler=sampler, pruner=pruner)
    with store.storage.holding_params() as params:
        trial = asking.ask()
        parameters = source.parameters(trial)
    attrs: dict[str, Any] = {
        "trial_index": trial_index,
        "trial_id": new.trial_id,
        "parameters": parameters,
        "nni_status": TrialStatus.WAITING.value,
    }
    if space_version > 0:
        attrs[VERSION_ATTR] = space_version
    if lineage is not None:
        attrs["pbt"] = lineage.to_attr()
    if queued is not None and fixed is not None:
        budget = parameters.get(BUDGET_KEY)
        attrs["parameters"] = {**queued.parameters, **({BUDGET_KEY: budget} if budget else {})}
        attrs["asked_by"] = queued.request
    record, lost = store.claim_index(study_id, trial_index, trial, params, attrs, queued)
    return AskedTrial(record.number, record.storage_id, record.parameters, lost, record)


def judge(
    store: ExperimentStore, experiment_id: str, storage_id: int, pruner: BasePruner, after: int | None = None
) -> Judgment:
    """The assessor's verdict on a running trial's results stored after step ``after``, each
    step judged as it arrived (trialflow.tuning.assessors.judge)."""
    frozen = store.storage.get_trial(storage_id)
    if frozen.state.is_finished() or not frozen.intermediate_values:
        return Judgment(None, after)
    if isinstance(pruner, CustomAssessorPruner):
        steps = sorted(frozen.intermediate_values.items())
        if after is not None and steps[-1][0] <= after:
            return Judgment(None, after)
        trial_id = str(frozen.user_attrs.get("trial_id", storage_id))
        try:
            stop = assess(store.view(experiment_id), pruner.custom, None, trial_id, steps, after)
        except CustomAlgorithmError as exc:  # an assessor that fails stops nothing: the trial runs on
            log.warning("trial %s is not judged: %s", trial_id, exc)
            return Judgment(None, after)
        return Judgment(stop, steps[-1][0] if stop is None else stop)
    study = optuna.load_study(study_name=experiment_id, storage=store.sampling_storage, pruner=pruner)
    return judge_steps(pruner, study, frozen, after, lambda: store.storage.get_trial(storage_id).system_attrs)


def should_stop(store: ExperimentStore, experiment_id: str, storage_id: int, pruner: BasePruner) -> bool:
    """Whether the assessor stops a running trial at any of the steps stored so far."""
    return judge(store, experiment_id, storage_id, pruner).stop_at is not None
