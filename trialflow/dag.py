"""experiment_dag(config) -> DAG: start -> one mapped task per trial (and their watch) -> end.

``trialConcurrency`` becomes ``max_active_tis_per_dagrun`` on the mapped trial
task. Deferred task instances count toward it (verified on Airflow 3.3), so it
holds exactly while trials wait in the triggerer. A config that does not
validate raises here, so the DAG file shows an import error and no run of a
broken experiment can ever start.
"""

from __future__ import annotations

import inspect
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from trialflow.assets import best_parameters_asset
from trialflow.hooks.concurrency_at_parse import changed_concurrency
from trialflow.hooks.experiment_store import DEFAULT_CONN_ID
from trialflow.limits import MAX_TRIALS_PER_RUN
from trialflow.operators.experiment import (
    ContinueExperimentOperator,
    EndExperimentOperator,
    PublishBestOperator,
    StartExperimentOperator,
    WatchTrialsOperator,
)
from trialflow.operators.trial import SubmitTrialOperator
from trialflow.plan import DagPlan, default_dag_id, load_plan
from trialflow.platforms import hosts

DEFAULT_RETRIES = 2


def _caller_dir() -> Path:
    """The folder of the DAG file that called experiment_dag, for relative config paths."""
    for frame in inspect.stack()[2:]:
        filename = frame.filename
        if not filename.startswith("<") and Path(filename).resolve() != Path(__file__).resolve():
            return Path(filename).resolve().parent
    return Path.cwd()


def experiment_dag(
    config_path: str | Path,
    *,
    dag_id: str | None = None,
    store_conn_id: str = DEFAULT_CONN_ID,
    poll_interval: float = 1.0,
    defer_after: float = 10.0,
    cleanup: bool = False,
    trials_per_run: int | None = None,
    local_queue: str | None = None,
    asset_name: str | None = None,
    **dag_kwargs: Any,
) -> DAG:
    """Build the DAG for one NNI experiment config. Extra keyword arguments go to ``DAG``.

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
    """
    path = Path(config_path).expanduser()
    if not path.is_absolute():
        path = _caller_dir() / path
    plan = load_plan(path)  # the full check, unless these files passed it before (trialflow.plan)
    path = Path(plan.config_path)
    count = plan.trial_count
    if trials_per_run is not None:
        if not plan.unbounded:
            raise ValueError(
                f"{path}: trials_per_run is for experiments without maxTrialNumber; this one runs {count} trials"
            )
        if isinstance(trials_per_run, bool) or not isinstance(trials_per_run, int):
            raise ValueError(f"trials_per_run: expected a whole number, got {trials_per_run!r}")
        if not 1 <= trials_per_run <= MAX_TRIALS_PER_RUN:
            raise ValueError(f"trials_per_run: expected 1..{MAX_TRIALS_PER_RUN}, got {trials_per_run}")
        count = trials_per_run
    default_args = {
        "retries": DEFAULT_RETRIES,
        "retry_delay": timedelta(seconds=5),
        **dag_kwargs.pop("default_args", {}),
    }
    stay_on_host = _place(path, plan, default_args, local_queue)
    dag_kwargs.setdefault("schedule", None)
    dag_kwargs.setdefault("catchup", False)
    dag_kwargs.setdefault("max_active_runs", 1)
    dag_kwargs.setdefault("tags", ["trialflow", "nni"])
    dag_kwargs.setdefault("description", f"NNI experiment {plan.experiment_name or path.name}")
    dag_kwargs.setdefault("doc_md", _doc(plan, count))
    dag_id = dag_id or default_dag_id(path, plan.experiment_name)
    published_on = best_parameters_asset(dag_id, asset_name)  # another DAG's name is refused here
    # trialConcurrency, unless a person changed it for the running experiment (the pages' action
    # asks Airflow to parse this file again, and this parse reads the new value).
    concurrency = changed_concurrency(store_conn_id, dag_id) or plan.trial_concurrency
    # maxExperimentDuration is not a dagrun_timeout: a timed-out run would never reach its end
    # step. The start step sets a deadline; past it no trial starts and running ones are cancelled.
    with DAG(dag_id, default_args=default_args, **dag_kwargs) as dag:
        start = StartExperimentOperator(
            task_id="start_experiment",
            config_path=str(path),
            store_conn_id=store_conn_id,
            trial_count=count if trials_per_run is not None else None,
        )
        trials = SubmitTrialOperator.partial(
            task_id="trial",
            config_path=str(path),
            store_conn_id=store_conn_id,
            poll_interval=poll_interval,
            defer_after=defer_after,
            stay_on_host=stay_on_host,
            max_active_tis_per_dagrun=concurrency,
            map_index_template="{{ trial_label }}",
        ).expand(trial_index=list(range(count)))
        end = EndExperimentOperator(
            task_id="end_experiment",
            config_path=str(path),
            store_conn_id=store_conn_id,
            trigger_rule="all_done",
            cleanup=cleanup,
        )
        # Trials whose task ended while nothing followed them are stopped and closed meanwhile
        # (trialflow.runs.reconcile); the end step waits for the watch and makes a last pass itself.
        watch = WatchTrialsOperator(task_id="watch_trials", config_path=str(path), store_conn_id=store_conn_id)
        start >> trials >> end
        start >> watch >> end
        # An unbounded experiment goes on in follow-on runs; so does one whose maxTrialNumber a
        # person raised past this run's trials (skipped when the experiment is over).
        end >> ContinueExperimentOperator(task_id="continue_experiment", trigger_dag_id=dag.dag_id)
        end >> PublishBestOperator(task_id="publish_best", asset=published_on)
    return dag


def _place(path: Path, plan: DagPlan, default_args: dict[str, Any], local_queue: str | None) -> bool:
    """Send a local experiment's tasks to one host's queue under a multi-host executor, or refuse
    it (trialflow.platforms.hosts); True if its local trials must then stay on that host."""
    from airflow.sdk.configuration import conf

    executor = hosts.executor_class_name(conf.get("core", "executor", fallback=""), default_args.get("executor"))
    queue = local_queue or default_args.get("queue") or conf.get(*hosts.QUEUE_SETTING, fallback=None)
    problem = hosts.placement_problem(plan.platforms, plan.host_bound, executor, queue)
    if problem is not None:
        from trialflow.config.errors import ConfigError  # here: a planned parse skips the config package

        raise ConfigError.single(path, *problem)
    if not (plan.host_bound and hosts.spans_hosts(executor)):
        return False
    default_args["queue"] = queue
    return True


def _doc(plan: DagPlan, count: int) -> str:
    return (
        f"**NNI experiment** `{plan.config_path}`\n\n"
        f"- platform: {', '.join(plan.platforms)}\n"
        f"- {plan.algorithm_kind}: {plan.algorithm or '-'} ({plan.optimize_mode})"
        f"{f', assessor: {plan.assessor}' if plan.assessor else ''}\n"
        f"- trials: {count}"
        f"{' per run, more in follow-on runs until maxExperimentDuration' if plan.unbounded else ''}"
        f", {plan.trial_concurrency} at a time\n"
    )
