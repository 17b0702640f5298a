"""The view a tuner is handed of its experiment (trialflow.tuning.study_view), as the store
makes it: one experiment's attributes, changed by compare-and-set, and its trials' histories;
nothing of another experiment."""

from __future__ import annotations

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.tuning.asker import ask
from trialflow.tuning.study_view import StudyView

SPACE = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
RANDOM = AlgorithmConfig(name="Random", class_args={"seed": 1})


def test_a_view_reaches_its_experiment_alone(store):
    for experiment_id in ("eview", "eother"):
        store.open_experiment(experiment_id)
        ask(store, experiment_id, 0, f"{experiment_id}-0", RANDOM, SPACE)
    store.set_experiment_attrs("eother", {"custom_tuner": {"state": "theirs"}})
    view: StudyView = store.view("eview")
    assert view.experiment_id == "eview"
    assert view.attr("custom_tuner") is None  # the other experiment's state is not this one's
    assert [h.trial_id for h in view.histories()] == ["eview-0"]


def test_a_change_is_a_compare_and_set_over_what_is_stored(store):
    store.open_experiment("eview")
    view = store.view("eview")
    assert view.change_attr("kept", lambda current: {"n": 1} if current is None else current) == {"n": 1}
    # a change made over a value that is no longer there leaves what is stored
    assert view.change_attr("kept", lambda current: {"n": 2} if current == {"n": 0} else current) == {"n": 1}
    assert view.change_attr("kept", lambda current: {"n": current["n"] + 1}) == {"n": 2}
    assert store.experiment_attr("eview", "kept") == {"n": 2}
