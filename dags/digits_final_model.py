# An Airflow DAG downstream of the digits experiment (the words "airflow" and "dag" let Airflow's
# safe-mode discovery find it): when the experiment publishes its best trial, a person approves it
# (Airflow's Required Actions page, or its REST API), then the model that trial trained (kept in
# the artifact store and named on the Asset) is promoted into the experiment's folder and loaded
# to check it; an experiment that keeps no artifacts gets its final model trained instead. Where the
# experiment is tracked in MLflow (its config's `mlflow` key, with `registeredModel`), the approved
# model also becomes a new version in MLflow's model registry, saying who approved it and when.
from __future__ import annotations

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import dag, task

from trialflow.assets import (
    approval_text,
    best_artifact,
    best_parameters,
    best_parameters_asset,
    register_best_model,
)

DIGITS_BEST = best_parameters_asset("trialflow_digits-svc")  # the experiment DAG's id


@dag(
    schedule=[DIGITS_BEST],
    catchup=False,
    tags=["trialflow", "example"],
    user_defined_macros={"approval_text": approval_text},
)
def digits_final_model():
    # What the person approves is what promote_model will use: the result the experiment DAG
    # itself published (not any event's raw extra), escaped, its link only to this Airflow.
    approve = ApprovalOperator(
        task_id="approve",
        subject="Train the final digits model?",
        body="{{ approval_text(triggering_asset_events) }}",
    )

    @task
    def promote_model(**context) -> str:
        import json
        import pickle
        from pathlib import Path

        from sklearn.datasets import load_digits

        best = best_parameters(context)
        X, y = load_digits(return_X_y=True)
        folder = Path(best.directory or ".") / "final_model"
        folder.mkdir(parents=True, exist_ok=True)
        if any(a.name == "model.pkl" for a in best.artifacts):
            # the model the best trial trained, as it kept it (through the store's connection)
            with best_artifact(best, "model.pkl").open("rb") as source:
                data = source.read()
            source_url = best.artifact_url("model.pkl")
        else:  # an experiment that keeps no artifacts: train it with the approved parameters
            from sklearn.svm import SVC

            data = pickle.dumps(SVC(**best.parameters).fit(X, y))
            source_url = None
        model = pickle.loads(data)  # trusted: written by the experiment DAG's own trial
        accuracy = float(model.score(X, y))  # it loads and predicts, or this task fails
        (folder / "model.pkl").write_bytes(data)
        (folder / "model.json").write_text(
            json.dumps(
                {
                    "experiment_id": best.experiment_id,
                    "trial_id": best.trial_id,
                    "parameters": best.parameters,
                    "metric": best.metric,
                    "promoted_from": source_url,
                    "accuracy_on_all_data": accuracy,
                    "approved_in_run": context["run_id"],
                },
                indent=2,
            )
        )
        return str(folder / "model.pkl")

    @task
    def register_model(**context) -> str:
        from airflow.sdk.exceptions import AirflowSkipException

        from trialflow.tracking.registry import NotRegistered

        best = best_parameters(context)
        if not any(a.name == "model.pkl" for a in best.artifacts):
            raise AirflowSkipException("the best trial kept no model.pkl: nothing to register")
        try:
            version = register_best_model(context, best, "model.pkl", approval_task_id="approve", flavor="sklearn")
        except NotRegistered as exc:  # the experiment is not tracked in MLflow, or names no model
            raise AirflowSkipException(str(exc)) from None
        return f"{version.name} version {version.version} ({version.source})"

    approve >> [promote_model(), register_model()]


digits_final_model()
