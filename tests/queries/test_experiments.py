"""The experiment page's summary (trialflow.queries.experiments) for Population Based Training:
each generation's progress, the generations the budget a person changed makes, and classArgs
the store holds that no validated config has (said as no population, never a 500)."""

from __future__ import annotations

import pytest

from trialflow.platforms.base import TrialStatus
from trialflow.queries.experiments import experiment_summary
from trialflow.trial.protocol import Metric


def _pbt_experiment(store, class_args: dict, budget: int = 6, limits: dict | None = None) -> None:
    store.open_experiment("epop1")
    config = {"tuner": {"name": "PBTTuner", "classArgs": class_args}, "maxTrialNumber": budget}
    store.set_experiment_attrs("epop1", {"config": config, **({"limits": limits} if limits else {})})


def test_generations_and_their_progress(store):
    from trialflow.config.model import AlgorithmConfig
    from trialflow.config.search_space import parse_search_space
    from trialflow.tuning.asker import ask

    _pbt_experiment(store, {"population_size": 2}, limits={"maxTrialNumber": 8})
    tuner = AlgorithmConfig(name="PBTTuner", class_args={"population_size": 2})
    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    for index in range(3):
        asked = ask(store, "epop1", index, f"epop1-{index}", tuner, space, None, 0 if index < 2 else None)
        if index < 2:
            store.record_metrics(asked.storage_id, [Metric("FINAL", 0, 0.5)])
            store.close(asked.storage_id, TrialStatus.SUCCEEDED, None)
    population = experiment_summary(store.engine, "epop1")["population"]
    assert population == {
        "size": 2,
        "planned": 4,  # the budget as changed (8), not the config's (6)
        "generations": [{"generation": 0, "trials": 2, "ended": 2}, {"generation": 1, "trials": 1, "ended": 0}],
    }


@pytest.mark.parametrize("class_args", [{"population_size": "many"}, {"population_size": 0}, {"factor": [1]}])
def test_class_args_no_config_could_hold_give_no_population_not_an_error(store, class_args):
    _pbt_experiment(store, class_args)
    assert experiment_summary(store.engine, "epop1")["population"] is None
