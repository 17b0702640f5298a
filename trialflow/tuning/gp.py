"""NNI's GP tuner as an Optuna sampler: scikit-learn's Gaussian process, NNI's acquisition.

NNI's GPTuner is itself built on scikit-learn (a Matern-kernel
GaussianProcessRegressor, then EI / UCB / POI maximised by random warm-up
points and L-BFGS-B restarts); this keeps that model and those classArgs.
Optuna's own GPSampler would need PyTorch (gigabytes for one tuner) and has
none of NNI's knobs. Parameters are modelled in the unit cube: log-scaled
where the distribution is, choices by their index (as NNI does).

Differences, on purpose: the warm-up defaults to 10,000 points (NNI:
100,000), L-BFGS-B starts from at most 10 points (NNI: 250) and the kernel
optimiser restarts 3 times (NNI: 25), which keeps a suggestion at 1,000
finished trials at ~4 s (bench/tuners.py); early-stopped trials count with
their last intermediate result, as NNI reports them. Beyond MAX_MODEL_POINTS
finished trials the model sees the best half of that many and a random draw of
the others (NNI fit every point, which grows cubically: a GP ask at 1,000
trials took ~3.5 s here); where the optimum lies is decided by the best points,
and the draw keeps the model's picture of the rest of the space. A point whose
parameters a finished or running trial already has is never proposed again: the
acquisition's maximum often sits on a bound, and a second trial there would
train what is known; the best-scoring warm-up point not yet taken is proposed.

scikit-learn and SciPy are imported lazily: they are an optional extra.
"""

from __future__ import annotations

import warnings
from typing import cast

import numpy as np
from optuna.distributions import BaseDistribution

from trialflow.tuning.model_sampler import UnitCubeSampler, from_unit, grid_keys, model_points, to_unit

__all__ = ["GPSampler", "acquisition", "from_unit", "model_points", "to_unit"]

KERNEL_RESTARTS = 3
#: Points the model is fit on at most: the best half of them and, for the rest, others drawn at
#: random (a fit is cubic in points: 1,000 took ~3.5 s an ask, 300 take a tenth of it).
MAX_MODEL_POINTS = 300


def acquisition(utility: str, mean: np.ndarray, std: np.ndarray, y_max: float, kappa: float, xi: float) -> np.ndarray:
    """NNI's utility functions, for a model of the *maximised* objective."""
    from scipy.stats import norm

    if utility == "ucb":
        return mean + kappa * std
    std = np.maximum(std, 1e-9)
    z = (mean - y_max - xi) / std
    if utility == "poi":
        return cast(np.ndarray, norm.cdf(z))
    return cast(np.ndarray, (mean - y_max - xi) * norm.cdf(z) + std * norm.pdf(z))


class GPSampler(UnitCubeSampler):
    def __init__(
        self,
        *,
        seed: int | None = None,
        utility: str = "ei",
        kappa: float = 5.0,
        xi: float = 0.0,
        nu: float = 2.5,
        alpha: float = 1e-6,
        cold_start_num: int = 10,
        selection_num_warm_up: int = 10_000,
        selection_num_starting_points: int = 250,
    ):
        super().__init__(seed=seed, cold_start=cold_start_num)
        self.utility, self.kappa, self.xi, self.nu, self.alpha = utility, kappa, xi, nu, alpha
        self.cold_start_num = cold_start_num
        self.warm_up = selection_num_warm_up
        # L-BFGS-B from at most 10 of the best warm-up points (NNI: 250), to bound an ask's time.
        self.starting_points = min(selection_num_starting_points, 10)

    def propose(self, x: np.ndarray, loss: np.ndarray, dists: list[BaseDistribution]) -> np.ndarray | None:
        y = -loss  # maximise -loss
        keep = model_points(y, MAX_MODEL_POINTS, self._rng)
        taken = set(grid_keys(x, dists)) | set(grid_keys(self.running, dists))
        return self._maximise(x[keep], y[keep], taken, dists)

    def _maximise(
        self, x: np.ndarray, y: np.ndarray, taken: set[tuple[float, ...]], dists: list[BaseDistribution]
    ) -> np.ndarray | None:
        from scipy.optimize import minimize
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import Matern

        gp = GaussianProcessRegressor(
            kernel=Matern(nu=self.nu),
            alpha=self.alpha,
            normalize_y=True,
            n_restarts_optimizer=KERNEL_RESTARTS,
            random_state=self._rng,
        )
        with warnings.catch_warnings():  # length scales at their bounds are expected on few points
            warnings.simplefilter("ignore")
            gp.fit(x, y)
        y_max = float(y.max())

        def score(points: np.ndarray) -> np.ndarray:
            mean, std = gp.predict(points, return_std=True)
            return acquisition(self.utility, mean, std, y_max, self.kappa, self.xi)

        def new(point: np.ndarray) -> bool:
            return grid_keys(point, dists)[0] not in taken

        candidates = self._rng.uniform(size=(self.warm_up, x.shape[1]))
        scores = score(candidates)
        ranked = np.argsort(scores)[::-1]
        fresh = next((int(i) for i in ranked if new(candidates[i])), None)
        best, best_score = (candidates[fresh], float(scores[fresh])) if fresh is not None else (None, -np.inf)
        for start in candidates[ranked[: self.starting_points]]:
            found = minimize(
                lambda p: -score(p.reshape(1, -1))[0], start, bounds=[(0.0, 1.0)] * x.shape[1], method="L-BFGS-B"
            )
            point = np.clip(found.x, 0.0, 1.0)
            if found.success and -float(found.fun) > best_score and new(point):
                best, best_score = point, -float(found.fun)
        return best  # None: every warm-up point is taken (a tiny discrete space); the trial is drawn at random
