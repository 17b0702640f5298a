"""NNI tuners and advisors -> Optuna samplers (names and checks: tuning/algorithms.py).

Every trial asks from its own process, so a sampler is built per ask. GridSearch
and BatchTuner do not sample at all: trial ``i`` gets point ``i``, which makes
"each point exactly once" hold by construction, whatever retries, resumes or
concurrent asks happen.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import optuna

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import GridSequence, SearchSpace, listed
from trialflow.tuning.algorithms import batch_combinations, canonical_tuner_name
from trialflow.tuning.seeds import trial_seed

#: The Optuna parameter that records which grid point / batch combination a trial got.
INDEX_PARAM = "grid_point"
#: The experiment's own seed (classArgs.seed, before a trial's index is added), handed to the
#: samplers whose model must be one across asks (SMAC's initial design, DNGO's network).
MODEL_SEED = "model_seed"
#: NNI's advisors hand their trials the budget under this key.
BUDGET_KEY = "TRIAL_BUDGET"
optuna.logging.set_verbosity(optuna.logging.WARNING)
Factory = Callable[[dict[str, Any], SearchSpace], optuna.samplers.BaseSampler]

#: NNI's TPE default for random startup trials (Optuna's is 10). gamma and prior_weight keep
#: Optuna's defaults unless tpe_args sets them: Optuna deprecates both knobs (4.9).
NNI_TPE_DEFAULTS = {"n_startup_jobs": 20, "n_ei_candidates": 24}


def _seed(args: dict[str, Any]) -> int | None:
    seed = args.get("seed")
    return int(seed) if seed is not None else None


def nni_gamma(fraction: float, n: int) -> int:
    """NNI's TPE splits the ``ceil(gamma * n)`` best observations off as the "good" set."""
    return max(1, math.ceil(fraction * n))


def _tpe_sampler(seed: int | None, tpe_args: dict[str, Any], **overrides: Any) -> optuna.samplers.TPESampler:
    args = {**NNI_TPE_DEFAULTS, **tpe_args}
    kwargs: dict[str, Any] = {
        "seed": seed,
        "n_startup_trials": int(args["n_startup_jobs"]),
        "n_ei_candidates": int(args["n_ei_candidates"]),
        # Running trials get a pessimistic value so concurrent asks spread out (NNI's constant
        # liar; Optuna has one kind of liar, so best/worst/mean all turn it on, null turns it off).
        "constant_liar": args.get("constant_liar_type", "best") is not None,
        # Nested choices make conditional spaces; multivariate+group model them jointly.
        "multivariate": True,
        "group": True,
        **overrides,
    }
    if "gamma" in args:
        kwargs["gamma"] = partial(nni_gamma, float(args["gamma"]))
    if "prior_weight" in args:
        kwargs["prior_weight"] = float(args["prior_weight"])
    # Optuna's default weights already ramp down observations older than the newest 25, which
    # is NNI's linear_forgetting=25; other values are honoured through an equivalent ramp.
    if "linear_forgetting" in args:
        kwargs["weights"] = partial(linear_forgetting_weights, int(args["linear_forgetting"]))
    with warnings.catch_warnings():  # multivariate/group are "experimental" in Optuna, stable in use;
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)  # gamma/prior_weight: deprecated, still honoured
        return optuna.samplers.TPESampler(**kwargs)


def linear_forgetting_weights(keep: int, n: int) -> Any:
    """Full weight for the newest ``keep`` observations, a linear ramp down for older ones."""
    import numpy as np

    if n <= keep:
        return np.ones(n)
    return np.concatenate([np.linspace(1.0 / n, 1.0, num=n - keep), np.ones(keep)])


def _tpe(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    return _tpe_sampler(_seed(args), dict(args.get("tpe_args") or {}))


def _random(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=_seed(args))


def _anneal(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    from trialflow.tuning.anneal import AnnealSampler

    return AnnealSampler(
        seed=_seed(args),
        avg_best_idx=float(args.get("avg_best_idx", 2.0)),
        shrink_coef=float(args.get("shrink_coef", 0.1)),
    )


def _evolution(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.NSGAIISampler(population_size=int(args.get("population_size", 32)), seed=_seed(args))


def _gp(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    from trialflow.tuning.gp import GPSampler

    keys = (
        "utility",
        "kappa",
        "xi",
        "nu",
        "alpha",
        "cold_start_num",
        "selection_num_warm_up",
        "selection_num_starting_points",
    )
    return GPSampler(seed=_seed(args), **{k: args[k] for k in keys if k in args})


def _indexed(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    # The index is fixed by sample_parameters; nothing is left to sample.
    return optuna.samplers.RandomSampler(seed=_seed(args))


def _hyperband(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=_seed(args))


def _bohb(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    tpe_args = {
        "n_startup_jobs": int(args.get("min_points_in_model", len(space.params) + 1)),
        "n_ei_candidates": int(args.get("num_samples", 64)),
    }
    return _tpe_sampler(_seed(args), tpe_args)


def _smac(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    from trialflow.tuning.smac_sampler import SmacSampler

    return SmacSampler(
        seed=_seed(args), config_dedup=bool(args.get("config_dedup", False)), model_seed=args.get(MODEL_SEED)
    )


def _metis(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    from trialflow.tuning.metis import MetisSampler

    keys = (
        "cold_start_num",
        "exploration_probability",
        "no_resampling",
        "no_candidates",
        "selection_num_starting_points",
    )
    return MetisSampler(seed=_seed(args), **{k: args[k] for k in keys if k in args})


def _dngo(args: dict[str, Any], space: SearchSpace) -> optuna.samplers.BaseSampler:
    from trialflow.tuning.dngo import DNGOSampler

    keys = ("sample_size", "trials_per_update", "num_epochs_per_training")
    return DNGOSampler(seed=_seed(args), model_seed=args.get(MODEL_SEED), **{k: args[k] for k in keys if k in args})


SAMPLERS: dict[str, Factory] = {
    "SMAC": _smac,
    "Metis": _metis,
    "DNGO": _dngo,
    "TPE": _tpe,
    "Random": _random,
    "GridSearch": _indexed,
    "BatchTuner": _indexed,
    "Anneal": _anneal,
    "Evolution": _evolution,
    "GP": _gp,
    "Hyperband": _hyperband,
    "BOHB": _bohb,
    # The first generation draws at random; later ones get the values trialflow.tuning.pbt
    # planned, replayed through a fixed sampler (trialflow.tuning.asker).
    "PBT": _random,
}


@dataclass(frozen=True)
class RandomStart:
    """How many trials a tuner draws at random before it models its results, and the class
    argument that sets it (what a warm start's earlier results count toward)."""

    trials: int
    argument: str


def random_start(algorithm: AlgorithmConfig, space: SearchSpace) -> RandomStart | None:
    """The tuner's random start-up trials (TPE: NNI's 20; GP: its cold start, 10; BOHB: its
    model's minimum points), or None for a tuner without such a phase (a custom class's start is
    its own). Earlier results given as history (a warm start) count toward them: with N of them
    the tuner models from about trial ``trials - N`` on, and asks exactly what a cold start asks
    before that."""
    if algorithm.class_name is not None:
        return None
    name = canonical_tuner_name(algorithm)
    args = dict(algorithm.class_args)
    if name == "TPE":
        tpe_args = {**NNI_TPE_DEFAULTS, **dict(args.get("tpe_args") or {})}
        return RandomStart(int(tpe_args["n_startup_jobs"]), "tpe_args.n_startup_jobs")
    if name == "GP":
        return RandomStart(int(args.get("cold_start_num", 10)), "cold_start_num")
    if name == "BOHB":
        return RandomStart(int(args.get("min_points_in_model", len(space.params) + 1)), "min_points_in_model")
    if name == "Metis":
        return RandomStart(int(args.get("cold_start_num", 10)), "cold_start_num")
    if name == "DNGO":
        return RandomStart(int(args.get("trials_per_update", 20)), "trials_per_update")
    return None


def make_sampler(
    algorithm: AlgorithmConfig, space: SearchSpace, trial_index: int | None = None
) -> optuna.samplers.BaseSampler:
    """The sampler for ``algorithm`` (a tuner or advisor); with ``trial_index``, seeded for that trial.

    Every trial asks from its own process, so a sampler seeded with the bare
    ``seed`` would draw the same "random" point in every trial: each trial's seed is derived
    from ``seed``, its index and the tuner (trialflow.tuning.seeds), so runs reproduce and
    trials, experiments and tuners draw apart.
    """
    name = canonical_tuner_name(algorithm)
    if name not in SAMPLERS:  # an Optuna sampler by its class path (trialflow.tuning.optuna_classes)
        from trialflow.tuning import optuna_classes

        return optuna_classes.build(name, "tuner", dict(algorithm.class_args), trial_index)  # type: ignore[no-any-return]
    args = dict(algorithm.class_args)
    if args.get("seed") is not None:
        args[MODEL_SEED] = int(args["seed"])
    if trial_index is not None and args.get("seed") is not None:
        args["seed"] = trial_seed(int(args["seed"]), trial_index, name)  # the generators take 32 bits
    return SAMPLERS[name](args, space)


def indexed_points(algorithm: AlgorithmConfig, space: SearchSpace) -> GridSequence | None:
    """GridSearch's grid or BatchTuner's combinations (computed per index); None for tuners
    that sample."""
    name = canonical_tuner_name(algorithm)
    if name == "GridSearch":
        return space.grid()
    if name == "BatchTuner":
        return listed(batch_combinations(space))
    return None


def trial_budget(algorithm: AlgorithmConfig) -> int | None:
    """The budget an advisor gives every trial (NNI puts it in the parameters as TRIAL_BUDGET)."""
    name = canonical_tuner_name(algorithm)
    if name == "Hyperband":
        return int(algorithm.class_args.get("R", 60))
    if name == "BOHB":
        return int(algorithm.class_args.get("max_budget", 3))
    return None


def sample_parameters(
    algorithm: AlgorithmConfig, space: SearchSpace, trial: optuna.Trial, trial_index: int = 0
) -> dict[str, Any]:
    """Parameters for ``trial`` in NNI's shape, drawn through the algorithm's sampler."""
    points = indexed_points(algorithm, space)
    if points is not None:
        if not 0 <= trial_index < points.size:
            raise IndexError(
                f"trial {trial_index} is beyond the {points.size} points of {canonical_tuner_name(algorithm)}"
            )
        # Recorded as an Optuna parameter too, so the dashboard shows which point a trial ran.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            trial.study.sampler = optuna.samplers.PartialFixedSampler({INDEX_PARAM: trial_index}, trial.study.sampler)
        # (the range is capped: a grid of 10**18 points still records an index Optuna can store)
        trial.suggest_int(INDEX_PARAM, 0, min(points.size, 2**31) - 1)
        point = points[trial_index]
        return dict(point) if canonical_tuner_name(algorithm) == "GridSearch" else point
    parameters = space.sample(trial)
    budget = trial_budget(algorithm)
    if budget is not None:
        parameters[BUDGET_KEY] = budget
    return parameters
