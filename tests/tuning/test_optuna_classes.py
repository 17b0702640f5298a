"""Optuna samplers and pruners by class path (trialflow.tuning.optuna_classes): validate's words,
and the instances a trial's ask builds."""

from __future__ import annotations

import importlib.util

import optuna
import pytest

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.tuning.algorithms import canonical_tuner_name, check_algorithms
from trialflow.tuning.assessors import make_pruner
from trialflow.tuning.optuna_classes import MAX_PATH, is_class_path
from trialflow.tuning.tuners import make_sampler, sample_parameters

SPACE = parse_search_space({"x": {"_type": "uniform", "_value": [-3, 3]}, "y": {"_type": "uniform", "_value": [-3, 3]}})


def _problems(tuner: dict | None = None, assessor: dict | None = None) -> list[tuple[str, str]]:
    return check_algorithms(
        AlgorithmConfig(**tuner) if tuner else None, None, AlgorithmConfig(**assessor) if assessor else None, SPACE
    )


@pytest.mark.parametrize(
    "name, args",
    [
        ("optuna.samplers.QMCSampler", {"qmc_type": "halton", "seed": 3}),
        ("optuna.samplers.TPESampler", {"n_startup_trials": 4, "multivariate": True}),
        pytest.param(
            "optuna.samplers.CmaEsSampler",
            {"n_startup_trials": 3, "seed": 2},
            marks=pytest.mark.skipif(importlib.util.find_spec("cmaes") is None, reason="the cmaes package is absent"),
        ),
    ],
)
def test_an_optuna_sampler_by_its_path_validates_and_asks(name, args):
    assert _problems({"name": name, "class_args": {"optimize_mode": "minimize", **args}}) == []
    algorithm = AlgorithmConfig(name=name, class_args={"optimize_mode": "minimize", **args})
    assert canonical_tuner_name(algorithm) == name
    study = optuna.create_study(direction="minimize")
    for i in range(12):
        study.sampler = make_sampler(algorithm, SPACE, i)
        assert type(study.sampler).__name__ == name.rsplit(".", 1)[1]
        trial = study.ask()
        p = sample_parameters(algorithm, SPACE, trial, i)
        assert -3 <= p["x"] <= 3
        study.tell(trial, p["x"] ** 2 + p["y"] ** 2)
    assert len({t.params["x"] for t in study.trials}) == 12  # the seed advances per trial
    if name.endswith("CmaEsSampler"):  # past its startup trials, CMA-ES itself chose (its state kept per trial)
        assert any(key.startswith("cma:") for t in study.trials for key in t.system_attrs), study.trials[-1]


def test_a_seed_advances_by_the_trial_s_index():
    algorithm = AlgorithmConfig(name="optuna.samplers.RandomSampler", class_args={"seed": 5})
    draws = []
    for index in (0, 1, 0):
        study = optuna.create_study()
        study.sampler = make_sampler(algorithm, SPACE, index)
        draws.append(sample_parameters(algorithm, SPACE, study.ask(), index)["x"])
    assert draws[0] == draws[2] != draws[1]


def test_an_optuna_pruner_by_its_path_is_the_assessor(tmp_path):
    from trialflow.config import load_config

    config = tmp_path / "config.yml"
    config.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\ntrialConcurrency: 1\n"
        "tuner: {name: TPE}\nassessor: {name: optuna.pruners.PercentilePruner, classArgs: {percentile: 25.0}}\n"
        "trainingService: {platform: local}\n"
    )
    pruner = make_pruner(load_config(config))
    assert isinstance(pruner, optuna.pruners.PercentilePruner) and pruner._percentile == 25.0


@pytest.mark.parametrize(
    "tuner, key, words",
    [
        (
            {"name": "optuna.samplers.QMCSampler", "class_args": {"qmc": "sobol"}},
            "tuner.name",
            "QMCSampler: got an unexpected keyword argument 'qmc'; it takes qmc_type, scramble, seed",
        ),
        (
            {"name": "optuna.samplers.QMCSampler", "class_args": {"qmc_type": "fibonacci"}},
            "tuner.name",
            "'optuna.samplers.QMCSampler' cannot be made with these classArgs: ValueError",
        ),
        ({"name": "optuna.samplers.NoSuch"}, "tuner.name", "'optuna.samplers.NoSuch' is no class"),
        ({"name": "optuna.pruners.MedianPruner"}, "tuner.name", "not a subclass of optuna.samplers.BaseSampler"),
        ({"name": "os.path.join"}, "tuner.name", "'os.path.join' is function, not a subclass"),
        ({"name": "no_such_package.Sampler"}, "tuner.name", "module 'no_such_package' cannot be imported"),
        (
            {"name": "optuna.samplers.RandomSampler", "class_args": {"optimize_mode": "upward"}},
            "tuner.classArgs.optimize_mode",
            "expected maximize or minimize",
        ),
    ],
)
def test_what_is_wrong_with_a_class_path_is_named(tuner, key, words):
    problems = _problems(tuner)
    assert any(k == key and words in m for k, m in problems), problems


def test_only_a_bounded_dotted_name_is_a_class_path():
    assert is_class_path("optuna.samplers.GPSampler")
    assert not is_class_path("TPE") and not is_class_path("a..b") and not is_class_path("a.b; import os")
    assert not is_class_path("a." + "b" * MAX_PATH)
    assert not is_class_path(None)


@pytest.mark.parametrize(
    "name, package",
    [("optuna.samplers.CmaEsSampler", "'cmaes'"), ("optuna.samplers.GPSampler", "'torch'")],
)
def test_a_sampler_whose_package_is_missing_is_refused_by_validate_naming_it(monkeypatch, name, package):
    """Optuna imports CmaEsSampler's cmaes and GPSampler's torch only when they first sample,
    after their startup trials: without this check a config validated and its trials failed."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda module, *a: None if module in ("cmaes", "torch") else real(module, *a)
    )
    ((key, message),) = _problems({"name": name})
    assert key == "tuner.name" and f"{name!r} needs {package}" in message and "pip install" in message


def test_a_sampler_of_an_installed_package_not_optunas_is_named_by_its_path(tmp_path, monkeypatch):
    """An OptunaHub package or the user's own: any importable BaseSampler subclass, its own
    arguments checked against its signature."""
    (tmp_path / "hub_sampler.py").write_text(
        "import optuna\n\n"
        "class Corner(optuna.samplers.RandomSampler):\n"
        "    def __init__(self, corner=1.0, seed=None):\n"
        "        super().__init__(seed=seed)\n"
        "        self.corner = corner\n\n"
        "    def sample_independent(self, study, trial, name, distribution):\n"
        "        return self.corner\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    name = "hub_sampler.Corner"
    assert _problems({"name": name, "class_args": {"corner": 2.5, "seed": 1}}) == []
    ((key, message),) = _problems({"name": name, "class_args": {"edge": 2}})
    assert key == "tuner.name" and "unexpected keyword argument 'edge'; it takes corner, seed" in message
    algorithm = AlgorithmConfig(name=name, class_args={"corner": 2.5})
    study = optuna.create_study()
    study.sampler = make_sampler(algorithm, SPACE, 0)
    assert sample_parameters(algorithm, SPACE, study.ask(), 0) == {"x": 2.5, "y": 2.5}
