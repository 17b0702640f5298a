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


# -- chosen parameters: encode ----------------------------------------------------------------

EVERY_TYPE = {
    "c": {"_type": "choice", "_value": [1, "two", 3.5, None, True]},
    "lists": {"_type": "choice", "_value": [[1, 2], {"k": 1}, "plain"]},
    "net": {
        "_type": "choice",
        "_value": [
            {"_name": "cnn", "kernel": {"_type": "randint", "_value": [1, 6]}, "depth": 3},
            {"_name": "mlp", "width": {"_type": "quniform", "_value": [16, 256, 16]}},
            {"_name": "none"},
        ],
    },
    "r": {"_type": "randint", "_value": [-3, 4]},
    "u": {"_type": "uniform", "_value": [-1, 1]},
    "qu": {"_type": "quniform", "_value": [0, 1, 0.1]},
    "lu": {"_type": "loguniform", "_value": [1e-5, 1e-1]},
    "qlu": {"_type": "qloguniform", "_value": [1, 1000, 5]},
    "n": {"_type": "normal", "_value": [0, 2]},
    "qn": {"_type": "qnormal", "_value": [10, 3, 0.5]},
    "ln": {"_type": "lognormal", "_value": [0, 1]},
    "qln": {"_type": "qlognormal", "_value": [1, 1, 0.25]},
}


class Replay:
    """A trial that answers each suggestion from ``encode``'s output (what a fixed sampler does)."""

    def __init__(self, values: dict):
        self.values, self.asked = values, []

    def _get(self, name):
        self.asked.append(name)
        return self.values[name]

    def suggest_categorical(self, name, choices):
        value = self._get(name)
        assert value in choices
        return value

    def suggest_int(self, name, low, high):
        value = self._get(name)
        assert low <= value <= high
        return value

    def suggest_float(self, name, low, high, *, log=False):
        value = self._get(name)
        assert low <= value <= high
        return value


def close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return type(a) is type(b) and a == b


def test_every_drawn_point_encodes_to_what_replays_it():
    from trialflow.config.search_space import encode

    space = parse_search_space(EVERY_TYPE)
    for point in draw(EVERY_TYPE, n=300, seed=7):
        encoded = encode(space, point)
        replay = Replay(encoded)
        assert close(space.sample(replay), point), point
        assert sorted(replay.asked) == sorted(encoded)  # nothing left over, nothing missing


@pytest.mark.parametrize(
    ("point", "words"),
    [
        ({"r": 4}, r"^r: expected a whole number in \[-3, 4\) \(randint\), got 4$"),
        ({"r": 1.5}, "r: expected a whole number"),
        ({"u": 1.01}, r"u: expected a number in \[-1, 1\] \(uniform\), got 1.01"),
        ({"u": "0.5"}, "u: expected a number \\(uniform\\), got '0.5'"),
        ({"u": float("nan")}, "u: expected a number"),
        ({"u": True}, "u: expected a number"),
        ({"qu": 0.15}, r"qu: expected a multiple of q=0.1 in \[0, 1\]"),
        ({"lu": 0.5}, "lu: expected a number in"),
        ({"qlu": 7}, "qlu: expected a multiple of q=5"),
        ({"n": 40}, "n: 40 is too far from mu=0 to be drawn"),
        ({"qn": 10.2}, "qn: expected a multiple of q=0.5"),
        ({"ln": 0}, "ln: expected a positive number"),
        ({"c": 2}, r"c: expected one of \[1, 'two', 3.5, None, True\], got 2"),
        ({"c": 1.0 + 1e-9}, "c: expected one of"),
        ({"net": {"_name": "rnn"}}, r"net: expected one of \['cnn', 'mlp', 'none'\]"),
        ({"net": {"_name": "cnn", "kernel": 9, "depth": 3}}, r"net.kernel: expected a whole number in \[1, 6\)"),
        ({"net": {"_name": "cnn", "kernel": 2, "depth": 4}}, r"net.depth: expected 3 \(a constant of 'cnn'\)"),
        ({"net": {"_name": "cnn", "depth": 3}}, "net.kernel: missing"),
        ({"net": {"_name": "mlp", "width": 32, "extra": 1}}, "net.extra: not in the search space"),
        ({"zz": 1}, "zz: not in the search space"),
    ],
)
def test_a_point_outside_the_space_is_refused_by_path(point, words):
    from trialflow.config.search_space import encode

    space = parse_search_space(EVERY_TYPE)
    base = draw(EVERY_TYPE, n=1, seed=1)[0]
    with pytest.raises(SearchSpaceError, match=words):
        encode(space, {**base, **point})


def test_a_missing_parameter_and_a_non_mapping_are_refused():
    from trialflow.config.search_space import encode

    space = parse_search_space(EVERY_TYPE)
    base = draw(EVERY_TYPE, n=1, seed=1)[0]
    del base["qln"]
    with pytest.raises(SearchSpaceError, match="qln: missing: the search space has qlognormal 'qln'"):
        encode(space, base)
    with pytest.raises(SearchSpaceError, match="expected a mapping"):
        encode(space, [1, 2])
