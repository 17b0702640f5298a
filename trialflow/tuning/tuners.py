"""NNI tuners -> Optuna samplers (the names and their checks are in tuning/algorithms.py)."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import optuna

from trialflow.config.model import AlgorithmConfig
from trialflow.tuning.algorithms import canonical_tuner_name
from trialflow.tuning.search_space import SearchSpace

GRID_PARAM = "grid_point"
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _seed(args: dict[str, Any]) -> int | None:
    seed = args.get("seed")
    return int(seed) if seed is not None else None


def _tpe(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    tpe_args = dict(args.get("tpe_args") or {})
    kwargs: dict[str, Any] = {
        "seed": _seed(args),
        # Parallel trials: pretend running ones scored badly so concurrent asks spread out,
        # which is what NNI's TPE does with its default constant_liar_type.
        "constant_liar": tpe_args.get("constant_liar_type", "best") is not None,
        # Nested choices make conditional spaces; multivariate+group model them jointly.
        "multivariate": True,
        "group": True,
    }
    if "n_startup_jobs" in tpe_args:
        kwargs["n_startup_trials"] = int(tpe_args["n_startup_jobs"])
    if "n_ei_candidates" in tpe_args:
        kwargs["n_ei_candidates"] = int(tpe_args["n_ei_candidates"])
    if "prior_weight" in tpe_args:
        kwargs["prior_weight"] = float(tpe_args["prior_weight"])
    with warnings.catch_warnings():  # multivariate/group are "experimental" in Optuna, stable in use
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(**kwargs)


def _random(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=_seed(args))


def _grid(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    points = space.grid()
    return optuna.samplers.GridSampler({GRID_PARAM: list(range(len(points)))}, seed=_seed(args))


TUNERS: dict[str, Callable[[dict[str, Any], SearchSpace], optuna.samplers.BaseSampler]] = {
    "TPE": _tpe,
    "Random": _random,
    "GridSearch": _grid,
}
def make_sampler(tuner: AlgorithmConfig, space: SearchSpace,
                 trial_index: int | None = None) -> optuna.samplers.BaseSampler:
    """The tuner's sampler; with ``trial_index``, one seeded for that trial.

    Every trial asks from its own process, so a sampler seeded with the bare
    ``seed`` would draw the same "random" startup point in every trial. Seeding
    with ``seed + trial_index`` keeps runs reproducible and trials distinct.
    GridSearch keeps the bare seed: its shuffle order must agree across trials.
    """
    name = canonical_tuner_name(tuner)
    args = dict(tuner.class_args)
    if trial_index is not None and name != "GridSearch" and args.get("seed") is not None:
        args["seed"] = int(args["seed"]) + trial_index
    return TUNERS[name](args, space)


def sample_parameters(tuner: AlgorithmConfig, space: SearchSpace, trial: optuna.Trial) -> dict[str, Any]:
    """Parameters for ``trial`` in NNI's shape, drawn through the tuner's sampler."""
    if canonical_tuner_name(tuner) == "GridSearch":
        points = space.grid()
        return points[trial.suggest_categorical(GRID_PARAM, list(range(len(points))))]
    return space.sample(trial)
