"""DNGO (trialflow.tuning.dngo): the network + Bayesian linear regression model, NNI's update
cadence, and the tuner through the trial path."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.tuning.dngo import Dngo, DNGOSampler, expected_improvement
from trialflow.tuning.tuners import make_sampler, sample_parameters

pytest.importorskip("scipy")


def _bowl(x: np.ndarray) -> np.ndarray:
    return (x[:, 0] - 0.6) ** 2 + (x[:, 1] - 0.3) ** 2


def test_the_model_learns_a_smooth_function_and_is_less_sure_far_from_its_data():
    rng = np.random.RandomState(0)
    x = rng.uniform(0.0, 0.5, size=(60, 2))  # the data cover a corner of the square only
    model = Dngo.fit(x, _bowl(x), 300, np.random.RandomState(0))
    inside = rng.uniform(0.0, 0.5, size=(200, 2))
    mean, _ = model.predict(inside)
    assert np.corrcoef(mean, _bowl(inside))[0, 1] > 0.95
    _, near = model.predict(np.array([[0.25, 0.25]]))
    _, far = model.predict(np.array([[1.0, 1.0]]))
    assert far[0] > near[0]


def test_expected_improvement_prefers_a_lower_mean_then_a_wider_doubt():
    ei = expected_improvement(np.array([1.0, 0.5, 1.0]), np.array([0.1, 0.1, 1.0]), best=0.8)
    assert ei[1] > ei[0] and ei[2] > ei[0] and (ei >= 0).all()


def test_the_model_is_refit_at_every_ask_with_every_result(monkeypatch):
    """Not NNI's cadence (a refit every trials_per_update results): each ask fits on every result
    so far, and the same results give the same proposal (one network for the same data)."""
    rng = np.random.RandomState(2)
    x = rng.uniform(size=(40, 2))
    loss = _bowl(x)
    dists = [FloatDistribution(0.0, 1.0)] * 2
    fitted: list[int] = []
    fit = Dngo.fit.__func__  # type: ignore[attr-defined]

    def counting(cls, points, losses, epochs, generator):
        fitted.append(len(points))
        return fit(cls, points, losses, epochs, generator)

    monkeypatch.setattr(Dngo, "fit", classmethod(counting))

    def proposal(count: int) -> np.ndarray:
        sampler = DNGOSampler(seed=5, model_seed=1, trials_per_update=10, num_epochs_per_training=50, sample_size=200)
        point = sampler.propose(x[:count], loss[:count], dists)
        assert point is not None
        return point

    assert np.allclose(proposal(21), proposal(21))
    proposal(22)
    assert fitted == [21, 21, 22]


def _best(name: str, seed: int, trials: int = 30) -> float:
    unit = {"_type": "uniform", "_value": [0, 1]}
    space = parse_search_space({"x": unit, "y": unit})
    extra = {"trials_per_update": 10, "num_epochs_per_training": 200} if name == "DNGO" else {}
    algorithm = AlgorithmConfig(name=name, class_args={"optimize_mode": "minimize", "seed": seed, **extra})
    study = optuna.create_study(direction="minimize")
    for i in range(trials):
        study.sampler = make_sampler(algorithm, space, i)
        trial = study.ask()
        p = sample_parameters(algorithm, space, trial, i)
        study.tell(trial, float(_bowl(np.array([[p["x"], p["y"]]]))[0]))
    return float(study.best_value)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 2])
def test_dngo_beats_random_with_the_same_seed_through_the_trial_path(seed):
    assert _best("DNGO", seed) < _best("Random", seed)
