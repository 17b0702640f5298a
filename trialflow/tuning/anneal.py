"""NNI's Anneal tuner (hyperopt's ``anneal.suggest``) as an Optuna sampler.

No maintained library offers simulated-annealing search on an Optuna study,
and hyperopt's own implementation is tied to its ``Trials`` object, so the
rule is re-stated here. For each new trial it picks a good finished trial
(rank drawn from a geometric distribution with mean ``avg_best_idx``, so the
best is most likely) and samples each parameter around that trial's value,
in a window that shrinks as 1 / (1 + n * shrink_coef) with the number of
observations n. Categorical values keep the good trial's option with
probability 1 - shrink and fall back to the prior otherwise. Parameters the
good trial lacks (another branch of a nested choice) come from the prior.

Normal-family NNI parameters reach Optuna as uniform quantiles (see
search_space.py), so they anneal in quantile space, which is hyperopt's rule
applied to the quantile rather than to the value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState


def observed_loss(trial: FrozenTrial, direction: StudyDirection) -> float | None:
    """A finished trial's loss (lower is better): its value, or for an early-stopped trial its
    last intermediate result, which is what NNI hands its tuner when an assessor stops a trial."""
    if trial.state == TrialState.COMPLETE and trial.values:
        value = trial.values[0]
    elif trial.state == TrialState.PRUNED and trial.intermediate_values:
        value = trial.intermediate_values[max(trial.intermediate_values)]
    else:
        return None
    if value is None or not math.isfinite(value):
        return None
    return float(-value if direction == StudyDirection.MAXIMIZE else value)


def shrink_factor(observations: int, shrink_coef: float) -> float:
    return 1.0 / (1.0 + observations * shrink_coef)


def anneal_window(value: float, low: float, high: float, shrink: float) -> tuple[float, float]:
    """hyperopt's window: width shrink*(high-low) around ``value``, moved inside [low, high]."""
    half = 0.5 * (high - low) * shrink
    centre = min(max(value, low + half), high - half)
    return centre - half, centre + half


class AnnealSampler(BaseSampler):
    def __init__(self, *, seed: int | None = None, avg_best_idx: float = 2.0, shrink_coef: float = 0.1):
        self._rng = np.random.RandomState(seed)
        self._random = RandomSampler(seed=seed)
        self.avg_best_idx = avg_best_idx
        self.shrink_coef = shrink_coef
        self._good: dict[int, FrozenTrial | None] = {}

    def reseed_rng(self) -> None:
        self._rng = np.random.RandomState()
        self._random.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return {}

    def _finished(self, study: Study) -> list[tuple[float, FrozenTrial]]:
        scored = []
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            loss = observed_loss(t, study.direction)
            if loss is not None:
                scored.append((loss, t))
        return sorted(scored, key=lambda pair: pair[0])

    def _good_trial(
        self, study: Study, trial: FrozenTrial
    ) -> tuple[FrozenTrial | None, list[tuple[float, FrozenTrial]]]:
        finished = self._finished(study)
        if trial.number not in self._good:
            if not finished:
                self._good[trial.number] = None
            else:
                rank = int(self._rng.geometric(1.0 / self.avg_best_idx)) - 1
                self._good[trial.number] = finished[min(rank, len(finished) - 1)][1]
        return self._good[trial.number], finished

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        good, finished = self._good_trial(study, trial)
        if good is None or param_name not in good.params:
            return self._random.sample_independent(study, trial, param_name, param_distribution)
        observations = sum(1 for _, t in finished if param_name in t.params)
        shrink = shrink_factor(observations, self.shrink_coef)
        value = good.params[param_name]
        dist = param_distribution
        if isinstance(dist, CategoricalDistribution):
            if value in dist.choices and self._rng.uniform() >= shrink:
                return value
            return dist.choices[self._rng.randint(len(dist.choices))]
        if isinstance(dist, IntDistribution):
            if dist.log:
                low, high = anneal_window(math.log(value), math.log(dist.low), math.log(dist.high + 1), shrink)
                return int(min(max(math.floor(math.exp(self._rng.uniform(low, high))), dist.low), dist.high))
            # NNI's randint is a categorical in hyperopt: keep the good value or draw from the prior.
            if self._rng.uniform() >= shrink:
                return int(value)
            return int(self._rng.randint(dist.low, dist.high + 1))
        if isinstance(dist, FloatDistribution):
            if dist.log:
                low, high = anneal_window(math.log(value), math.log(dist.low), math.log(dist.high), shrink)
                return float(min(max(math.exp(self._rng.uniform(low, high)), dist.low), dist.high))
            low, high = anneal_window(float(value), dist.low, dist.high, shrink)
            return float(self._rng.uniform(low, high))
        return self._random.sample_independent(study, trial, param_name, param_distribution)
