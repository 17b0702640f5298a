# An Airflow DAG that tunes two model families side by side and keeps the better one (the words
# "airflow" and "dag" let Airflow's safe-mode discovery find it). Each task group is its own
# experiment: its own trials, concurrency, pages and Asset.
from __future__ import annotations

from airflow.sdk import dag, task

from trialflow.task_group import ExperimentTaskGroup

DIGITS = "experiments/digits"  # relative paths start at this file's folder
COMMON = {
    "trialCodeDirectory": DIGITS,
    "trialConcurrency": 2,
    "maxTrialNumber": 6,
    "trainingService": {"platform": "local"},
}


@dag(schedule=None, catchup=False, tags=["trialflow", "example"])
def digits_two_models():
    svc = ExperimentTaskGroup(
        "tune_svc",
        {
            **COMMON,
            "experimentName": "digits-svc",
            "searchSpace": {
                "C": {"_type": "loguniform", "_value": [0.01, 100]},
                "gamma": {"_type": "loguniform", "_value": [0.0001, 0.1]},
                "kernel": {"_type": "choice", "_value": ["rbf", "poly"]},
            },
            "trialFunction": "models:svc",
            "tuner": {"name": "TPE", "classArgs": {"optimize_mode": "maximize", "seed": 1}},
        },
    )
    forest = ExperimentTaskGroup(
        "tune_forest",
        {
            **COMMON,
            "experimentName": "digits-forest",
            "searchSpace": {
                "n_estimators": {"_type": "quniform", "_value": [10, 200, 10]},
                "max_depth": {"_type": "quniform", "_value": [2, 20, 1]},
            },
            "trialFunction": "models:forest",
            "tuner": {"name": "TPE", "classArgs": {"optimize_mode": "maximize", "seed": 2}},
        },
    )

    @task
    def pick(svc_summary: dict, forest_summary: dict) -> dict:
        """The family whose best trial scored higher, with its parameters."""
        scored = [
            (summary["study_best"]["final_metric"], family, summary["study_best"]["parameters"])
            for family, summary in (("svc", svc_summary), ("forest", forest_summary))
        ]
        accuracy, family, parameters = max(scored, key=lambda s: s[0])
        return {"family": family, "parameters": parameters, "accuracy": accuracy}

    pick(svc.summary, forest.summary)


digits_two_models()
