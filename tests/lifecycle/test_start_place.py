"""Where trial tasks start by default ("auto"): every rule, its order, and the author's word
over it (trialflow.lifecycle.start_place)."""

from __future__ import annotations

import pytest

from trialflow.lifecycle.start_place import CAPACITY_SHARE, START_PLACES, choose


def _choose(requested: str = "auto", **overrides: object):
    facts: dict[str, object] = {
        "trial_tasks": 20,
        "queue": None,
        "ask_fits_model": False,
        "algorithm": "TPE",
        "triggerer_capacity": 1000,
    }
    facts.update(overrides)
    return choose(requested, **facts)  # type: ignore[arg-type]


def test_an_experiment_that_needs_no_worker_starts_in_the_triggerer():
    assert _choose().place == "triggerer"


@pytest.mark.parametrize(
    ("facts", "said"),
    [
        ({"queue": "host-a"}, "queue 'host-a'"),
        ({"ask_fits_model": True, "algorithm": "GP"}, "GP fits a model at each ask"),
        ({"trial_tasks": 251}, "251 trial tasks a run is more than a quarter of the triggerer's capacity (1000)"),
        ({"trial_tasks": 26, "triggerer_capacity": 100}, "capacity (100)"),
    ],
)
def test_auto_keeps_the_worker_where_the_experiment_needs_it_and_says_why(facts, said):
    chosen = _choose(**facts)
    assert chosen.place == "worker"
    assert said in chosen.why


def test_the_capacity_share_is_inclusive_and_a_tiny_capacity_still_admits_one():
    assert _choose(trial_tasks=1000 // CAPACITY_SHARE).place == "triggerer"
    assert _choose(trial_tasks=1, triggerer_capacity=1).place == "triggerer"
    assert _choose(trial_tasks=2, triggerer_capacity=1).place == "worker"


@pytest.mark.parametrize("place", ["worker", "triggerer"])
def test_the_authors_word_wins_over_every_rule(place):
    chosen = _choose(place, queue="host-a", ask_fits_model=True, trial_tasks=999)
    assert chosen == (place, f"start_trials_in={place!r}")


def test_the_authors_triggerer_says_when_its_trials_fill_the_triggerers_capacity():
    assert _choose("triggerer", trial_tasks=999).why == "start_trials_in='triggerer'"
    for tasks in (1000, 10_000):
        chosen = _choose("triggerer", trial_tasks=tasks)
        assert chosen.place == "triggerer"
        assert chosen.why.startswith("start_trials_in='triggerer'; ")
        assert f"its {tasks} trial tasks fill the triggerer's capacity (1000)" in chosen.why
        assert "the run's watch" in chosen.why and "raise [triggerer] capacity" in chosen.why
    assert _choose("worker", trial_tasks=10_000).why == "start_trials_in='worker'"


def test_a_place_that_is_none_of_them_is_refused_by_name():
    with pytest.raises(ValueError, match="start_trials_in: expected one of auto, worker, triggerer, got 'cloud'"):
        _choose("cloud")
    assert START_PLACES == ("auto", "worker", "triggerer")
