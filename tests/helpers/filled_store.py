"""A store holding one known experiment (its trials in every state, results, curves), for the
read models, the CLI and the pages."""

from __future__ import annotations

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.platforms.base import TrialStatus
from trialflow.store.experiment_store import ExperimentStore
from trialflow.trial.protocol import Metric
from trialflow.tuning.asker import ask

SPACE = parse_search_space(
    {
        "lr": {"_type": "loguniform", "_value": [1e-4, 1e-1]},
        "opt": {
            "_type": "choice",
            "_value": [{"_name": "sgd", "m": {"_type": "uniform", "_value": [0, 1]}}, {"_name": "adam"}],
        },
        "act": {"_type": "choice", "_value": ["=cmd|' /C calc'!A0", "relu", "<img src=x onerror=alert(1)>"]},
    }
)


RANDOM = AlgorithmConfig(name="Random", class_args={"seed": 7, "optimize_mode": "minimize"})


OUTCOMES = [
    TrialStatus.SUCCEEDED,
    TrialStatus.FAILED,
    TrialStatus.SUCCEEDED,
    TrialStatus.EARLY_STOPPED,
    TrialStatus.SUCCEEDED,
    None,
    TrialStatus.SUCCEEDED,
    TrialStatus.SUCCEEDED,
]


def fill(store: ExperimentStore, experiment_id: str = "eq000001", dag_id: str = "dag_a") -> list[dict]:
    store.open_experiment(experiment_id, "minimize")
    study = experiment_id
    store.set_experiment_attrs(
        study,
        {
            "experiment_name": "queries <b>test</b>",
            "dag_id": dag_id,
            "run_id": "r1",
            "platform": "local",
            "optimize_mode": "minimize",
            "config": {"tuner": {"name": "Random"}, "maxTrialNumber": 8, "trainingService": {"platform": "local"}},
        },
    )
    made = []
    for index, outcome in enumerate(OUTCOMES):
        asked = ask(store, study, index, f"{experiment_id}-{index:04d}", RANDOM, SPACE)
        store.set_status(asked.storage_id, TrialStatus.RUNNING, handle={"platform": "local", "trial_dir": "/x"})
        store.record_metrics(asked.storage_id, [Metric("PERIODICAL", s, 10.0 - s - index / 10) for s in range(5)])
        final = 1.0 + index / 10 if outcome == TrialStatus.SUCCEEDED else None
        if outcome is not None:
            if final is not None:
                store.record_metrics(asked.storage_id, [Metric("FINAL", 0, final)])
            store.finish(asked.storage_id, outcome, final, None if outcome != TrialStatus.FAILED else "boom")
        made.append({"index": index, "parameters": asked.parameters, "final": final, "status": outcome})
    return made
