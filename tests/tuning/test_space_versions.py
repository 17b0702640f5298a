"""What the tuner of a changed search space sees of the trials before it
(trialflow.tuning.space_versions.fitted and SpaceView)."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from trialflow.config.search_space import parse_search_space
from trialflow.tuning.space_versions import VERSION_ATTR, SpaceView, fitted, namespace

OLD = {"x": {"_type": "uniform", "_value": [0, 10]}, "opt": {"_type": "choice", "_value": ["sgd", "adam", "rmsprop"]}}
NEW = parse_search_space(
    {"x": {"_type": "uniform", "_value": [2, 3]}, "opt": {"_type": "choice", "_value": ["sgd", "adam"]}}, namespace(1)
)


def _old_trial(x: float, opt: str, state: TrialState = TrialState.COMPLETE) -> optuna.trial.FrozenTrial:
    return create_trial(
        state=state,
        value=1.0 if state == TrialState.COMPLETE else None,
        params={"x": x, "opt": opt},
        distributions={"x": FloatDistribution(0, 10), "opt": CategoricalDistribution(["sgd", "adam", "rmsprop"])},
        user_attrs={"parameters": {"x": x, "opt": opt}},
    )


def test_an_earlier_trial_that_fits_reaches_the_tuner_under_the_new_names():
    seen = fitted(_old_trial(2.5, "adam"), NEW, 1)
    assert seen is not None
    assert seen.params == {"v1:x": 2.5, "v1:opt": "adam"}
    assert seen.distributions == {
        "v1:x": FloatDistribution(2, 3),
        "v1:opt": CategoricalDistribution(["sgd", "adam"]),
    }
    assert seen.value == 1.0


def test_an_earlier_trial_outside_does_not_nor_one_that_failed_or_still_runs():
    assert fitted(_old_trial(7.0, "adam"), NEW, 1) is None
    assert fitted(_old_trial(2.5, "rmsprop"), NEW, 1) is None
    assert fitted(_old_trial(2.5, "adam", TrialState.FAIL), NEW, 1) is None
    running = _old_trial(2.5, "adam", TrialState.RUNNING)
    assert fitted(running, NEW, 1) is None  # drawn under the old names


def test_a_trial_of_the_version_itself_is_as_it_is():
    mine = create_trial(
        state=TrialState.COMPLETE,
        value=0.5,
        params={"v1:x": 2.2, "v1:opt": "sgd"},
        distributions={"v1:x": FloatDistribution(2, 3), "v1:opt": CategoricalDistribution(["sgd", "adam"])},
        user_attrs={VERSION_ATTR: 1, "parameters": {"x": 2.2, "opt": "sgd"}},
    )
    assert fitted(mine, NEW, 1) is mine


def test_the_view_lists_only_what_fits_and_leaves_the_rest_to_the_storage():
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    for x, opt in ((2.5, "adam"), (9.0, "sgd"), (2.1, "rmsprop")):
        study.add_trial(_old_trial(x, opt))
    view = SpaceView(storage, NEW, 1)
    listed = view.get_all_trials(study._study_id)
    assert [t.params for t in listed] == [{"v1:x": 2.5, "v1:opt": "adam"}]
    assert view.get_study_directions(study._study_id) == storage.get_study_directions(study._study_id)
    assert len(storage.get_all_trials(study._study_id)) == 3  # nothing dropped from the store


def test_the_newest_version_reads_only_well_formed_entries():
    from trialflow.tuning.space_versions import newest

    good = {"version": 2, "space": {"x": {"_type": "uniform", "_value": [0, 1]}}}
    assert newest(None) == 0 and newest("junk") == 0 and newest([]) == 0
    assert newest([{"version": 1, "space": {}}, good, {"version": 9}, "x"]) == 2  # a stray entry never counts
