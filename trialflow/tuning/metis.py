"""NNI's Metis tuner as an Optuna sampler: trialflow's implementation of the published algorithm
(Li et al., "Metis: Robustly Tuning Tail Latencies of Cloud Systems", USENIX ATC 2018), on
scikit-learn, with NNI's classArgs.

Each ask, past its ``cold_start_num`` random trials:

1. a Gaussian process (constant x Matern 1.5, as NNI's) is fit on the observed losses, repeated
   points aggregated by their median, and its **current optimum** is the point of lowest
   predicted mean;
2. candidates are gathered (none with ``no_candidates``): **exploration**, the point the model
   is least sure of; **exploitation**, from 12 observations on, the point most likely under a
   Gaussian mixture of the best 34 % of the points and least under one of the rest; and
   **re-sampling**, from 50 observations on (unless ``no_resampling``, NNI's default), each
   observation its leave-one-out prediction misses by more than 2.33 sigma (an outlier, run
   again up to 3 times, which is how Metis tells noise from signal);
3. each candidate is scored by its **information gain**: the model refit as if the candidate
   had returned its predicted mean +- 1.96 sigma, and how far that lowers the optimum;
4. **diversification**: when the current optimum was already run, or with probability
   ``exploration_probability``, the trial runs the best candidate (a random point without
   one); otherwise the current optimum.

Where it differs from NNI's, on purpose: the searches start from ``selection_num_starting_points``
random points and refine the best 5 with L-BFGS-B (NNI minimised from every starting point, a
suggestion of minutes at 600), and the information gain's what-if optima come from the starting
points alone; past 200 observations the model is fit on the best 100 and a draw of the rest
(NNI fit every point); exploration maximises the model's standard deviation (NNI: the
interval's width relative to the mean, which breaks down near a mean of 0); the mixtures are
compared by log-likelihood difference (NNI: the ratio of the two scores); the outliers' leave-one-
out predictions come from one fit in closed form (NNI refit once per point); the information
gain refits keep the fitted kernel. Parameters are modelled in the unit cube (log-scaled where
the distribution is); NNI's Metis took only numeric choices, randint, uniform and quniform.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from optuna.distributions import BaseDistribution

from trialflow.tuning.model_sampler import UnitCubeSampler, model_points, on_grid, seen

#: NNI's thresholds: observations before the mixture candidate and before re-sampling, the
#: outlier's z-score (98 %), how often one point is re-run, and the good batch's share.
EXPLOITATION_FROM = 12
RESAMPLING_FROM = 50
OUTLIER_Z = 2.33
MAX_RESAMPLING = 3
GOOD_SHARE = 0.34
#: Starting points refined by L-BFGS-B in each search (NNI: all of them).
REFINED = 5
#: Points the model is fit on at most (the best half and a draw of the rest: gp.model_points).
MODEL_POINTS = 200


@dataclass(frozen=True)
class Candidate:
    point: np.ndarray
    mean: float
    std: float
    reason: str


class MetisSampler(UnitCubeSampler):
    def __init__(
        self,
        *,
        seed: int | None = None,
        cold_start_num: int = 10,
        exploration_probability: float = 0.9,
        no_resampling: bool = True,
        no_candidates: bool = False,
        selection_num_starting_points: int = 600,
    ):
        super().__init__(seed=seed, cold_start=cold_start_num)
        self.exploration_probability = exploration_probability
        self.no_resampling, self.no_candidates = no_resampling, no_candidates
        self.starting_points = max(1, selection_num_starting_points)
        self.last_reason = ""

    def propose(self, x: np.ndarray, loss: np.ndarray, dists: list[BaseDistribution]) -> np.ndarray | None:
        keep = model_points(-loss, MODEL_POINTS, self._rng)
        x, loss = x[keep], loss[keep]
        points, y = aggregate(on_grid(x, dists), loss)
        scale = float(np.std(y)) or 1.0
        y = (y - float(np.mean(y))) / scale
        gp = fit(points, y, self._rng)
        current = self._lowest(gp, lambda mean, std: mean, points.shape[1], with_std=False)
        candidates = [] if self.no_candidates else self._candidates(gp, points, y, x, dists)
        best = self._most_informative(gp, points, y, current, candidates)
        if seen(current.point, x, dists) > 0 or self._rng.uniform() <= self.exploration_probability:
            if best is None:
                self.last_reason = "random"
                return cast(np.ndarray, self._rng.uniform(size=points.shape[1]))
            self.last_reason = best.reason
            return best.point
        self.last_reason = "optimum"
        return current.point

    def _candidates(
        self, gp: Any, points: np.ndarray, y: np.ndarray, x: np.ndarray, dists: list[BaseDistribution]
    ) -> list[Candidate]:
        found = []
        explore = self._lowest(gp, lambda mean, std: -std, points.shape[1], reason="exploration")
        if seen(explore.point, x, dists) == 0:
            found.append(explore)
        if len(x) >= EXPLOITATION_FROM:
            exploit = self._mixture_candidate(gp, points, y)
            if exploit is not None and seen(exploit.point, x, dists) == 0:
                found.append(exploit)
        if not self.no_resampling and len(points) >= RESAMPLING_FROM:
            for index, mean, std in outliers(gp, points, y):
                if seen(points[index], x, dists) < MAX_RESAMPLING:
                    found.append(Candidate(points[index], mean, std, "resampling"))
        return found

    def _lowest(
        self, gp: Any, objective: Any, dims: int, reason: str = "optimum", refined: int = REFINED, with_std: bool = True
    ) -> Candidate:
        """The point minimising ``objective(mean, std)`` of the model: the best of the random
        starting points, refined with L-BFGS-B from the best ``refined`` (``with_std``: the objective
        reads the standard deviation, which costs a solve per point)."""
        from scipy.optimize import minimize

        def score(points: np.ndarray) -> np.ndarray:
            if not with_std:
                return cast(np.ndarray, objective(gp.predict(points), None))
            mean, deviation = gp.predict(points, return_std=True)
            return cast(np.ndarray, objective(mean, deviation))

        starts = self._rng.uniform(size=(self.starting_points, dims))
        scores = score(starts)
        best, best_score = starts[int(np.argmin(scores))], float(np.min(scores))
        for start in starts[np.argsort(scores)[:refined]]:
            found = minimize(
                lambda p: float(score(p.reshape(1, -1))[0]), start, bounds=[(0.0, 1.0)] * dims, method="L-BFGS-B"
            )
            if found.success and float(found.fun) < best_score:
                best, best_score = np.clip(found.x, 0.0, 1.0), float(found.fun)
        mean, std = gp.predict(best.reshape(1, -1), return_std=True)
        return Candidate(best, float(mean[0]), float(std[0]), reason)

    def _mixture_candidate(self, gp: Any, points: np.ndarray, y: np.ndarray) -> Candidate | None:
        from sklearn.mixture import BayesianGaussianMixture

        order = np.argsort(y, kind="stable")
        good_size = int(len(points) * GOOD_SHARE)
        if good_size < 2 or len(points) - good_size < 2:
            return None
        good, bad = points[order[:good_size]], points[order[good_size:]]
        with warnings.catch_warnings():  # few points for many components: expected, said by sklearn
            warnings.simplefilter("ignore")
            models = [
                BayesianGaussianMixture(n_components=max(1, min(len(batch) - 1, 5)), random_state=self._rng).fit(batch)
                for batch in (good, bad)
            ]
        starts = self._rng.uniform(size=(self.starting_points, points.shape[1]))
        ratio = models[0].score_samples(starts) - models[1].score_samples(starts)
        best = starts[int(np.argmax(ratio))]
        mean, std = gp.predict(best.reshape(1, -1), return_std=True)
        return Candidate(best, float(mean[0]), float(std[0]), "exploitation")

    def _most_informative(
        self, gp: Any, points: np.ndarray, y: np.ndarray, current: Candidate, candidates: list[Candidate]
    ) -> Candidate | None:
        """The candidate whose result would lower the model's optimum most (NNI's information
        gain), or None when none would lower it."""
        from sklearn.base import clone

        best, gain = None, 0.0
        for candidate in candidates:
            lowest = np.inf
            for outcome in (candidate.mean + 1.96 * candidate.std, candidate.mean - 1.96 * candidate.std):
                what_if = clone(gp).set_params(kernel=gp.kernel_, optimizer=None)
                what_if.fit(np.vstack([points, candidate.point]), np.append(y, outcome))
                # the what-if optimum from the starting points alone: a refit per outcome is the cost
                optimum = self._lowest(what_if, lambda mean, std: mean, points.shape[1], refined=0, with_std=False)
                lowest = min(lowest, optimum.mean)
            if lowest - current.mean < gain:
                best, gain = candidate, lowest - current.mean
        return best


def aggregate(points: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Repeated points as one, with their losses' median (NNI's aggregation of re-samples)."""
    unique, inverse = np.unique(np.round(points, 12), axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    return unique, np.array([float(np.median(loss[inverse == i])) for i in range(len(unique))])


def fit(points: np.ndarray, y: np.ndarray, rng: np.random.RandomState) -> Any:
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern

    gp = GaussianProcessRegressor(
        kernel=ConstantKernel() * Matern(nu=1.5), alpha=1e-6, n_restarts_optimizer=3, random_state=rng
    )
    with warnings.catch_warnings():  # length scales at their bounds are expected on few points
        warnings.simplefilter("ignore")
        return gp.fit(points, y)


def outliers(gp: Any, points: np.ndarray, y: np.ndarray) -> list[tuple[int, float, float]]:
    """Observations their leave-one-out prediction misses by more than OUTLIER_Z sigma, as
    (index, predicted mean, sigma): in closed form from the fitted kernel, with
    ``K^-1 = inv(k(X, X) + alpha I)``, the prediction without point i is
    ``y_i - (K^-1 y)_i / K^-1_ii`` with variance ``1 / K^-1_ii``."""
    k = gp.kernel_(points) + gp.alpha * np.eye(len(points))
    inverse = np.linalg.pinv(k)
    diagonal = np.maximum(np.diag(inverse), 1e-12)
    means = y - (inverse @ y) / diagonal
    sigmas = np.sqrt(1.0 / diagonal)
    return [
        (int(i), float(means[i]), float(sigmas[i]))
        for i in range(len(points))
        if abs(y[i] - means[i]) > OUTLIER_Z * sigmas[i]
    ]
