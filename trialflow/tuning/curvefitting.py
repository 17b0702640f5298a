"""NNI's Curvefitting assessor, approximated: extrapolate the learning curve, compare to the best.

NNI fits an ensemble of 12 learning-curve families by MCMC (Domhan et al.,
IJCAI 2015) and stops a trial whose predicted value at ``epoch_num`` is worse
than ``threshold`` times the best final result so far. No maintained library
implements that ensemble, so this is an honest approximation: five of the
families (linear, pow3, log-linear, exp3, vapour pressure) are fitted by least
squares (SciPy), and their forecasts are averaged with weights 1 / (residual +
a small floor), so the family that explains the curve best dominates (NNI's
MCMC weights play that part). The decision rule, start_step, gap and
threshold are NNI's.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import cast

import numpy as np
from optuna.pruners import BasePruner
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState


def _linear(x: np.ndarray, a: float, b: float) -> np.ndarray:
    return a * x + b


def _pow3(x: np.ndarray, c: float, a: float, alpha: float) -> np.ndarray:
    return cast(np.ndarray, c - a * np.power(x, -alpha))


def _log_linear(x: np.ndarray, a: float, b: float) -> np.ndarray:
    return cast(np.ndarray, a * np.log(x) + b)


def _exp3(x: np.ndarray, c: float, a: float, b: float) -> np.ndarray:
    return cast(np.ndarray, c - np.exp(-a * x + b))


def _vapour_pressure(x: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    return cast(np.ndarray, np.exp(a + b / x + c * np.log(x)))


#: (curve, initial guess from the observed values) per family.
FAMILIES: dict[str, tuple[Callable[..., np.ndarray], Callable[[np.ndarray], list[float]]]] = {
    "linear": (_linear, lambda y: [float(y[-1] - y[0]) / max(len(y) - 1, 1), float(y[0])]),
    "pow3": (_pow3, lambda y: [float(y[-1]), float(y[-1] - y[0]) or 1.0, 0.5]),
    "log_linear": (_log_linear, lambda y: [float(y[-1] - y[0]) or 1.0, float(y[0])]),
    "exp3": (_exp3, lambda y: [float(y[-1]), 0.5, 0.0]),
    "vapour_pressure": (_vapour_pressure, lambda y: [float(np.log(abs(y[-1]) + 1e-9)), -0.5, 0.0]),
}


def predict_final(values: Sequence[float], epoch_num: int) -> float | None:
    """The forecast at epoch ``epoch_num`` of a curve observed at epochs 1..len(values), or None
    when no family fits (NNI then lets the trial go on)."""
    from scipy.optimize import curve_fit

    y = np.asarray(values, dtype=float)
    x = np.arange(1, len(y) + 1, dtype=float)
    if not np.all(np.isfinite(y)):
        return None
    spread = float(np.ptp(y)) or abs(float(y[-1])) or 1.0
    forecasts, weights = [], []
    for curve, guess in FAMILIES.values():
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                params, _ = curve_fit(curve, x, y, p0=guess(y), maxfev=2000)
                value = float(curve(np.array([float(epoch_num)]), *params)[0])
                residual = float(np.mean((curve(x, *params) - y) ** 2))
        except (RuntimeError, ValueError, TypeError, OverflowError):
            continue
        # A fit that runs off to a value far outside what the curve has shown is no forecast.
        if math.isfinite(value) and math.isfinite(residual) and y.min() - 10 * spread <= value <= y.max() + 10 * spread:
            forecasts.append(value)
            weights.append(1.0 / (residual + 1e-6 * spread * spread))
    return float(np.average(forecasts, weights=weights)) if forecasts else None


def worse_than_best(predicted: float, best: float, threshold: float, direction: StudyDirection) -> bool:
    """NNI's rule: maximise -> stop below threshold * best; minimise -> stop when best is below
    threshold * predicted."""
    if direction == StudyDirection.MAXIMIZE:
        return predicted < threshold * best
    return best < threshold * predicted


class CurveFittingPruner(BasePruner):
    def __init__(self, epoch_num: int = 20, start_step: int = 6, threshold: float = 0.95, gap: int = 1):
        self.epoch_num, self.start_step, self.threshold, self.gap = epoch_num, start_step, threshold, gap

    def prune(self, study: Study, trial: FrozenTrial) -> bool:
        steps = sorted(trial.intermediate_values)
        count = len(steps)
        if count < self.start_step or (count - self.start_step) % self.gap or count >= self.epoch_num:
            return False
        finals = [
            t.values[0]
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.values and math.isfinite(t.values[0])
        ]
        if not finals:
            return False
        best = max(finals) if study.direction == StudyDirection.MAXIMIZE else min(finals)
        predicted = predict_final([trial.intermediate_values[s] for s in steps], self.epoch_num)
        return predicted is not None and worse_than_best(predicted, best, self.threshold, study.direction)
