"""What NNI's model-based tuners share here: a sampler that fits a model of the finished trials
in the unit cube and picks the next point from it (GP, Metis, DNGO).

NNI's tuners each kept their observations in memory in one dispatcher process; here every ask
builds its sampler anew (tuning/tuners.py), so the observations are read from the study each
time: the finished trials (an early-stopped one with its last intermediate result, as NNI
reported it) over the parameters every trial has. Parameters are coordinates in [0, 1]:
log-scaled where the distribution is, choices by their index (as NNI's GP and Metis do).
Before ``cold_start`` observations, and for any parameter outside the modelled space, the
sampler draws at random.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.search_space import IntersectionSearchSpace
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from trialflow.tuning.anneal import observed_loss


def to_unit(value: Any, dist: BaseDistribution) -> float:
    """A parameter value as a coordinate in [0, 1]."""
    if isinstance(dist, CategoricalDistribution):
        return dist.choices.index(value) / max(1, len(dist.choices) - 1)
    low, high = float(dist.low), float(dist.high)  # type: ignore[attr-defined]
    if high == low:
        return 0.0
    if getattr(dist, "log", False):
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (float(value) - low) / (high - low)


def from_unit(x: float, dist: BaseDistribution) -> Any:
    """The parameter value at coordinate ``x`` (clipped to [0, 1]); ints and choices are rounded."""
    x = min(max(float(x), 0.0), 1.0)
    if isinstance(dist, CategoricalDistribution):
        return dist.choices[int(round(x * (len(dist.choices) - 1)))]
    low, high = float(dist.low), float(dist.high)  # type: ignore[attr-defined]
    value = (
        math.exp(math.log(low) + x * (math.log(high) - math.log(low)))
        if getattr(dist, "log", False)
        else low + x * (high - low)
    )
    if isinstance(dist, IntDistribution):
        return int(min(max(round(value), dist.low), dist.high))
    return float(min(max(value, low), high))


def model_points(y: np.ndarray, limit: int, rng: np.random.RandomState) -> np.ndarray:
    """Indexes of the points to fit on: all of them up to ``limit``; beyond, the best
    ``limit // 2`` (highest ``y``) and a uniform draw of the others for the rest."""
    if len(y) <= limit:
        return np.arange(len(y))
    order = np.argsort(-y, kind="stable")
    best, rest = order[: limit // 2], order[limit // 2 :]
    drawn = rng.choice(rest, size=limit - len(best), replace=False)
    return np.sort(np.concatenate([best, drawn]))


class UnitCubeSampler(BaseSampler):
    """A model-based sampler's frame: subclasses implement :meth:`propose` over the observed
    points (``x`` in the unit cube, ``loss``: lower is better) and return the next point."""

    def __init__(self, *, seed: int | None = None, cold_start: int = 10):
        self._rng = np.random.RandomState(seed)
        self._random = RandomSampler(seed=seed)
        self._space = IntersectionSearchSpace()
        self.cold_start = cold_start
        #: The running trials' points (unit cube), for a sampler that must not hand one out twice.
        self.running = np.empty((0, 0))

    def reseed_rng(self) -> None:
        self._rng = np.random.RandomState()
        self._random.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        space = self._space.calculate(study)
        return {name: dist for name, dist in space.items() if not dist.single()}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        names = sorted(search_space)
        observed = [
            (t, loss)
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
            if (loss := observed_loss(t, study.direction)) is not None and all(name in t.params for name in names)
        ]
        if len(observed) < max(1, self.cold_start):
            return {}
        x = np.array([[to_unit(t.params[n], search_space[n]) for n in names] for t, _ in observed])
        self.running = np.array(
            [
                [to_unit(t.params[n], search_space[n]) for n in names]
                for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if t.number != trial.number and all(name in t.params for name in names)
            ]
        )
        losses = np.array([value for _, value in observed])
        point = self.propose(x, losses, [search_space[n] for n in names])
        if point is None:
            return {}
        return {n: from_unit(v, search_space[n]) for n, v in zip(names, point)}

    def propose(self, x: np.ndarray, loss: np.ndarray, dists: list[BaseDistribution]) -> np.ndarray | None:
        """The next point in the unit cube, or None to draw this trial at random."""
        raise NotImplementedError

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)


def on_grid(points: np.ndarray, dists: list[BaseDistribution]) -> np.ndarray:
    """Points as the parameters they become (rounded to each choice, integer and step), back in
    the unit cube: two proposals that run the same parameters compare equal."""
    return np.array([[to_unit(from_unit(v, d), d) for v, d in zip(row, dists)] for row in np.atleast_2d(points)])


def grid_keys(points: np.ndarray, dists: list[BaseDistribution]) -> list[tuple[float, ...]]:
    """Points as the parameters they run, hashable (``on_grid``, rounded to 1e-9: a log scale's
    round trip through the parameters moves an ulp), so a sampler looks a proposal up in the
    set of points finished and running trials have taken."""
    if len(points) == 0:
        return []
    return [tuple(row) for row in np.round(on_grid(points, dists), 9)]


def seen(point: np.ndarray, x: np.ndarray, dists: list[BaseDistribution]) -> int:
    """How many observed points run the same parameters as ``point``, within 1e-9: a tolerance,
    not ``grid_keys``' rounding, because Metis' continuous optimum lands within 1e-9 of an
    observed point on either side of a rounding boundary (tests/tuning/test_metis.py's
    optimum-already-run case fails with the rounded keys)."""
    if len(x) == 0:
        return 0
    mine = on_grid(point, dists)[0]
    return int(np.sum(np.all(np.isclose(on_grid(x, dists), mine, atol=1e-9), axis=1)))
