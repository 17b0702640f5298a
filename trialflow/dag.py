"""experiment_dag(config) -> DAG: start -> one mapped task per trial (and their watch) -> end.

``trialConcurrency`` becomes ``max_active_tis_per_dagrun`` on the mapped trial
task. Deferred task instances count toward it (verified on Airflow 3.3), so it
holds exactly while trials wait in the triggerer. A config that does not
validate raises here, so the DAG file shows an import error and no run of a
broken experiment can ever start.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from trialflow.hooks.experiment_store import DEFAULT_CONN_ID
from trialflow.plan import DagPlan, default_dag_id, load_plan
from trialflow.task_group import (
    DEFAULT_RETRIES,
    EXPERIMENT_DEFAULT_ARGS,
    add_experiment_tasks,
    built,
    config_source,
    plan_origin,
    stays_on_host,
    trials_in_run,
)

__all__ = ["DEFAULT_RETRIES", "experiment_dag"]


def experiment_dag(
    config_path: str | Path | Mapping[str, Any],
    *,
    dag_id: str | None = None,
    store_conn_id: str = DEFAULT_CONN_ID,
    poll_interval: float = 1.0,
    defer_after: float = 10.0,
    cleanup: bool = False,
    trials_per_run: int | None = None,
    local_queue: str | None = None,
    asset_name: str | None = None,
    inputs: Mapping[str, Any] | None = None,
    **dag_kwargs: Any,
) -> DAG:
    """Build the DAG for one NNI experiment config. Extra keyword arguments go to ``DAG``.

    ``config_path``: the config's file (relative to the DAG file), or the same keys as a
    mapping written in the DAG file (trialflow.config.inline).
    ``defer_after``: seconds a trial task waits in its worker before deferring to the
    triggerer; shorter trials finish without the deferral's second task start.
    ``cleanup``: the end step removes what the experiment left on its platforms (files on remote
    machines; jobs, ConfigMaps and files on storage on Kubernetes).
    ``trials_per_run``: for an experiment without maxTrialNumber (it goes on in follow-on runs
    until maxExperimentDuration), how many mapped trial tasks each run holds; the default is
    100, or ten waves of trialConcurrency when that is more.
    ``local_queue``: under an executor that may run tasks on several hosts (Celery, Kubernetes,
    Edge), the queue one host serves, for an experiment with the local platform (default:
    ``[trialflow] local_queue``); docs/multi-host.md says why it is required.
    ``asset_name``: the Asset the best parameters are published on when the experiment is over
    (default ``trialflow/<dag_id>/best``); downstream DAGs schedule on
    ``trialflow.assets.best_parameters_asset(dag_id, asset_name)``.
    ``inputs``: values for every trial of a run (Jinja templates, e.g. of the run's conf),
    rendered by the start step (trialflow.trial.inputs).

    The tasks are an ExperimentTaskGroup's (trialflow.task_group), at the DAG's top.
    """
    source = config_source(config_path)
    plan = load_plan(source)  # the full check, unless it passed before (trialflow.plan)
    count = trials_in_run(plan, trials_per_run)
    default_args = {**EXPERIMENT_DEFAULT_ARGS, **dag_kwargs.pop("default_args", {})}
    queue = stays_on_host(plan, default_args, local_queue)
    if queue is not None:
        default_args["queue"] = queue
    dag_kwargs.setdefault("schedule", None)
    dag_kwargs.setdefault("catchup", False)
    dag_kwargs.setdefault("max_active_runs", 1)
    dag_kwargs.setdefault("tags", ["trialflow", "nni"])
    origin = plan_origin(plan)
    dag_kwargs.setdefault("description", f"NNI experiment {plan.experiment_name or Path(origin).name}")
    dag_kwargs.setdefault("doc_md", _doc(plan, count))
    if dag_id is None:
        if origin != plan.config_path:
            raise ValueError("dag_id: an experiment written in the DAG file needs a dag_id")
        dag_id = default_dag_id(Path(origin), plan.experiment_name)
    built(dag_id, None, source, inputs)
    with DAG(dag_id, default_args=default_args, **dag_kwargs) as dag:
        add_experiment_tasks(
            plan,
            dag_id=dag_id,
            group=None,
            store_conn_id=store_conn_id,
            poll_interval=poll_interval,
            defer_after=defer_after,
            cleanup=cleanup,
            trials_per_run=trials_per_run,
            queue=queue,
            asset_name=asset_name,
            inputs=inputs,
        )
    return dag


def _doc(plan: DagPlan, count: int) -> str:
    return (
        f"**NNI experiment** `{plan_origin(plan)}`\n\n"
        f"- platform: {', '.join(plan.platforms)}\n"
        f"- {plan.algorithm_kind}: {plan.algorithm or '-'} ({plan.optimize_mode})"
        f"{f', assessor: {plan.assessor}' if plan.assessor else ''}\n"
        f"- trials: {count}"
        f"{' per run, more in follow-on runs until maxExperimentDuration' if plan.unbounded else ''}"
        f", {plan.trial_concurrency} at a time\n"
    )
