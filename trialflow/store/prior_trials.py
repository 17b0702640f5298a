"""Results of another experiment given to a tuner as history (a warm start). No Airflow.

NNI's ``nnictl experiment import`` fed earlier results to a tuner without making them trials of
the experiment; Optuna warm-starts a study with ``add_trials``. Here both at once: each earlier
result becomes a finished Optuna trial of the new experiment's study (so every tuner, its
history window and its random start-up count see it as Optuna's own ``add_trials`` would
make it), but it never gets a trial index, so it is no trial of the experiment: the pages, the
counts, the best, ``trialflow trials`` and maxTrialNumber see only the trials that ran here.

A prior trial carries ``PRIOR_ATTR`` (the experiment and trial it came from). Adding is
idempotent per source trial: a start step retried after a crash half-way adds the rest, never
a second copy.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from trialflow.config.search_space import SearchSpace, encode

#: The Optuna trial attribute marking a prior trial: {"experiment_id", "trial_id"}.
PRIOR_ATTR = "prior_of"


@dataclass(frozen=True)
class PriorTrial:
    """One earlier result: its parameters (a point of the new experiment's space), its value
    (or values, one per objective: what a tuner learns from a finished trial), and where it
    came from."""

    experiment_id: str
    trial_id: str
    parameters: dict[str, Any]
    values: list[float]

    @property
    def key(self) -> tuple[str, str]:
        return (self.experiment_id, self.trial_id)


def is_prior(trial: FrozenTrial) -> bool:
    return PRIOR_ATTR in trial.user_attrs


def prior_key(trial: FrozenTrial) -> tuple[str, str] | None:
    raw = trial.user_attrs.get(PRIOR_ATTR)
    if not isinstance(raw, dict):
        return None
    return (str(raw.get("experiment_id")), str(raw.get("trial_id")))


def template(space: SearchSpace, prior: PriorTrial) -> FrozenTrial:
    """The finished trial Optuna stores for ``prior``: its parameters drawn through the search
    space's own sampling (so the distributions, nested choices included, are exactly those a
    trial of the new experiment records), fixed to the prior's values."""
    fixed = encode(space, prior.parameters)  # SearchSpaceError when the point is not in the space
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.PartialFixedSampler(fixed, optuna.samplers.RandomSampler(seed=0))
    scratch = optuna.create_study(sampler=sampler)  # in memory: only the distributions are wanted
    space.sample(scratch.ask())
    drawn = scratch.trials[0]
    return optuna.trial.create_trial(
        state=TrialState.COMPLETE,
        params=drawn.params,
        distributions=drawn.distributions,
        values=list(prior.values),
        user_attrs={PRIOR_ATTR: {"experiment_id": prior.experiment_id, "trial_id": prior.trial_id}},
    )
