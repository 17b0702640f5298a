from __future__ import annotations

import pytest

from trialflow.config.model import AlgorithmConfig
from trialflow.tuning.search_space import parse_search_space
from trialflow.tuning.algorithms import UnsupportedAlgorithm, canonical_tuner_name, check_algorithms

SPACE = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]},
                            "k": {"_type": "choice", "_value": ["a", "b"]}})


@pytest.mark.parametrize("name, canonical", [("TPE", "TPE"), ("tpe", "TPE"), ("Random", "Random"),
                                             ("GridSearch", "GridSearch"), ("grid_search", "GridSearch")])
def test_supported_names(name, canonical):
    assert canonical_tuner_name(AlgorithmConfig(name=name)) == canonical


@pytest.mark.parametrize("name, closest", [("SMAC", "TPE"), ("BatchTuner", "GridSearch"), ("MetisTuner", "TPE"),
                                           ("Anneal", "TPE")])
def test_unsupported_names_say_the_closest_choice(name, closest):
    with pytest.raises(UnsupportedAlgorithm, match=f"closest supported choice is '{closest}'"):
        canonical_tuner_name(AlgorithmConfig(name=name))


def test_custom_class_is_refused():
    with pytest.raises(UnsupportedAlgorithm, match="custom tuner className"):
        canonical_tuner_name(AlgorithmConfig(class_name="my.Tuner"))


def test_check_algorithms_reports_grid_on_continuous_space():
    problems = check_algorithms(AlgorithmConfig(name="GridSearch"), None, None, SPACE)
    assert problems == [("searchSpace.x", "GridSearch needs a finite space, but 'x' is uniform; "
                         "use choice, randint, quniform or qloguniform")]


def test_check_algorithms_rejects_bad_optimize_mode():
    problems = check_algorithms(AlgorithmConfig(name="TPE", class_args={"optimize_mode": "maximise"}), None, None, SPACE)
    assert problems[0][0] == "tuner.classArgs.optimize_mode"
