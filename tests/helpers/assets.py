"""Asset events as Airflow's accessors hand them to a downstream task, carrying what an experiment published."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset
from airflow.sdk.execution_time.comms import AssetEventDagRunReferenceResult

from tests.helpers.summaries import summary
from trialflow.outputs.published import publication


def published(params: dict, run_id: str, dag_id: str = "dag_a") -> dict:
    best = {"trial_index": 0, "trial_id": "t", "parameters": params, "final_metric": 0.5, "final_extra": {}}
    extra, _ = publication(summary(experiment_id=f"exp-{run_id}", best=best, study_best=best), dag_id, run_id, None)
    assert extra is not None
    return extra


def event(asset: Asset, extra: dict, at: datetime, source: str | None = "dag_a") -> AssetEventDagRunReferenceResult:
    return AssetEventDagRunReferenceResult(
        asset={"name": asset.name, "uri": asset.uri, "extra": {}},
        extra=extra,
        source_task_id="publish_best" if source else None,
        source_dag_id=source,
        source_run_id="r" if source else None,
        source_map_index=-1 if source else None,
        source_aliases=[],
        timestamp=at,
    )
