"""Trial functions for the digits examples (dags/digits_pipeline.py, dags/digits_two_models.py).

A function trial takes the trial's parameters and returns its final result; it may report
intermediate results through trialflow's trial SDK (or ``nni``). trialflow imports it by path
from this folder (``trialFunction: models:svc``) in the trial's own process, never pickled. A
keyword argument its signature names (``data``) takes the run's input of that name, when the
experiment has one (``inputs={"data": prepare()}``).
"""

from __future__ import annotations

import trialflow.trial as trial


def load(data: str | None = None) -> tuple:
    """The arrays a prepare step wrote at ``data`` (scikit-learn's digits without one)."""
    if data:
        import numpy as np

        with np.load(data) as arrays:
            return arrays["X"], arrays["y"]
    from sklearn.datasets import load_digits

    return load_digits(return_X_y=True)


def _cross_validated(model, data: str | None) -> float:
    from sklearn.model_selection import cross_val_score

    X, y = load(data)
    scores: list[float] = []
    for score in cross_val_score(model, X, y, cv=3):
        scores.append(float(score))
        trial.report_intermediate_result(sum(scores) / len(scores))
    return sum(scores) / len(scores)


def svc(params: dict, data: str | None = None) -> float:
    """Mean 3-fold accuracy of an SVC with these parameters."""
    from sklearn.svm import SVC

    return _cross_validated(SVC(C=params["C"], gamma=params["gamma"], kernel=params["kernel"]), data)


def forest(params: dict, data: str | None = None) -> float:
    """Mean 3-fold accuracy of a random forest with these parameters."""
    from sklearn.ensemble import RandomForestClassifier

    model = RandomForestClassifier(
        n_estimators=int(params["n_estimators"]), max_depth=int(params["max_depth"]), random_state=0
    )
    return _cross_validated(model, data)
