"""What a person with edit access sends to the steering actions (issue 37, items 3 to 6): a
``_name`` the search space does not have, durations built to backtrack, numbers Python reads
oddly ("²", 5,000 digits, 10**400), and a thousand added trials. Each is refused naming its key,
in linear time, without a crash, and the queue has a cap. Through the store here; through the
real api-server and scheduler in test_steering_routes.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.steering.test_steering import CONFIG
from trialflow import steering
from trialflow.config import load_config
from trialflow.config.search_space import parse_search_space, point_problems
from trialflow.config.units import MAX_UNIT_STRING, parse_duration, parse_size_mb, whole_number
from trialflow.experiment import Experiment
from trialflow.limits import MAX_WAITING_TRIALS
from trialflow.platforms.base import TrialStatus
from trialflow.runs import start_run
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.tuning.asker import ask

SPACE = parse_search_space(
    {
        "lr": {"_type": "loguniform", "_value": [0.001, 0.1]},
        "opt": {"_type": "choice", "_value": [{"_name": "sgd", "m": {"_type": "uniform", "_value": [0, 1]}}, "adam"]},
        "n": {"_type": "randint", "_value": [1, 5]},
    }
)
POINT = {"lr": 0.01, "opt": {"_name": "sgd", "m": 0.5}, "n": 2}
ODD_NUMBERS = ["²", "¹²", "٣", "１２", "1" * 5000, 10**400, -(10**400), "1e400", "0x10", " ", ""]


def deep(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("planted", [deep(500), "x" * 1_000_000, {"a": 1}, "sgd"])
def test_a_top_level_name_is_not_a_parameter(planted):
    problems = point_problems(SPACE, {**POINT, "_name": planted})
    assert [str(p) for p in problems] == ["_name: not in the search space; expected lr, n, opt"]
    # Inside a nested choice, its own _name still names the option.
    assert point_problems(SPACE, POINT) == []


HUGE_OR_ODD = [10**400, -(10**400), 2**1024, float("inf"), float("nan"), "x" * 1_000_000, deep(500)]


@pytest.mark.parametrize("value", HUGE_OR_ODD)
def test_a_huge_or_odd_parameter_value_is_a_problem_not_a_crash(value):
    for key in ("lr", "n", "opt"):
        (problem,) = point_problems(SPACE, {**POINT, key: value})
        assert problem.path[0] == key and len(str(problem)) < 300, str(problem)[:400]


@pytest.mark.parametrize("text", ["1" + " " * 100_000 + "x", " " * 1_000_000 + "1h", "1" * 100_000 + "h"])
def test_a_long_duration_or_size_string_is_refused_by_its_length(text):
    """The old pattern backtracked quadratically over runs of spaces (100,000 took a minute);
    nothing longer than MAX_UNIT_STRING is matched at all now."""
    with pytest.raises(ValueError, match=f"at most {MAX_UNIT_STRING} characters"):
        parse_duration(text)
    with pytest.raises(ValueError, match=f"at most {MAX_UNIT_STRING} characters"):
        parse_size_mb(text)


def test_within_the_bound_the_worst_shape_is_refused_and_ordinary_spellings_parse():
    """Within the bound the worst case (spaces then a wrong unit) is refused, and the ordinary
    spellings still parse, spaces and all."""
    worst = "1" + " " * (MAX_UNIT_STRING - 2) + "x"
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(worst)
    assert [parse_duration(v) for v in ("90", " 2 m ", "1.5h", "1D", "10\th")] == [90, 120, 5400, 86400, 36000]
    assert parse_size_mb(" 8 GB ") == 8192


@pytest.mark.parametrize("value", ODD_NUMBERS)
def test_odd_numbers_are_refused_as_durations_and_sizes(value):
    with pytest.raises(ValueError, match="expected a"):
        parse_duration(value)
    with pytest.raises(ValueError, match="expected a"):
        parse_size_mb(value)


@pytest.mark.parametrize("text", ["²", "¹²", "٣", "１２", "1" * 19, "-1", "+1", "1 ", "", "0x1"])
def test_whole_number_reads_ascii_digits_only(text):
    assert whole_number(text) is None


def test_whole_number_reads_what_it_should():
    assert [whole_number(t) for t in ("0", "7", "0042", "9" * 18)] == [0, 7, 42, int("9" * 18)]


@pytest.mark.parametrize("key", steering.LIMIT_KEYS)
@pytest.mark.parametrize("value", [*ODD_NUMBERS, True, 2.5, [1], {"a": 1}, None])
def test_every_odd_limit_is_bad_input_naming_its_key(key, value):
    if key == "maxExperimentDuration" and value == 2.5:
        return  # two and a half seconds: a duration
    with pytest.raises(steering.BadInput) as refused:
        steering.check_limits({key: value})
    assert str(refused.value).startswith(f"{key}: expected") and len(str(refused.value)) < 200


@pytest.fixture
def running(tmp_path: Path) -> tuple[Experiment, ExperimentStore]:
    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "ecap", tmp_path / "work")
    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    start_run(experiment, store, "dag_a", "r1", {})
    return experiment, store


def test_an_experiment_holds_at_most_its_cap_of_waiting_trials(running):
    experiment, store = running
    for i in range(MAX_WAITING_TRIALS):
        steering.add_trial(store, "ecap", {"x": i / MAX_WAITING_TRIALS}, "mallory")
    with pytest.raises(steering.BadInput, match=f"at most {MAX_WAITING_TRIALS} asked-for trials waiting"):
        steering.add_trial(store, "ecap", {"x": 0.5}, "mallory")
    assert store.waiting_count("ecap") == MAX_WAITING_TRIALS
    assert steering.limits(store, "ecap")["maxTrialNumber"] == 4 + MAX_WAITING_TRIALS  # the refused one added none
    # One taken by a trial frees one place.
    taken = ask(store, "ecap", 0, "ecap-0000", experiment.algorithm, experiment.space)
    assert taken.parameters == {"x": 0.0}  # the oldest asked-for one
    assert store.waiting_count("ecap") == MAX_WAITING_TRIALS - 1
    steering.add_trial(store, "ecap", {"x": 0.5}, "mallory")


def test_rerun_failed_queues_all_or_nothing_within_the_cap(running):
    experiment, store = running
    for index in range(3):
        asked = ask(store, "ecap", index, f"ecap-{index:04d}", experiment.algorithm, experiment.space)
        store.finish(asked.storage_id, TrialStatus.FAILED, None, "boom")
    for _ in range(MAX_WAITING_TRIALS - 2):
        steering.add_trial(store, "ecap", {"x": 0.25}, "mallory")
    with pytest.raises(steering.BadInput, match="these 3 would not fit"):
        steering.rerun_trials(store, "ecap", "mallory")
    assert store.waiting_count("ecap") == MAX_WAITING_TRIALS - 2  # none of the three queued


def test_the_waiting_trials_of_an_ended_experiment_are_dropped_and_said(running):
    _, store = running
    for _ in range(3):
        steering.add_trial(store, "ecap", {"x": 0.5}, "mallory")
    assert steering.drop_waiting(store, "ecap") == 3
    assert store.waiting_count("ecap") == 0 and steering.waiting_trials(store, "ecap") == []
    last = steering.history(store, "ecap")[-1]
    assert (last["by"], last["action"]) == ("trialflow", "drop waiting trials") and "3 asked-for" in last["detail"]
    assert steering.drop_waiting(store, "ecap") == 0  # idempotent: nothing more said
    assert steering.history(store, "ecap")[-1] == last


def test_people_adding_at_the_last_free_places_at_once_never_pass_the_cap(running, tmp_path):
    """Eight adds race for the last three places (SQLite's concurrent writers, one store each, as
    several api-server workers would): three land, five are refused, the queue holds the cap."""
    import threading

    _, store = running
    for _ in range(MAX_WAITING_TRIALS - 3):
        steering.add_trial(store, "ecap", {"x": 0.5}, "mallory")
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def add() -> None:
        mine = ExperimentStore(sqlite_url(tmp_path / "s.db"))
        barrier.wait()
        try:
            steering.add_trial(mine, "ecap", {"x": 0.25}, "mallory")
            outcomes.append("added")
        except steering.BadInput:
            outcomes.append("refused")

    threads = [threading.Thread(target=add) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["added"] * 3 + ["refused"] * 5
    assert store.waiting_count("ecap") == MAX_WAITING_TRIALS
    assert steering.limits(store, "ecap")["maxTrialNumber"] == 4 + MAX_WAITING_TRIALS  # each landed one counted once
