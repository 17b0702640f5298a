from __future__ import annotations

import math
import statistics

import optuna
import pytest

from trialflow.config.search_space import SearchSpaceError, parse_search_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


def draw(space_raw: dict, n: int = 400, seed: int = 0) -> list[dict]:
    space = parse_search_space(space_raw)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    return [space.sample(study.ask()) for _ in range(n)]


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"_type": "choice", "_value": []}, "at least one option"),
        ({"_type": "choice", "_value": 3}, "expected a list"),
        ({"_type": "randint", "_value": [5, 5]}, "lower < upper"),
        ({"_type": "randint", "_value": [0.5, 5]}, "integers"),
        ({"_type": "randint", "_value": [1]}, "takes 2 numbers"),
        ({"_type": "uniform", "_value": [1, 0]}, "low < high"),
        ({"_type": "uniform", "_value": ["a", 1]}, "takes 2 numbers"),
        ({"_type": "quniform", "_value": [0, 1]}, "takes 3 numbers"),
        ({"_type": "quniform", "_value": [0, 1, 0]}, "q > 0"),
        ({"_type": "loguniform", "_value": [0, 1]}, "low > 0"),
        ({"_type": "qloguniform", "_value": [-1, 1, 0.1]}, "low > 0"),
        ({"_type": "normal", "_value": [0, 0]}, "sigma > 0"),
        ({"_type": "qnormal", "_value": [0, 1, -1]}, "q > 0"),
        ({"_type": "lognormal", "_value": [0, -1]}, "sigma > 0"),
        ({"_type": "qlognormal", "_value": [0, 1]}, "takes 3 numbers"),
        ({"_type": "gaussian", "_value": [0, 1]}, "unknown type 'gaussian'"),
        ({"_type": "uniform"}, "expected {_type"),
        ({"_type": "uniform", "_value": [0, 1], "extra": 1}, "unexpected keys"),
        ({"_type": "uniform", "_value": [0, float("inf")]}, "takes 2 numbers"),
        ({"_type": "uniform", "_value": [True, 2]}, "takes 2 numbers"),
    ],
)
def test_nni_validation_rules(spec, message):
    with pytest.raises(SearchSpaceError, match=message) as err:
        parse_search_space({"p": spec})
    assert err.value.path[0] == "p"


def test_nested_errors_point_into_the_branch():
    raw = {"opt": {"_type": "choice", "_value": [{"_name": "sgd", "lr": {"_type": "uniform", "_value": [1, 0]}}]}}
    with pytest.raises(SearchSpaceError) as err:
        parse_search_space(raw)
    assert err.value.path == ("opt", "_value", 0, "lr", "_value")


def test_randint_is_half_open_and_covers_the_range():
    values = {d["k"] for d in draw({"k": {"_type": "randint", "_value": [2, 6]}})}
    assert values == {2, 3, 4, 5}


def test_uniform_and_loguniform_bounds():
    draws = draw({"u": {"_type": "uniform", "_value": [-1, 1]}, "l": {"_type": "loguniform", "_value": [1e-4, 1]}})
    assert all(-1 <= d["u"] <= 1 and 1e-4 <= d["l"] <= 1 for d in draws)
    # log-uniform: about half the mass below the geometric midpoint 1e-2
    below = sum(d["l"] < 1e-2 for d in draws) / len(draws)
    assert 0.4 < below < 0.6


def test_quniform_is_nni_clip_round():
    # NNI: clip(round(u / q) * q, low, high); with low=0.1, q=0.5 values are 0.1 (clipped), 0.5, 1.0, ... 2.0
    values = {d["q"] for d in draw({"q": {"_type": "quniform", "_value": [0.1, 2.0, 0.5]}})}
    assert values == {0.1, 0.5, 1.0, 1.5, 2.0}


def test_qloguniform_values_are_multiples_of_q_within_bounds():
    values = {d["q"] for d in draw({"q": {"_type": "qloguniform", "_value": [1, 1000, 10]}})}
    assert all(1 <= v <= 1000 for v in values)
    assert all(v == 1 or abs(v / 10 - round(v / 10)) < 1e-9 for v in values)


def test_normal_family_moments():
    draws = draw(
        {
            "n": {"_type": "normal", "_value": [3, 2]},
            "ln": {"_type": "lognormal", "_value": [0, 0.5]},
            "qn": {"_type": "qnormal", "_value": [0, 10, 5]},
        },
        n=2000,
    )
    normals = [d["n"] for d in draws]
    assert abs(statistics.mean(normals) - 3) < 0.2 and abs(statistics.stdev(normals) - 2) < 0.2
    logs = [math.log(d["ln"]) for d in draws]
    assert abs(statistics.mean(logs)) < 0.05 and all(d["ln"] > 0 for d in draws)
    assert all(d["qn"] % 5 == 0 for d in draws)


def test_qlognormal_is_positive_multiple_of_q():
    draws = draw({"q": {"_type": "qlognormal", "_value": [2, 1, 2]}})
    assert all(d["q"] >= 0 and d["q"] % 2 == 0 for d in draws)


def test_choice_keeps_option_types_and_dicts():
    draws = draw({"c": {"_type": "choice", "_value": [1, "two", 3.5, None, [1, 2], {"k": 1}]}})
    seen = {repr(d["c"]) for d in draws}
    assert seen == {"1", "'two'", "3.5", "None", "[1, 2]", "{'k': 1}"}


def test_nested_choice_produces_nni_shape():
    raw = {
        "layer": {
            "_type": "choice",
            "_value": [
                {"_name": "Empty"},
                {"_name": "Conv", "kernel": {"_type": "choice", "_value": [1, 3]}, "fixed": 9},
                {"_name": "Pool", "size": {"_type": "randint", "_value": [2, 4]}},
            ],
        }
    }
    draws = draw(raw)
    names = {d["layer"]["_name"] for d in draws}
    assert names == {"Empty", "Conv", "Pool"}
    for d in draws:
        layer = d["layer"]
        if layer["_name"] == "Empty":
            assert layer == {"_name": "Empty"}
        elif layer["_name"] == "Conv":
            assert set(layer) == {"_name", "kernel", "fixed"} and layer["kernel"] in (1, 3) and layer["fixed"] == 9
        else:
            assert set(layer) == {"_name", "size"} and layer["size"] in (2, 3)


def test_same_key_in_two_branches_gets_distinct_sampler_names():
    raw = {
        "opt": {
            "_type": "choice",
            "_value": [
                {"_name": "a", "lr": {"_type": "uniform", "_value": [0, 1]}},
                {"_name": "b", "lr": {"_type": "loguniform", "_value": [0.1, 1]}},
            ],
        }
    }
    # would raise in Optuna if both branches used the name "lr" with different distributions
    assert len(draw(raw, n=50)) == 50


def test_grid_enumerates_exactly():
    space = parse_search_space(
        {
            "a": {"_type": "choice", "_value": ["x", "y"]},
            "b": {"_type": "randint", "_value": [0, 3]},
            "c": {"_type": "quniform", "_value": [0, 1, 0.5]},
        }
    )
    grid = list(space.grid())
    assert len(grid) == 2 * 3 * 3
    assert {(g["a"], g["b"], g["c"]) for g in grid} == {
        (a, b, c) for a in "xy" for b in range(3) for c in (0.0, 0.5, 1.0)
    }


def test_grid_expands_nested_choices():
    space = parse_search_space(
        {
            "l": {
                "_type": "choice",
                "_value": [{"_name": "E"}, {"_name": "C", "k": {"_type": "choice", "_value": [1, 2, 3]}}],
            }
        }
    )
    assert list(space.grid()) == [
        {"l": {"_name": "E"}},
        {"l": {"_name": "C", "k": 1}},
        {"l": {"_name": "C", "k": 2}},
        {"l": {"_name": "C", "k": 3}},
    ]


def test_grid_refuses_continuous_parameters():
    with pytest.raises(SearchSpaceError, match="GridSearch needs a finite space"):
        parse_search_space({"u": {"_type": "uniform", "_value": [0, 1]}}).grid()
