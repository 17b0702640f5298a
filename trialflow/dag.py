"""experiment_dag(config) -> DAG: start -> one mapped task per trial (and their watch) -> end.

The tasks are the one converter's (trialflow.authoring.converter) at the DAG's top; an
ExperimentTaskGroup builds the same ones under its group id. A config that does not validate
raises here: the DAG file shows an import error, and no run of a broken experiment starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from trialflow.authoring.converter import (
    DEFAULT_RETRIES,
    EXPERIMENT_DEFAULT_ARGS,
    ExperimentOptions,
    add_experiment_tasks,
    describe,
    load,
    plan_origin,
    stays_on_host,
    trial_start_place,
    trials_in_run,
)
from trialflow.authoring.dag_sources import built
from trialflow.authoring.plan import default_dag_id

__all__ = ["DEFAULT_RETRIES", "experiment_dag"]


def experiment_dag(
    config_path: str | Path | Mapping[str, Any],
    *,
    dag_id: str | None = None,
    options: ExperimentOptions | None = None,
    **dag_kwargs: Any,
) -> DAG:
    """Build the DAG for one NNI experiment config.

    ``config_path``: the config's file (relative to the DAG file), or the same keys as a
    mapping written in the DAG file (trialflow.config.inline). ``dag_id``: the default is
    ``trialflow_<config file's stem>``; a config written in the DAG file needs one.
    The keyword arguments of trialflow.authoring.converter.ExperimentOptions (``store_conn_id``,
    ``poll_interval``, ``defer_after``, ``cleanup``, ``trials_per_run``, ``local_queue``,
    ``asset_name``, ``inputs``; or ``options=ExperimentOptions(...)``, which they override)
    say how the tasks are built; for an experiment without maxTrialNumber (it goes on in
    follow-on runs until maxExperimentDuration) each run holds ``trials_per_run`` trial tasks.
    Downstream DAGs schedule on ``trialflow.assets.best_parameters_asset(dag_id, asset_name)``.
    Every other keyword argument goes to ``DAG``.
    """
    options = ExperimentOptions.take(dag_kwargs, options)
    source, plan = load(config_path)
    count = trials_in_run(plan, options.trials_per_run)
    default_args = {**EXPERIMENT_DEFAULT_ARGS, **dag_kwargs.pop("default_args", {})}
    queue = stays_on_host(plan, default_args, options.local_queue)
    if queue is not None:
        default_args["queue"] = queue
    dag_kwargs.setdefault("schedule", None)
    dag_kwargs.setdefault("catchup", False)
    dag_kwargs.setdefault("max_active_runs", 1)
    dag_kwargs.setdefault("tags", ["trialflow", "nni"])
    origin = plan_origin(plan)
    dag_kwargs.setdefault("description", f"NNI experiment {plan.experiment_name or Path(origin).name}")
    dag_kwargs.setdefault("doc_md", describe(plan, count, trial_start_place(plan, options, count, queue)))
    if dag_id is None:
        if origin != plan.config_path:
            raise ValueError("dag_id: an experiment written in the DAG file needs a dag_id")
        dag_id = default_dag_id(Path(origin), plan.experiment_name)
    built(dag_id, None, source, options.inputs)
    with DAG(dag_id, default_args=default_args, **dag_kwargs) as dag:
        add_experiment_tasks(plan, options, dag_id=dag_id, group=None, queue=queue)
    return dag
