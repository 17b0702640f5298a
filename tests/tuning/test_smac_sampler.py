"""SMAC through SMAC3 (trialflow.tuning.smac_sampler): its initial design across asks, NNI's
config_dedup, running trials never handed out twice, and the tuner through the trial path."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.tuning.model_sampler import on_grid
from trialflow.tuning.smac_sampler import INITIAL_DESIGN, SmacSampler
from trialflow.tuning.tuners import make_sampler, sample_parameters

pytest.importorskip("smac")
DISTS = [FloatDistribution(0.0, 1.0), CategoricalDistribution(["a", "b", "c"])]


def _propose(x: np.ndarray, loss: np.ndarray, trial_seed: int, **kwargs) -> np.ndarray:
    sampler = SmacSampler(seed=trial_seed, model_seed=11, **kwargs)
    point = sampler.propose(x, loss, DISTS)
    assert point is not None
    return point


def test_the_initial_design_is_one_sequence_whatever_the_trial_s_seed():
    """Each ask builds SMAC anew: the experiment's seed makes its Sobol design the same, so the
    second ask gets the design's next point, not a fresh first one."""
    first = _propose(np.empty((0, 2)), np.empty(0), trial_seed=1)
    assert np.allclose(first, _propose(np.empty((0, 2)), np.empty(0), trial_seed=2))
    second = _propose(first.reshape(1, -1), np.array([1.0]), trial_seed=3)
    assert not np.allclose(on_grid(first, DISTS), on_grid(second, DISTS))


def test_running_trials_points_are_never_handed_out_again():
    first = _propose(np.empty((0, 2)), np.empty(0), trial_seed=1)
    sampler = SmacSampler(seed=1, model_seed=11)
    sampler.running = first.reshape(1, -1)  # a trial runs SMAC's first design point
    point = sampler.propose(np.empty((0, 2)), np.empty(0), DISTS)
    assert point is not None and not np.allclose(on_grid(point, DISTS), on_grid(first, DISTS))


@pytest.mark.slow
def test_config_dedup_never_asks_a_configuration_already_run():
    rng = np.random.RandomState(0)
    x = np.column_stack([rng.uniform(size=INITIAL_DESIGN + 4), rng.randint(0, 3, INITIAL_DESIGN + 4) / 2])
    loss = (x[:, 0] - 0.4) ** 2 + (x[:, 1] != 0.5)
    ran = {tuple(row) for row in on_grid(x, DISTS)}
    for trial_seed in range(3):
        point = _propose(x, loss, trial_seed, config_dedup=True)
        assert tuple(on_grid(point, DISTS)[0]) not in ran


@pytest.mark.slow
def test_smac_finds_a_quadratic_s_minimum_through_the_trial_path():
    space = parse_search_space(
        {"x": {"_type": "uniform", "_value": [-5, 5]}, "c": {"_type": "choice", "_value": [1, 2, 3]}}
    )
    algorithm = AlgorithmConfig(name="SMAC", class_args={"optimize_mode": "maximize", "seed": 2, "config_dedup": True})
    study = optuna.create_study(direction="maximize")
    for i in range(22):
        study.sampler = make_sampler(algorithm, space, i)
        trial = study.ask()
        p = sample_parameters(algorithm, space, trial, i)
        study.tell(trial, -((p["x"] - 1) ** 2) - (0 if p["c"] == 2 else 2))
    assert study.best_value > -0.5 and study.best_params["c"] == 2
    seen = [(t.params["x"], t.params["c"]) for t in study.trials]
    assert len(set(seen)) == len(seen)  # config_dedup
