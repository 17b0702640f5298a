"""Population Based Training's plan (trialflow.tuning.pbt): generations by index, NNI's ranking
and cutoff, and every perturbation step, case by case."""

from __future__ import annotations

import math
import random

import pytest

from trialflow.config.search_space import encode, parse_search_space
from trialflow.store.records import Lineage
from trialflow.tuning.pbt import (
    Ended,
    PbtArgs,
    exploit_and_explore,
    generation_of,
    plan_member,
    previous_generation,
    ranked,
)


def test_generations_are_read_from_the_index():
    assert [generation_of(i, 4) for i in (0, 3, 4, 7, 8)] == [(0, 0), (0, 3), (1, 0), (1, 3), (2, 0)]
    assert list(previous_generation(2, 4)) == []
    assert list(previous_generation(5, 4)) == [0, 1, 2, 3]
    assert list(previous_generation(9, 4)) == [4, 5, 6, 7]


def test_class_args_take_either_of_nnis_names_for_the_factor():
    assert PbtArgs.from_class_args({}).factor == 0.2
    assert PbtArgs.from_class_args({"factors": 0.3}).factor == 0.3
    assert PbtArgs.from_class_args({"factor": 0.4, "optimize_mode": "Minimize"}) == PbtArgs(
        optimize_mode="minimize", factor=0.4
    )


def _ended(values: list[float | None], first: int = 0) -> list[Ended]:
    return [Ended(first + i, f"t{first + i}", {"x": 0.1 * (i + 1)}, v) for i, v in enumerate(values)]


@pytest.mark.parametrize(
    "mode, order",
    [("maximize", [2, 0, 1, 3, 4]), ("minimize", [1, 0, 2, 3, 4])],
)
def test_ranking_puts_a_trial_without_a_finite_result_last(mode, order):
    ended = _ended([0.5, 0.1, 0.9, None, math.nan])
    assert [e.index for e in ranked(ended, mode)] == order


SPACE = parse_search_space(
    {
        "batch_size": {"_type": "choice", "_value": [16, 32, 64, 128]},
        "lr": {"_type": "choice", "_value": [0.0001, 0.001, 0.01, 0.1]},
        "momentum": {"_type": "uniform", "_value": [0, 1]},
    }
)


def _population(values: list[float | None]) -> list[Ended]:
    return [
        Ended(i, f"t{i}", {"batch_size": 32, "lr": 0.01, "momentum": 0.2 * i + 0.1}, v) for i, v in enumerate(values)
    ]


def test_a_member_outside_the_worst_fraction_goes_on_from_its_own_checkpoint():
    args = PbtArgs(population_size=4, fraction=0.25, seed=1)
    ended = _population([0.9, 0.8, 0.7, 0.1])
    plan = plan_member(5, args, SPACE, ended)  # member 1: its own trial (1) ranks second
    assert plan is not None
    assert plan.lineage == Lineage(1, 1, 1, "t1", exploited=False)
    assert plan.parameters == ended[1].parameters


def test_a_member_in_the_worst_fraction_copies_a_top_trial_perturbed():
    args = PbtArgs(population_size=4, fraction=0.25, resample_probability=0.0, seed=3)
    ended = _population([0.9, 0.8, 0.7, 0.1])
    plan = plan_member(7, args, SPACE, ended)  # member 3: its own trial (3) ranks last
    assert plan is not None
    assert plan.lineage == Lineage(1, 3, 0, "t0", exploited=True)  # the only top with cutoff 1
    top = ended[0].parameters
    assert plan.parameters["batch_size"] in (16, 64)  # a neighbour of 32, never 32 itself
    assert plan.parameters["lr"] in (0.001, 0.1)
    assert plan.parameters["momentum"] == pytest.approx(top["momentum"] + 0.2) or plan.parameters[
        "momentum"
    ] == pytest.approx(max(top["momentum"] - 0.2, 0.0))
    encode(SPACE, plan.parameters)  # a point of the space


def test_the_plan_is_the_same_for_the_same_index_and_seed_and_differs_between_members():
    args = PbtArgs(population_size=4, fraction=0.5, seed=7)
    ended = _population([0.1, 0.2, 0.3, 0.4])
    assert plan_member(4, args, SPACE, ended) == plan_member(4, args, SPACE, ended)
    plans = [plan_member(i, args, SPACE, ended) for i in range(4, 8)]
    assert [p.lineage.exploited for p in plans if p] == [True, True, False, False]
    assert {p.lineage.parent_index for p in plans[:2] if p} <= {2, 3}


def test_a_member_whose_own_trial_never_ran_copies_a_top_trial():
    args = PbtArgs(population_size=4, fraction=0.25, seed=2)
    ended = [e for e in _population([0.9, 0.8, 0.7, 0.6]) if e.index != 2]
    plan = plan_member(6, args, SPACE, ended)
    assert plan is not None and plan.lineage.exploited and plan.lineage.parent_index == 0


def test_a_generation_of_which_nothing_ran_plans_nothing():
    assert plan_member(4, PbtArgs(population_size=4), SPACE, []) is None


def test_minimize_copies_from_the_lowest():
    args = PbtArgs(optimize_mode="minimize", population_size=4, fraction=0.25, seed=5)
    plan = plan_member(4, args, SPACE, _population([0.9, 0.8, 0.7, 0.1]))
    assert plan is not None and plan.lineage.parent_index == 3 and plan.lineage.exploited


class _Up(random.Random):
    """random() answers 0.99: never resample, always the upper move."""

    def random(self) -> float:
        return 0.99


class _Down(random.Random):
    """random() answers 0.3 (above a resample probability of 0.25, below 0.5): the lower move."""

    def random(self) -> float:
        return 0.3


@pytest.mark.parametrize(
    "spec, value, up, down",
    [
        ({"_type": "choice", "_value": ["a", "b", "c"]}, "b", "c", "a"),
        ({"_type": "choice", "_value": ["a", "b", "c"]}, "c", "c", "b"),  # held at the last
        ({"_type": "randint", "_value": [0, 10]}, 9, 9, 8),  # upper bound is exclusive
        ({"_type": "randint", "_value": [0, 10]}, 0, 1, 0),
        ({"_type": "uniform", "_value": [0, 10]}, 5.0, 7.0, 3.0),  # +-factor of the range
        ({"_type": "uniform", "_value": [0, 10]}, 9.0, 10.0, 7.0),
        ({"_type": "quniform", "_value": [0, 1, 0.1]}, 0.3, 0.4, 0.2),
        ({"_type": "quniform", "_value": [0, 1, 0.1]}, 1.0, 1.0, 0.9),
        ({"_type": "loguniform", "_value": [1e-4, 1]}, 1e-2, 1e-2 * 10 ** (4 * 0.2), 1e-2 / 10 ** (4 * 0.2)),
        ({"_type": "qloguniform", "_value": [1, 100, 1]}, 10, 11, 9),
        ({"_type": "normal", "_value": [0, 2]}, 1.0, 1.4, 0.6),  # +-factor of sigma
        ({"_type": "qnormal", "_value": [0, 2, 0.5]}, 1.0, 1.5, 0.5),
        ({"_type": "lognormal", "_value": [0, 1]}, 1.0, math.exp(0.2), math.exp(-0.2)),
        ({"_type": "qlognormal", "_value": [0, 1, 0.5]}, 0.5, 1.0, 0.0),
    ],
)
def test_each_type_moves_one_step_and_stays_in_the_space(spec, value, up, down):
    space = parse_search_space({"p": spec})
    moved_up = exploit_and_explore({"p": value}, space, 0.2, 0.25, _Up())["p"]
    moved_down = exploit_and_explore({"p": value}, space, 0.2, 0.25, _Down())["p"]
    assert moved_up == pytest.approx(up) and moved_down == pytest.approx(down)
    encode(space, {"p": moved_up})
    encode(space, {"p": moved_down})


@pytest.mark.parametrize(
    "spec",
    [
        {"_type": "choice", "_value": [1, 2, 3]},
        {"_type": "randint", "_value": [0, 5]},
        {"_type": "quniform", "_value": [0, 1, 0.25]},
        {"_type": "loguniform", "_value": [1e-3, 1]},
        {"_type": "qnormal", "_value": [0, 1, 0.5]},
    ],
)
def test_a_resample_draws_a_point_of_the_space(spec):
    space = parse_search_space({"p": spec})
    start = space.params[0].values[0] if spec["_type"] == "choice" else (0.5 if spec["_type"] != "randint" else 2)
    for seed in range(30):
        drawn = exploit_and_explore({"p": start}, space, 0.2, 1.0, random.Random(seed))
        encode(space, drawn)


def test_a_value_the_space_would_refuse_keeps_the_top_trials_value():
    # NNI's bound: 0.9 + q is held to the upper bound 1.0, which is not on this grid (0.05 is
    # no multiple of 0.3): that parameter keeps the top's value, the others still move.
    space = parse_search_space(
        {"p": {"_type": "quniform", "_value": [0.05, 1, 0.3]}, "x": {"_type": "uniform", "_value": [0, 1]}}
    )
    out = exploit_and_explore({"p": 0.9, "x": 0.5}, space, 0.2, 0.0, _Up())
    assert out == {"p": 0.9, "x": pytest.approx(0.7)}


def test_lineage_round_trips_and_ignores_what_is_not_one():
    lineage = Lineage(2, 1, 5, "t5", True, 3, None)
    assert Lineage.from_attr(lineage.to_attr()) == lineage
    assert Lineage.from_attr({"generation": "x"}) is None
    assert Lineage.from_attr([1, 2]) is None
    assert Lineage.from_attr({"generation": 1, "member": 0, "note": "n" * 2000}).note == "n" * 500
