"""NNI algorithm names: what each one runs here, which classArgs it honours, and checks.

Kept free of Optuna so validating a config (and parsing an experiment DAG)
stays cheap; tuning/tuners.py and tuning/assessors.py build the samplers and
pruners. Names with no faithful, well-kept implementation are refused with
the closest supported choice rather than silently replaced, and the catalogue
below is also what the docs' algorithm table (docs/reference/algorithms.md) is checked against.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import ALL_TYPES, SearchSpace, SearchSpaceError
from trialflow.limits import HISTORY_LIMIT
from trialflow.tuning import optuna_classes

Role = Literal["tuner", "advisor", "assessor"]
#: The extra that brings scikit-learn and SciPy (GP, Metis, DNGO, Curvefitting), and SMAC3's.
MODELS_EXTRA = "airflow-provider-trialflow[tuners]"
SMAC_EXTRA = "airflow-provider-trialflow[smac]"


class UnsupportedAlgorithm(ValueError):
    """An algorithm trialflow will not run, with what to use instead."""


# -- classArgs checks: each returns an error message or None ----------------------------


def _mode(v: Any) -> str | None:
    return None if str(v).lower() in ("maximize", "minimize") else f"expected maximize or minimize, got {v!r}"


def _int(low: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and v >= low
        return None if ok else f"expected an integer >= {low}, got {v!r}"

    return check


def _float(low: float, high: float = float("inf"), *, open_low: bool = False) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        ok = number and (v > low if open_low else v >= low) and v <= high
        bound = f"> {low}" if open_low else f">= {low}"
        return (
            None if ok else f"expected a number {bound}{'' if high == float('inf') else f' and <= {high}'}, got {v!r}"
        )

    return check


def _one_of(*choices: Any) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"expected one of {', '.join(map(repr, choices))}, got {v!r}"


#: Seeds reach NumPy's and Optuna's generators, which take 0 .. 2**32 - 1.
MAX_SEED = 2**32 - 1


def _seed(v: Any) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_SEED
    return None if ok else f"expected an integer seed from 0 to {MAX_SEED}, got {v!r}"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"expected true or false, got {v!r}"


def _mapping(v: Any) -> str | None:
    return None if isinstance(v, dict) else f"expected a mapping, got {type(v).__name__}"


def _anything(v: Any) -> str | None:
    return None


COMMON_ARGS = {"optimize_mode": _mode, "seed": _seed}
TPE_ARGS = {
    "constant_liar_type": _one_of("best", "worst", "mean", None),
    "n_startup_jobs": _int(0),
    "n_ei_candidates": _int(1),
    "linear_forgetting": _int(1),
    "prior_weight": _float(0, open_low=True),
    "gamma": _float(0, 1, open_low=True),
}
NUMERIC_NO_NORMAL = frozenset({"choice", "randint", "uniform", "quniform", "loguniform", "qloguniform"})


@dataclass(frozen=True)
class AlgorithmSpec:
    """One NNI algorithm as trialflow runs it (a row of the docs' algorithm table is generated from these)."""

    name: str
    role: Role
    runs: str
    args: dict[str, Callable[[Any], str | None]] = field(default_factory=dict)
    #: NNI classArgs that are accepted but have no effect here, with the reason.
    ignored: dict[str, str] = field(default_factory=dict)
    types: frozenset[str] = frozenset(ALL_TYPES)
    nested: bool = True
    #: A module that must be importable (an optional extra), and the extra that brings it.
    needs: str | None = None
    extra: str = MODELS_EXTRA
    aliases: tuple[str, ...] = ()
    #: Serves several objectives (trialflow's ``objectives`` key): Optuna's multi-objective study.
    multi_objective: bool = False
    #: What an ask reads of a long experiment's finished trials (trialflow.tuning.history):
    #: "window" (the best and newest, past the limit), "none" (it draws without looking), "all".
    history: Literal["window", "none", "all"] = "all"

    @property
    def honoured(self) -> list[str]:
        return list(self.args)


CATALOGUE: tuple[AlgorithmSpec, ...] = (
    AlgorithmSpec(
        "TPE",
        "tuner",
        "Optuna TPESampler (multivariate, grouped for nested choices; NNI's 20 random "
        "startup trials; a constant liar for parallel trials unless constant_liar_type is null)",
        {**COMMON_ARGS, "tpe_args": _mapping},
        multi_objective=True,
        history="window",
    ),
    AlgorithmSpec(
        "Random",
        "tuner",
        "Optuna RandomSampler",
        dict(COMMON_ARGS),
        aliases=("RandomSearch",),
        multi_objective=True,
        history="none",
    ),
    AlgorithmSpec(
        "GridSearch",
        "tuner",
        "every grid point exactly once, trial i = point i",
        {"optimize_mode": _mode},
        ignored={"seed": "the order is fixed: trial i = point i"},
        types=frozenset({"choice", "randint", "quniform", "qloguniform"}),
        aliases=("Grid",),
        history="none",
    ),
    AlgorithmSpec(
        "BatchTuner",
        "tuner",
        "the listed combinations exactly once, trial i = combination i",
        {"optimize_mode": _mode},
        ignored={"seed": "the order is fixed: trial i = combination i"},
        types=frozenset({"choice"}),
        nested=False,
        aliases=("Batch",),
        history="none",
    ),
    AlgorithmSpec(
        "Anneal",
        "tuner",
        "hyperopt's annealing rule as an Optuna sampler (trialflow.tuning.anneal)",
        {**COMMON_ARGS, "avg_best_idx": _float(1), "shrink_coef": _float(0, open_low=True)},
        ignored={
            "parallel_optimize": "parallel asks always see running trials' absence",
            "constant_liar_type": "no constant liar in annealing",
        },
        history="window",
    ),
    AlgorithmSpec(
        "Evolution",
        "tuner",
        "Optuna NSGAIISampler (a genetic algorithm; with several objectives, NSGA-II's Pareto ranking)",
        {**COMMON_ARGS, "population_size": _int(2)},
        aliases=("NSGAII",),
        multi_objective=True,
    ),
    AlgorithmSpec(
        "GP",
        "tuner",
        "scikit-learn Gaussian process (Matern) + EI/UCB/POI, as NNI's GPTuner (trialflow.tuning.gp)",
        {
            **COMMON_ARGS,
            "utility": _one_of("ei", "ucb", "poi"),
            "kappa": _float(0),
            "xi": _float(0),
            "nu": _one_of(0.5, 1.5, 2.5),
            "alpha": _float(0, open_low=True),
            "cold_start_num": _int(1),
            "selection_num_warm_up": _int(1),
            "selection_num_starting_points": _int(0),
        },
        types=NUMERIC_NO_NORMAL,
        nested=False,
        needs="sklearn",
        aliases=("GPTuner",),
        history="window",
    ),
    AlgorithmSpec(
        "SMAC",
        "tuner",
        "SMAC3's hyperparameter-optimisation facade (random forest + expected improvement; its Sobol "
        "initial design first), asked and told each trial (trialflow.tuning.smac_sampler)",
        {**COMMON_ARGS, "config_dedup": _bool},
        types=NUMERIC_NO_NORMAL,
        nested=False,
        needs="smac",
        extra=SMAC_EXTRA,
        aliases=("SMACTuner",),
        history="window",
    ),
    AlgorithmSpec(
        "Metis",
        "tuner",
        "trialflow's Metis (trialflow.tuning.metis): a scikit-learn Gaussian process, candidates for "
        "exploration, exploitation (Gaussian mixtures) and re-sampling of outliers, ranked by information "
        "gain, with NNI's diversification step",
        {
            **COMMON_ARGS,
            "cold_start_num": _int(1),
            "exploration_probability": _float(0, 1),
            "no_resampling": _bool,
            "no_candidates": _bool,
            "selection_num_starting_points": _int(1),
        },
        types=NUMERIC_NO_NORMAL,
        nested=False,
        needs="sklearn",
        aliases=("MetisTuner",),
        history="window",
    ),
    AlgorithmSpec(
        "DNGO",
        "tuner",
        "trialflow's DNGO (trialflow.tuning.dngo): a tanh network's last-layer features with Bayesian "
        "linear regression, refit at every ask after trials_per_update random trials, expected improvement "
        "over sample_size random points",
        {**COMMON_ARGS, "sample_size": _int(1), "trials_per_update": _int(1), "num_epochs_per_training": _int(1)},
        types=NUMERIC_NO_NORMAL,
        nested=False,
        needs="scipy",
        aliases=("DNGOTuner",),
        history="window",
    ),
    AlgorithmSpec(
        "PBT",
        "tuner",
        "Population Based Training over trial indices (trialflow.tuning.pbt): trial i is member "
        "i % population_size of generation i // population_size and waits for the generation before "
        "to end; its worst fraction copy a top trial's parameters, perturbed, and start from its last "
        "checkpoint, the rest from their own (fetched from the artifact store; implies `checkpoints`)",
        {
            **COMMON_ARGS,
            "population_size": _int(2),
            "factor": _float(0, 1, open_low=True),
            "factors": _float(0, 1, open_low=True),
            "resample_probability": _float(0, 1),
            "fraction": _float(0, 0.5, open_low=True),
        },
        ignored={"all_checkpoint_dir": "checkpoints go to the experiment's artifact store (`checkpoints.store`)"},
        nested=False,
        aliases=("PBTTuner",),
        history="none",
    ),
    AlgorithmSpec(
        "Hyperband",
        "advisor",
        "Optuna HyperbandPruner (max_resource=R, reduction_factor=eta) "
        "with RandomSampler; trials get TRIAL_BUDGET=R and are stopped at rungs",
        {"optimize_mode": _mode, "seed": _seed, "R": _int(1), "eta": _int(2)},
        ignored={"exec_mode": "brackets run in parallel, as with exec_mode: parallelism"},
        history="none",
    ),
    AlgorithmSpec(
        "BOHB",
        "advisor",
        "Optuna HyperbandPruner (min/max_budget, eta) with TPESampler; trials get "
        "TRIAL_BUDGET=max_budget and are stopped at rungs",
        {
            "optimize_mode": _mode,
            "seed": _seed,
            "min_budget": _int(1),
            "max_budget": _int(1),
            "eta": _int(2),
            "min_points_in_model": _int(1),
            "num_samples": _int(1),
        },
        ignored={
            "top_n_percent": "Optuna's TPE gamma is used",
            "random_fraction": "not in Optuna's TPE",
            "bandwidth_factor": "Optuna's TPE bandwidth is used",
            "min_bandwidth": "Optuna's TPE bandwidth is used",
            "config_space": "use searchSpace",
        },
        history="window",
    ),
    AlgorithmSpec(
        "Medianstop",
        "assessor",
        "Optuna MedianPruner (n_warmup_steps from start_step)",
        {"optimize_mode": _mode, "start_step": _int(0)},
    ),
    AlgorithmSpec(
        "Curvefitting",
        "assessor",
        "least-squares fits of 5 learning-curve families, extrapolated to "
        "epoch_num (an approximation of NNI's 12-curve MCMC ensemble; trialflow.tuning.curvefitting)",
        {
            "optimize_mode": _mode,
            "epoch_num": _int(1),
            "start_step": _int(1),
            "threshold": _float(0, 1, open_low=True),
            "gap": _int(1),
        },
        needs="scipy",
    ),
)

#: NNI's tuners for neural architecture search only (their search spaces are NAS's, not
#: hyperparameters'), and what to use for hyperparameters instead.
CLOSEST = {
    "PPOTuner": "Evolution",
    "NetworkMorphism": "Evolution",
    "RegularizedEvolution": "Evolution",
}
_ROLE_DEFAULT: dict[Role, str] = {"tuner": "TPE", "advisor": "BOHB", "assessor": "Medianstop"}


def _key(name: str) -> str:
    return name.replace("_", "").replace(" ", "").replace("-", "").lower()


_BY_KEY = {_key(alias): spec for spec in CATALOGUE for alias in (spec.name,) + spec.aliases}
_BY_NAME = {spec.name for spec in CATALOGUE}
_CLOSEST_BY_KEY = {
    key: closest for name, closest in CLOSEST.items() for key in (_key(name), _key(name).removesuffix("tuner"))
}


def names(role: Role) -> list[str]:
    return [spec.name for spec in CATALOGUE if spec.role == role]


def algorithm_spec(algorithm: AlgorithmConfig, role: Role) -> AlgorithmSpec:
    """The catalogue entry this config names, or UnsupportedAlgorithm saying what to use."""
    supported = names(role)
    if algorithm.class_name is None and role in optuna_classes.KINDS and optuna_classes.is_class_path(algorithm.name):
        return _optuna_class_spec(str(algorithm.name), role, algorithm)
    if algorithm.class_name is not None:
        raise UnsupportedAlgorithm(
            f"custom {role} className {algorithm.class_name!r} has no catalogue entry: it runs as the user's own "
            "class (trialflow.tuning.custom)"
        )
    name = str(algorithm.name)
    spec = _BY_KEY.get(_key(name))
    if spec is not None and spec.role == role:
        return spec
    if spec is not None:
        raise UnsupportedAlgorithm(
            f"{name!r} is {'an' if spec.role[0] in 'aeiou' else 'a'} {spec.role}, "
            f"not a {role}; supported {role}s: {', '.join(supported)}"
        )
    closest = _CLOSEST_BY_KEY.get(_key(name)) if role == "tuner" else None
    closest = closest or next(iter(difflib.get_close_matches(name, supported, n=1, cutoff=0.5)), _ROLE_DEFAULT[role])
    raise UnsupportedAlgorithm(
        f"{role} {name!r} is not supported; the closest supported choice is {closest!r} "
        f"(supported: {', '.join(supported)})"
    )


def _optuna_class_spec(path: str, role: Role, algorithm: AlgorithmConfig) -> AlgorithmSpec:
    """An Optuna class named by its path (trialflow.tuning.optuna_classes): its arguments are its
    own, checked against its signature by check_algorithms; it reads every finished trial."""
    kind = "sampler" if role == "tuner" else "pruner"
    return AlgorithmSpec(
        path,
        role,
        f"the Optuna {kind} {path}",
        {"optimize_mode": _mode, **{arg: _anything for arg in algorithm.class_args if arg != "optimize_mode"}},
        history="all",
    )


def canonical_tuner_name(algorithm: AlgorithmConfig) -> str:
    """The tuner or advisor this config names (an advisor chooses parameters too)."""
    spec = _BY_KEY.get(_key(algorithm.name or ""))
    if algorithm.class_name is None and spec is not None and spec.role in ("tuner", "advisor"):
        return spec.name
    return algorithm_spec(algorithm, "tuner").name  # raises, saying what to use


def ask_fits_model(algorithm: AlgorithmConfig | None, role: Role) -> bool:
    """Whether the tuner's (or advisor's) ask fits a model in the asking process: the catalogue's
    entries that need scikit-learn, SciPy or SMAC3, and an Optuna class named by its path (its
    cost is not known here). A custom class asks in a process of its own (trialflow.tuning.custom);
    none at all is the default TPE. Where a trial task starts by default reads it
    (trialflow.lifecycle.start_place)."""
    if algorithm is None or algorithm.class_name is not None:
        return False
    if optuna_classes.is_class_path(algorithm.name):
        return True
    spec = _BY_KEY.get(_key(algorithm.name or ""))
    return spec is not None and spec.role == role and spec.needs is not None


def batch_combinations(space: SearchSpace) -> list[Any]:
    """BatchTuner's list: NNI requires exactly one parameter, ``combine_params``, a plain choice."""
    if [p.key for p in space.params] != ["combine_params"] or space.params[0].type != "choice":
        raise SearchSpaceError(
            (),
            "BatchTuner needs a search space with exactly one key, combine_params: "
            "{_type: choice, _value: [<parameter dict>, ...]}",
        )
    return list(space.params[0].values)


def _check_args(spec: AlgorithmSpec, algorithm: AlgorithmConfig, key: str) -> list[tuple[str, str]]:
    problems = []
    for arg, value in algorithm.class_args.items():
        if arg in spec.ignored:
            continue
        check = spec.args.get(arg)
        if check is None:
            known = sorted(set(spec.args) | set(spec.ignored))
            problems.append(
                (f"{key}.classArgs.{arg}", f"{spec.name} has no classArg {arg!r}; known: {', '.join(known) or 'none'}")
            )
            continue
        message = check(value)
        if message:
            problems.append((f"{key}.classArgs.{arg}", message))
    tpe_args = algorithm.class_args.get("tpe_args")
    if spec.name == "TPE" and isinstance(tpe_args, dict):
        for arg, value in tpe_args.items():
            check = TPE_ARGS.get(arg)
            message = check(value) if check else f"unknown tpe_args key; known: {', '.join(TPE_ARGS)}"
            if message:
                problems.append((f"{key}.classArgs.tpe_args.{arg}", message))
    if spec.name == "PBT" and {"factor", "factors"} <= set(algorithm.class_args):
        problems.append(
            (f"{key}.classArgs.factors", "set factor or factors (NNI's two names for one argument), not both")
        )
    if spec.name == "BOHB":
        low, high = algorithm.class_args.get("min_budget", 1), algorithm.class_args.get("max_budget", 3)
        if isinstance(low, int) and isinstance(high, int) and low >= high:
            problems.append((f"{key}.classArgs.max_budget", f"expected max_budget > min_budget ({low}), got {high}"))
    return problems


def _check_space(spec: AlgorithmSpec, space: SearchSpace) -> list[tuple[str, str]]:
    problems = []
    for path, param in space.walk():
        where = "searchSpace." + ".".join(path)
        if param.type not in spec.types:
            problems.append(
                (
                    where,
                    f"{spec.name} does not support {param.type}; it supports "
                    f"{', '.join(t for t in ALL_TYPES if t in spec.types)}",
                )
            )
        elif param.is_nested and not spec.nested:
            problems.append((where, f"{spec.name} does not support nested choices (options with _name)"))
    if spec.name == "GridSearch" and not problems:
        try:
            space.grid()
        except SearchSpaceError as exc:
            problems.append(("searchSpace." + ".".join(map(str, exc.path)), exc.message))
    if spec.name == "BatchTuner":
        try:
            batch_combinations(space)
        except SearchSpaceError as exc:
            problems = [("searchSpace", exc.message)]
    return problems


def _check_needs(spec: AlgorithmSpec, key: str) -> list[tuple[str, str]]:
    if spec.needs and importlib.util.find_spec(spec.needs) is None:
        return [(key, f"{spec.name} needs {spec.needs}, which is not installed: pip install '{spec.extra}'")]
    return []


def check_algorithms(
    tuner: AlgorithmConfig | None,
    advisor: AlgorithmConfig | None,
    assessor: AlgorithmConfig | None,
    space: SearchSpace,
    objectives: int = 1,
) -> list[tuple[str, str]]:
    """Problems as (config key, message), for `trialflow validate` and DAG building.
    ``objectives``: how many the experiment optimizes (trialflow's ``objectives`` key)."""
    problems: list[tuple[str, str]] = []
    if objectives > 1:
        problems += _check_several_objectives(tuner, advisor, assessor)
    if assessor is not None and tuner is not None and tuner.population_based:
        problems.append(
            (
                "assessor",
                "PBT ends every trial after its step and starts the next generation from its checkpoint; an "
                "assessor stopping trials early would leave members out of the population (NNI refused it too): "
                "remove the assessor",
            )
        )
    for key, algorithm, role in (
        ("tuner", tuner, "tuner"),
        ("advisor", advisor, "advisor"),
        ("assessor", assessor, "assessor"),
    ):
        if algorithm is None:
            continue
        if algorithm.class_name is not None:
            problems += check_custom_class(algorithm, key)
            continue
        try:
            spec = algorithm_spec(algorithm, role)  # type: ignore[arg-type]
        except UnsupportedAlgorithm as exc:
            problems.append((key, str(exc)))
            continue
        problems += _check_args(spec, algorithm, key) + _check_needs(spec, key)
        if spec.name not in _BY_NAME:  # an Optuna class by its path: its own signature decides
            message = optuna_classes.check(spec.name, role, dict(algorithm.class_args))
            problems += [(f"{key}.name", message)] if message else []
        if role != "assessor":
            problems += _check_space(spec, space)
    return problems


#: A custom class's name: a module path and the class, as NNI's className (``my_tuner.MyTuner``).
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\.[A-Za-z_][A-Za-z0-9_]*")


def check_custom_class(algorithm: AlgorithmConfig, key: str) -> list[tuple[str, str]]:
    """A custom tuner's or assessor's name and folder, checked without running its code (a DAG
    is parsed often; `trialflow validate` also makes the class: trialflow.tuning.custom.runner.check)."""
    name = str(algorithm.class_name)
    if len(name) > 200 or not _CLASS_NAME.fullmatch(name):
        return [
            (f"{key}.className", f"expected module.Class (NNI's className, e.g. my_tuner.MyTuner), got {name[:200]!r}")
        ]
    if algorithm.code_directory is None:
        return []
    folder = Path(algorithm.code_directory)
    if not folder.is_dir():
        return [(f"{key}.codeDirectory", f"{folder} is not a folder")]
    module = name.rpartition(".")[0].split(".")
    as_file, as_package = folder.joinpath(*module).with_suffix(".py"), folder.joinpath(*module, "__init__.py")
    if not (as_file.is_file() or as_package.is_file()):
        return [(f"{key}.className", f"module {'.'.join(module)!r} is not in {folder} (expected {as_file.name} there)")]
    return []


def check_warm_start(algorithm: AlgorithmConfig | None, use: str) -> list[tuple[str, str]]:
    """Problems of a ``warmStart`` (config key, message) with this tuner: earlier results are
    nothing to a tuner that draws without looking at them, and a tuner that runs its own points
    in order (GridSearch, BatchTuner) runs no earlier set first."""
    spec = _BY_KEY.get(_key(algorithm.name or "")) if algorithm is not None and algorithm.class_name is None else None
    if spec is None:
        return []  # a custom or unknown tuner: check_algorithms names it
    if spec.name in ("GridSearch", "BatchTuner"):
        return [("warmStart", f"{spec.name} runs its own points in order: no earlier result or set goes first")]
    if use == "results" and spec.history == "none":
        learning = ", ".join(s.name for s in CATALOGUE if s.history != "none" and s.role != "assessor")
        return [
            (
                "warmStart.use",
                f"{spec.name} draws without looking at results, so earlier results teach it nothing: "
                f"use: rerun (the earlier best sets run first), or a tuner that learns ({learning})",
            )
        ]
    return []


def _check_several_objectives(
    tuner: AlgorithmConfig | None, advisor: AlgorithmConfig | None, assessor: AlgorithmConfig | None
) -> list[tuple[str, str]]:
    """Several objectives have no single best to compare a curve or a rung with: Optuna's pruners
    (every assessor, Hyperband's and BOHB's rungs) serve one objective only."""
    serving = ", ".join(s.name for s in CATALOGUE if s.multi_objective)
    problems = []
    if assessor is not None:
        problems.append(
            (
                "assessor",
                f"{assessor.name or assessor.class_name} stops trials by one metric's curve; with "
                "several objectives there is no single curve to judge: remove the assessor",
            )
        )
    if advisor is not None:
        problems.append(
            (
                "advisor",
                f"{advisor.name or advisor.class_name} stops trials at rungs by one metric; with several "
                f"objectives use a tuner that serves them: {serving}",
            )
        )
    if tuner is not None:
        spec = _BY_KEY.get(_key(tuner.name or ""))
        if tuner.class_name is not None or spec is None or not spec.multi_objective:
            problems.append(
                (
                    "tuner",
                    f"{tuner.name or tuner.class_name} optimizes one metric; with several objectives use {serving}",
                )
            )
    return problems


def markdown_table() -> str:
    """The docs' algorithm table, generated from the catalogue (a test keeps docs/reference/algorithms.md in step)."""
    lines = [
        "| NNI name | kind | what runs | classArgs honoured | accepted, no effect | search space |",
        "|---|---|---|---|---|---|",
    ]
    for spec in CATALOGUE:
        if spec.role == "assessor":
            space = "-"
        elif spec.name == "BatchTuner":
            space = "`combine_params` choice only"
        else:
            space = (
                "all types"
                if spec.types == frozenset(ALL_TYPES)
                else ", ".join(t for t in ALL_TYPES if t in spec.types)
            )
            space += "" if spec.nested else "; no nested choices"
        honoured = ", ".join(f"`{a}`" for a in spec.args) or "-"
        if spec.name == "TPE":
            honoured += " (`" + "`, `".join(TPE_ARGS) + "`)"
        ignored = ", ".join(f"`{a}`" for a in spec.ignored) or "-"
        lines.append(f"| {spec.name} | {spec.role} | {spec.runs} | {honoured} | {ignored} | {space} |")
    refused = ", ".join(f"{name} (-> {closest})" for name, closest in CLOSEST.items())
    lines.append("")
    lines.append(
        f"Refused by `trialflow validate` (NNI's tuners for neural architecture search), each with the "
        f"closest supported choice: {refused}. Custom tuners, assessors and advisors "
        "(`className`) run as your own classes, see below."
    )

    def named(history: str) -> str:
        return ", ".join(s.name for s in CATALOGUE if s.role != "assessor" and s.history == history)

    lines.append("")
    lines.append(
        f"Long experiments: past {HISTORY_LIMIT:,} finished trials, an ask by {named('window')} reads the "
        f"{HISTORY_LIMIT // 2:,} best and the {HISTORY_LIMIT // 2:,} newest of them (with several objectives, "
        f"all of them); by {named('none')}, none; by {named('all')}, all."
    )
    several = ", ".join(spec.name for spec in CATALOGUE if spec.multi_objective)
    lines.append("")
    lines.append(
        f"Several objectives (trialflow's `objectives` key): {several}; no assessor or advisor (their "
        "early stopping judges one metric)."
    )
    return "\n".join(lines)
