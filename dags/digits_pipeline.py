# An Airflow DAG of your own with tuning as one step (the words "airflow" and "dag" let Airflow's
# safe-mode discovery find it): prepare the data, tune an SVC on it (function trials, the
# experiment written here in Python), let a person approve the best parameters, train the final
# model with exactly those.
from __future__ import annotations

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import dag, task

from trialflow.task_group import ExperimentTaskGroup

DIGITS = "experiments/digits"  # relative paths start at this file's folder


@dag(schedule=None, catchup=False, tags=["trialflow", "example"])
def digits_pipeline():
    @task
    def prepare() -> str:
        from pathlib import Path

        import numpy as np
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        out = Path(__file__).resolve().parent / DIGITS / "data" / "digits.npz"
        out.parent.mkdir(exist_ok=True)
        np.savez(out, X=X, y=y)
        return str(out)

    data = prepare()
    tune = ExperimentTaskGroup(
        "tune",
        {
            "experimentName": "digits-svc-pipeline",
            "searchSpace": {
                "C": {"_type": "loguniform", "_value": [0.01, 100]},
                "gamma": {"_type": "loguniform", "_value": [0.0001, 0.1]},
                "kernel": {"_type": "choice", "_value": ["rbf", "poly", "sigmoid"]},
            },
            "trialFunction": "models:svc",  # models.py in trialCodeDirectory
            "trialCodeDirectory": DIGITS,
            "trialConcurrency": 4,
            "maxTrialNumber": 12,
            "tuner": {"name": "TPE", "classArgs": {"optimize_mode": "maximize", "seed": 7}},
            "trainingService": {"platform": "local"},
        },
        inputs={"data": data},  # each trial's svc(params, data=...): the path prepare returned
    )

    approve = ApprovalOperator(
        task_id="approve",
        subject="Train the final digits model?",
        body="Best parameters of the tuning: {{ ti.xcom_pull(task_ids='tune.end_experiment', key='best_parameters') }}",
    )

    @task
    def train_final_model(best: dict, data: str) -> str:
        import pickle
        from pathlib import Path

        import numpy as np
        from sklearn.svm import SVC

        with np.load(data) as arrays:
            model = SVC(**best).fit(arrays["X"], arrays["y"])  # all the data: the tuning chose, this trains
        out = Path(data).parent.parent / "final_model" / "pipeline_model.pkl"
        out.parent.mkdir(exist_ok=True)
        out.write_bytes(pickle.dumps(model))
        return str(out)

    tune >> approve
    approve >> train_final_model(tune.best, data)


digits_pipeline()
