# An Airflow DAG downstream of the digits experiment (the words "airflow" and "dag" let Airflow's
# safe-mode discovery find it): when the experiment publishes its best parameters, a person
# approves them (Airflow's Required Actions page, or its REST API), then the final model is
# trained with exactly those parameters and saved in the experiment's folder.
from __future__ import annotations

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import dag, task

from trialflow.assets import approval_text, best_parameters, best_parameters_asset

DIGITS_BEST = best_parameters_asset("trialflow_digits-svc")  # the experiment DAG's id


@dag(
    schedule=[DIGITS_BEST],
    catchup=False,
    tags=["trialflow", "example"],
    user_defined_macros={"approval_text": approval_text},
)
def digits_final_model():
    # What the person approves is what train_final_model will use: the result the experiment DAG
    # itself published (not any event's raw extra), escaped, its link only to this Airflow.
    approve = ApprovalOperator(
        task_id="approve",
        subject="Train the final digits model?",
        body="{{ approval_text(triggering_asset_events) }}",
    )

    @task
    def train_final_model(**context) -> str:
        import json
        import pickle
        from pathlib import Path

        from sklearn.datasets import load_digits
        from sklearn.svm import SVC

        best = best_parameters(context)
        X, y = load_digits(return_X_y=True)
        model = SVC(**best.parameters).fit(X, y)  # all the data: the tuning chose, this trains
        folder = Path(best.directory or ".") / "final_model"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.pkl").write_bytes(pickle.dumps(model))
        (folder / "model.json").write_text(
            json.dumps(
                {
                    "experiment_id": best.experiment_id,
                    "trial_id": best.trial_id,
                    "parameters": best.parameters,
                    "metric": best.metric,
                    "approved_in_run": context["run_id"],
                },
                indent=2,
            )
        )
        return str(folder / "model.pkl")

    approve >> train_final_model()


digits_final_model()
