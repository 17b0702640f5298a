"""Every NNI tuner and advisor name: valid parameters for each search-space type it supports,
a clear refusal for the others, exact enumeration, reproducible seeds, honoured classArgs."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import optuna
import pytest

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import ALL_TYPES, parse_search_space
from trialflow.tuning.algorithms import (
    CATALOGUE,
    UnsupportedAlgorithm,
    algorithm_spec,
    ask_fits_model,
    canonical_tuner_name,
    check_algorithms,
    names,
)
from trialflow.tuning.tuners import BUDGET_KEY, INDEX_PARAM, make_sampler, sample_parameters

#: One parameter of each NNI type, and what a valid value of it is.
TYPE_SPECS: dict[str, tuple[dict[str, Any], Any]] = {
    "choice": ({"_type": "choice", "_value": ["a", 2, 3.5]}, lambda v: v in ("a", 2, 3.5)),
    "randint": ({"_type": "randint", "_value": [-3, 4]}, lambda v: isinstance(v, int) and -3 <= v < 4),
    "uniform": ({"_type": "uniform", "_value": [-1.5, 2.5]}, lambda v: -1.5 <= v <= 2.5),
    "quniform": (
        {"_type": "quniform", "_value": [0, 10, 2.5]},
        lambda v: 0 <= v <= 10 and math.isclose(v / 2.5, round(v / 2.5)),
    ),
    "loguniform": ({"_type": "loguniform", "_value": [1e-4, 1e-1]}, lambda v: 1e-4 <= v <= 1e-1),
    "qloguniform": (
        {"_type": "qloguniform", "_value": [1, 100, 5]},
        lambda v: 1 <= v <= 100 and (v in (1, 100) or math.isclose(v / 5, round(v / 5))),
    ),
    "normal": ({"_type": "normal", "_value": [10, 2]}, lambda v: math.isfinite(v) and -10 < v < 30),
    "qnormal": (
        {"_type": "qnormal", "_value": [10, 2, 0.5]},
        lambda v: math.isclose(v / 0.5, round(v / 0.5)) and -10 < v < 30,
    ),
    "lognormal": ({"_type": "lognormal", "_value": [0, 1]}, lambda v: v > 0),
    "qlognormal": (
        {"_type": "qlognormal", "_value": [1, 1, 2]},
        lambda v: v >= 0 and math.isclose(v / 2, round(v / 2)),
    ),
}
NESTED = {
    "_type": "choice",
    "_value": [
        {"_name": "linear", "lr": {"_type": "quniform", "_value": [0, 1, 0.25]}},
        {"_name": "conv", "k": {"_type": "randint", "_value": [1, 4]}, "fixed": 7},
    ],
}
#: The tuners whose every ask fits a model from scratch (seconds each, measured).
SLOW_TUNERS = frozenset({"SMAC", "Metis"})
PARAMETER_TUNERS = [
    pytest.param(
        s.name,
        # an extra's tuner (SMAC) where its extra is not installed: make test-lowest's environment
        marks=[
            pytest.mark.skipif(
                s.needs is not None and importlib.util.find_spec(s.needs) is None, reason=f"{s.needs} is not installed"
            ),
            # a model fitted from scratch at each ask (12-24 s a case for SMAC, ~5 s for Metis):
            # make test runs them, the inner loops (make test-unit, test-fast, test-lowest) do not
            *([pytest.mark.slow] if s.name in SLOW_TUNERS else []),
        ],
    )
    for s in CATALOGUE
    if s.role in ("tuner", "advisor") and s.name != "BatchTuner"
]


def _objective(params: dict[str, Any]) -> float:
    """A deterministic score of any parameter dict, so model-based tuners get real feedback."""
    return sum(hash(repr(v)) % 1000 for v in params.values()) / 1000.0


def run_tuner(
    algorithm: AlgorithmConfig, raw_space: dict[str, Any], n: int, pruner: optuna.pruners.BasePruner | None = None
) -> list[dict[str, Any]]:
    """Ask like production (a fresh sampler per trial, seeded for its index) and tell the result."""
    space = parse_search_space(raw_space)
    study = optuna.create_study(direction="maximize", pruner=pruner)
    out = []
    for i in range(n):
        study.sampler = make_sampler(algorithm, space, i)
        trial = study.ask()
        params = sample_parameters(algorithm, space, trial, i)
        study.tell(trial, _objective(params))
        out.append(params)
    return out


def _algo(name: str, **class_args: Any) -> AlgorithmConfig:
    return AlgorithmConfig(name=name, class_args=class_args)


# -- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("TPE", "TPE"),
        ("tpe", "TPE"),
        ("Random", "Random"),
        ("random_search", "Random"),
        ("GridSearch", "GridSearch"),
        ("grid_search", "GridSearch"),
        ("Anneal", "Anneal"),
        ("Evolution", "Evolution"),
        ("GP", "GP"),
        ("GPTuner", "GP"),
        ("BatchTuner", "BatchTuner"),
        ("Hyperband", "Hyperband"),
        ("BOHB", "BOHB"),
        ("PBTTuner", "PBT"),
        ("PBT", "PBT"),
        ("SMAC", "SMAC"),
        ("SMACTuner", "SMAC"),
        ("Metis", "Metis"),
        ("MetisTuner", "Metis"),
        ("DNGO", "DNGO"),
        ("DNGOTuner", "DNGO"),
    ],
)
def test_supported_names(name, canonical):
    assert canonical_tuner_name(AlgorithmConfig(name=name)) == canonical


@pytest.mark.parametrize(
    "name, closest",
    [
        ("PPOTuner", "Evolution"),
        ("NetworkMorphism", "Evolution"),
        ("RegularizedEvolution", "Evolution"),
        ("TPEE", "TPE"),
    ],
)
def test_unsupported_names_say_the_closest_choice(name, closest):
    with pytest.raises(UnsupportedAlgorithm, match=f"closest supported choice is '{closest}'"):
        canonical_tuner_name(AlgorithmConfig(name=name))


def test_a_custom_class_has_no_catalogue_name_and_a_custom_advisor_is_checked_as_a_tuner_is():
    with pytest.raises(UnsupportedAlgorithm, match="custom tuner className 'my.Tuner' has no catalogue entry"):
        canonical_tuner_name(AlgorithmConfig(class_name="my.Tuner"))
    assert check_algorithms(None, AlgorithmConfig(class_name="my.Advisor"), None, parse_search_space({})) == []
    problems = check_algorithms(None, AlgorithmConfig(class_name="Advisor"), None, parse_search_space({}))
    assert problems[0][0] == "advisor.className" and "expected module.Class" in problems[0][1]


def test_an_algorithm_in_the_wrong_role_says_what_it_is():
    problems = check_algorithms(
        AlgorithmConfig(name="Medianstop"),
        None,
        AlgorithmConfig(name="TPE"),
        parse_search_space({"x": TYPE_SPECS["uniform"][0]}),
    )
    assert (
        "tuner",
        "'Medianstop' is an assessor, not a tuner; supported tuners: "
        "TPE, Random, GridSearch, BatchTuner, Anneal, Evolution, GP, SMAC, Metis, DNGO, PBT",
    ) in problems
    assert any(key == "assessor" and "'TPE' is a tuner, not a assessor" in m for key, m in problems)


def test_unknown_assessor_names_the_closest():
    problems = check_algorithms(
        AlgorithmConfig(name="TPE"),
        None,
        AlgorithmConfig(name="MedianStopper"),
        parse_search_space({"x": TYPE_SPECS["uniform"][0]}),
    )
    assert problems == [
        (
            "assessor",
            "assessor 'MedianStopper' is not supported; the closest supported choice "
            "is 'Medianstop' (supported: Medianstop, Curvefitting)",
        )
    ]


# -- search-space types --------------------------------------------------------------------


@pytest.mark.parametrize("name", PARAMETER_TUNERS)
@pytest.mark.parametrize("kind", ALL_TYPES)
def test_every_tuner_samples_valid_values_or_refuses_the_type(name, kind):
    spec = algorithm_spec(AlgorithmConfig(name=name), "advisor" if name in names("advisor") else "tuner")
    raw, valid = TYPE_SPECS[kind]
    space = {"p": raw, "x": {"_type": "uniform", "_value": [0, 1]}}
    problems = check_algorithms(
        None if spec.role == "advisor" else _algo(name),
        _algo(name) if spec.role == "advisor" else None,
        None,
        parse_search_space(space),
    )
    if name == "GridSearch":
        space = {"p": raw}
        problems = check_algorithms(_algo(name), None, None, parse_search_space(space))
    if kind not in spec.types or (name == "GridSearch" and kind in ("uniform", "loguniform")):
        assert problems and problems[0][0] == "searchSpace.p", problems
        assert kind in problems[0][1]
        return
    if name == "GridSearch" and kind in ("normal", "qnormal", "lognormal", "qlognormal"):
        assert problems, "GridSearch cannot enumerate an unbounded type"
        return
    assert problems == []
    n = 14 if name != "GridSearch" else 3  # past GP's cold start and Anneal's first pick
    for params in run_tuner(_algo(name, seed=3), space, n):
        assert valid(params["p"]), (name, kind, params)


@pytest.mark.parametrize("name", PARAMETER_TUNERS)
def test_nested_choices_are_sampled_or_refused(name):
    spec = algorithm_spec(AlgorithmConfig(name=name), "advisor" if name in names("advisor") else "tuner")
    space = {"model": NESTED}
    algo = _algo(name)
    problems = (
        check_algorithms(None, algo, None, parse_search_space(space))
        if spec.role == "advisor"
        else check_algorithms(algo, None, None, parse_search_space(space))
    )
    if not spec.nested:
        assert problems == [("searchSpace.model", f"{name} does not support nested choices (options with _name)")]
        return
    assert problems == []
    for params in run_tuner(_algo(name, seed=1), space, 12 if name != "GridSearch" else 4):
        model = params["model"]
        assert model["_name"] in ("linear", "conv")
        if model["_name"] == "linear":
            assert set(model) == {"_name", "lr"} and 0 <= model["lr"] <= 1
        else:
            assert set(model) == {"_name", "k", "fixed"} and model["k"] in (1, 2, 3) and model["fixed"] == 7


# -- exact enumeration ---------------------------------------------------------------------


def test_grid_search_runs_every_point_exactly_once_in_order():
    space = {"a": {"_type": "choice", "_value": ["x", "y"]}, "b": {"_type": "randint", "_value": [0, 3]}}
    params = run_tuner(_algo("GridSearch"), space, 6)
    grid = list(parse_search_space(space).grid())
    assert params == grid and len({repr(sorted(p.items())) for p in params}) == 6


def test_batch_tuner_runs_exactly_the_listed_combinations():
    combos = [{"lr": 0.1, "opt": "sgd"}, {"lr": 0.01, "opt": "adam"}, {"lr": 0.5, "opt": "sgd", "momentum": 0.9}]
    space = {"combine_params": {"_type": "choice", "_value": combos}}
    assert check_algorithms(_algo("BatchTuner"), None, None, parse_search_space(space)) == []
    assert run_tuner(_algo("BatchTuner"), space, 3) == combos


def test_batch_tuner_refuses_any_other_space():
    problems = check_algorithms(_algo("BatchTuner"), None, None, parse_search_space({"x": TYPE_SPECS["choice"][0]}))
    assert problems == [
        (
            "searchSpace",
            "BatchTuner needs a search space with exactly one key, combine_params: "
            "{_type: choice, _value: [<parameter dict>, ...]}",
        )
    ]


def test_indexed_tuners_record_the_point_for_the_dashboard():
    space = parse_search_space({"a": {"_type": "choice", "_value": [1, 2, 3]}})
    study = optuna.create_study()
    study.sampler = make_sampler(_algo("GridSearch"), space, 2)
    trial = study.ask()
    assert sample_parameters(_algo("GridSearch"), space, trial, 2) == {"a": 3}
    assert trial.params == {INDEX_PARAM: 2}
    with pytest.raises(IndexError, match="trial 3 is beyond the 3 points of GridSearch"):
        sample_parameters(_algo("GridSearch"), space, study.ask(), 3)


# -- seeds and classArgs -------------------------------------------------------------------

SEED_SPACE = {
    "x": {"_type": "uniform", "_value": [-5, 5]},
    "y": {"_type": "loguniform", "_value": [1e-3, 1]},
    "k": {"_type": "choice", "_value": ["a", "b", "c"]},
    "n": {"_type": "randint", "_value": [0, 8]},
}


@pytest.mark.parametrize("name", ["TPE", "Random", "Anneal", "Evolution", "GP", "Hyperband", "BOHB"])
def test_seeds_reproduce_and_differ(name):
    extra = (
        {"tpe_args": {"n_startup_jobs": 4}}
        if name == "TPE"
        else {"cold_start_num": 4, "selection_num_warm_up": 200}
        if name == "GP"
        else {"population_size": 4}
        if name == "Evolution"
        else {"min_points_in_model": 4}
        if name == "BOHB"
        else {}
    )
    first = run_tuner(_algo(name, seed=11, **extra), SEED_SPACE, 10)
    again = run_tuner(_algo(name, seed=11, **extra), SEED_SPACE, 10)
    other = run_tuner(_algo(name, seed=12, **extra), SEED_SPACE, 10)
    assert first == again
    assert first != other
    if name != "Evolution":  # a genetic algorithm may breed a child identical to a parent
        assert len({repr(p) for p in first}) == 10, "every trial gets its own point"


def test_advisors_hand_trials_their_budget():
    assert run_tuner(_algo("Hyperband", R=27, eta=3), SEED_SPACE, 1)[0][BUDGET_KEY] == 27
    assert run_tuner(_algo("BOHB", min_budget=1, max_budget=9), SEED_SPACE, 1)[0][BUDGET_KEY] == 9


@pytest.mark.parametrize(
    "name, args, key, fragment",
    [
        ("TPE", {"optimize_mode": "maximise"}, "tuner.classArgs.optimize_mode", "expected maximize or minimize"),
        ("TPE", {"tpe_args": {"gama": 0.2}}, "tuner.classArgs.tpe_args.gama", "unknown tpe_args key"),
        ("TPE", {"tpe_args": {"n_startup_jobs": -1}}, "tuner.classArgs.tpe_args.n_startup_jobs", "integer >= 0"),
        ("Evolution", {"population_size": 1}, "tuner.classArgs.population_size", "integer >= 2"),
        ("GP", {"utility": "pi"}, "tuner.classArgs.utility", "one of 'ei', 'ucb', 'poi'"),
        ("Random", {"population_size": 8}, "tuner.classArgs.population_size", "Random has no classArg"),
        ("Anneal", {"seed": "7"}, "tuner.classArgs.seed", "integer seed"),
    ],
)
def test_bad_class_args_name_the_key(name, args, key, fragment):
    problems = check_algorithms(_algo(name, **args), None, None, parse_search_space(SEED_SPACE))
    assert any(k == key and fragment in m for k, m in problems), problems


def test_nni_class_args_without_an_effect_here_are_accepted():
    problems = check_algorithms(
        None,
        _algo("BOHB", top_n_percent=15, random_fraction=0.33, min_budget=1, max_budget=27),
        None,
        parse_search_space(SEED_SPACE),
    )
    assert problems == []


def test_bohb_budgets_must_grow():
    problems = check_algorithms(None, _algo("BOHB", min_budget=9, max_budget=3), None, parse_search_space(SEED_SPACE))
    assert problems == [("advisor.classArgs.max_budget", "expected max_budget > min_budget (9), got 3")]


def test_tpe_args_reach_the_sampler():
    sampler = make_sampler(
        _algo("TPE", tpe_args={"n_startup_jobs": 3, "n_ei_candidates": 7, "gamma": 0.5, "constant_liar_type": None}),
        parse_search_space(SEED_SPACE),
    )
    assert sampler._n_startup_trials == 3
    assert sampler._n_ei_candidates == 7
    assert sampler._gamma(10) == 5
    assert sampler._constant_liar is False
    default = make_sampler(_algo("TPE"), parse_search_space(SEED_SPACE))
    assert default._n_startup_trials == 20 and default._constant_liar is True


def test_evolution_population_size_reaches_the_sampler():
    sampler = make_sampler(_algo("Evolution", population_size=6), parse_search_space(SEED_SPACE))
    assert sampler._population_size == 6


@pytest.mark.parametrize(("limit", "trials"), [(None, 14), (8, 20)])
def test_minimize_steers_model_based_tuners_downhill(monkeypatch, limit, trials):
    """After a cold start, GP proposes points near the minimum of x**2, not the maximum; also
    once it fits on a subsample (a limit of 8 points, reached on a small study)."""
    from trialflow.tuning import gp

    if limit is not None:
        monkeypatch.setattr(gp, "MAX_MODEL_POINTS", limit)
    algo = _algo("GP", optimize_mode="minimize", seed=0, cold_start_num=6, selection_num_warm_up=500)
    space = parse_search_space({"x": {"_type": "uniform", "_value": [-10, 10]}})
    study = optuna.create_study(direction="minimize")
    for i in range(trials):
        study.sampler = make_sampler(algo, space, i)
        trial = study.ask()
        x = sample_parameters(algo, space, trial, i)["x"]
        study.tell(trial, x * x)
    assert abs(study.best_params["x"]) < 1.5
    assert min(abs(t.params["x"]) for t in study.trials[12:]) < 1.5  # late picks near the minimum too


def test_the_documented_table_is_the_catalogue():
    from pathlib import Path

    from trialflow.tuning.algorithms import markdown_table

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "algorithms.md").read_text()
    table = page.split("<!-- algorithm table: start -->\n")[1].split("\n<!-- algorithm table: end -->")[0]
    assert table == markdown_table(), (
        "regenerate docs/reference/algorithms.md's table from trialflow.tuning.algorithms.markdown_table()"
    )


def test_gp_fits_on_the_best_half_and_a_draw_of_the_rest():
    import numpy as np

    from trialflow.tuning.gp import model_points

    rng = np.random.RandomState(0)
    small = np.array([3.0, 1.0, 2.0])
    assert list(model_points(small, 10, rng)) == [0, 1, 2]  # under the limit: every point
    y = rng.uniform(size=1000)
    keep = model_points(y, 300, rng)
    assert len(keep) == 300 and len(set(keep.tolist())) == 300 and list(keep) == sorted(keep)
    best150 = set(np.argsort(-y)[:150].tolist())
    assert best150 <= set(keep.tolist())  # every one of the best half kept
    others = [i for i in keep if i not in best150]
    assert np.median(y[others]) < np.median(y[list(best150)])  # the rest a draw, not the next best


@pytest.mark.parametrize(
    ("algorithm", "role", "fits"),
    [
        (AlgorithmConfig(name="GP"), "tuner", True),
        (AlgorithmConfig(name="SMACTuner"), "tuner", True),  # an alias
        (AlgorithmConfig(name="Metis"), "tuner", True),
        (AlgorithmConfig(name="DNGO"), "tuner", True),
        (AlgorithmConfig(name="optuna.samplers.TPESampler"), "tuner", True),  # its cost is not known here
        (AlgorithmConfig(name="TPE"), "tuner", False),
        (AlgorithmConfig(name="PBT"), "tuner", False),
        (AlgorithmConfig(name="BOHB"), "advisor", False),
        (AlgorithmConfig(class_name="my_tuner.MyTuner"), "tuner", False),  # asks in its own process
        (None, "tuner", False),
    ],
)
def test_which_asks_fit_a_model_in_the_asking_process(algorithm, role, fits):
    """What keeps "auto" trial tasks in workers (trialflow.lifecycle.start_place): every
    catalogue entry that needs a model library, and no other."""
    assert ask_fits_model(algorithm, role) is fits


def test_the_asks_that_fit_a_model_are_those_that_need_a_model_library():
    asking = [spec for spec in CATALOGUE if spec.role != "assessor"]  # an assessor judges in the follow
    heavy = {spec.name for spec in asking if ask_fits_model(AlgorithmConfig(name=spec.name), spec.role)}
    assert heavy == {spec.name for spec in asking if spec.needs is not None} == {"GP", "SMAC", "Metis", "DNGO"}
