"""The two ends of an experiment DAG: start (store, folder, platform) and end (the summary)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from trialflow.hooks import airflow_connections
from trialflow.hooks.store import DEFAULT_CONN_ID, ExperimentStoreHook
from trialflow.operators.trial import experiment_for

if TYPE_CHECKING:
    from trialflow.experiment import Experiment
    from trialflow.tuning.store import ExperimentStore


class _ExperimentStep(BaseOperator):
    """What the start and end steps share: the config and the store connection.

    :param config_path: the NNI experiment config (v1 or v2 YAML); templated.
    :param store_conn_id: the ``trialflow`` connection of the experiment store (absent: a
        SQLite file under ``$AIRFLOW_HOME``).
    """

    template_fields: Sequence[str] = ("config_path",)
    ui_color = "#d9ead3"

    def __init__(self, *, config_path: str, store_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any):
        super().__init__(**kwargs)
        self.config_path = config_path
        self.store_conn_id = store_conn_id

    def owned_experiment(self, context: Context, check: bool = False) -> tuple[Experiment, ExperimentStore]:
        """The run's experiment and the store, once the store says this DAG may drive it: an id a
        run's conf names is checked before anything of it is read or written."""
        from trialflow.experiment import ExperimentNotOwned, check_owner

        experiment = experiment_for(self.config_path, context, check=check)
        store = ExperimentStoreHook(self.store_conn_id).get_conn()
        conf = getattr(context.get("dag_run"), "conf", None) or {}
        try:
            check_owner(store, experiment.experiment_id, context["dag"].dag_id, conf)
        except ExperimentNotOwned as exc:
            raise AirflowFailException(str(exc)) from None
        return experiment, store


class StartExperimentOperator(_ExperimentStep):
    """Create (or re-open, on a cleared run) the experiment in the store and prepare the platform.

    The config is checked in full here (platform preflight included), before any trial
    starts: a broken config fails this step and nothing else runs. Returns the run's trial
    window and the experiment id (its XCom).

    :param config_path: the NNI experiment config (v1 or v2 YAML); templated.
    :param store_conn_id: the ``trialflow`` connection of the experiment store.
    :param trial_count: the DAG's fan-out (trials per run), when it is not the config's own.
    """

    def __init__(self, *, trial_count: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.trial_count = trial_count

    def execute(self, context: Context) -> dict[str, Any]:
        from trialflow.experiment import continued_run
        from trialflow.tuning.store import safe_url

        experiment, store = self.owned_experiment(context, check=True)  # in full: nothing has started yet
        config = experiment.config
        conf = getattr(context.get("dag_run"), "conf", None) or {}
        resumed = store.experiment_exists(experiment.experiment_id)
        experiment.open(store)
        store.set_experiment_attrs(
            experiment.experiment_id,
            {**experiment.description(), "dag_id": context["dag"].dag_id, "run_id": context["run_id"]},
        )
        window = experiment.start_run(store, context["run_id"], continues=continued_run(conf), count=self.trial_count)
        connections = airflow_connections()
        for i in range(len(config.training_service)):
            experiment.platform(i, connections).prepare_sync(experiment.experiment_id)
        self.log.info(
            "Experiment %s (%s): trials %d..%d, %d at a time, on %s; files in %s",
            experiment.experiment_id,
            "continued" if resumed else "new",
            window.first_index,
            window.first_index + window.count - 1,
            config.trial_concurrency,
            ", ".join(config.platform_names),
            experiment.directory,
        )
        return {
            "experiment_id": experiment.experiment_id,
            "directory": str(experiment.directory),
            "trial_count": window.count,
            "first_trial_index": window.first_index,
            "resumed": resumed,
            "deadline": window.deadline,
            "trial_concurrency": config.trial_concurrency,
            "store": safe_url(store.url),
        }


def format_table(rows: list[dict[str, Any]], best_index: int | None) -> str:
    """A plain-text results table for the task log; a dict final's other keys follow its value."""
    lines = [f"{'':1} {'trial':>5}  {'id':<14} {'status':<14} {'final':>12}  {'#int':>4}  parameters"]
    for r in rows:
        final = "" if r["final_metric"] is None else f"{r['final_metric']:.6g}"
        mark = "*" if r["trial_index"] == best_index else " "
        extra = f"  {r['final_extra']}" if r.get("final_extra") else ""
        lines.append(
            f"{mark} {r['trial_index']:>5}  {r['trial_id'] or '':<14} {r['status'] or '':<14} "
            f"{final:>12}  {r['intermediate_count']:>4}  {r['parameters']}{extra}"
        )
    return "\n".join(lines)


class EndExperimentOperator(_ExperimentStep):
    """Summarise the experiment from the store: per-trial table, best trial, counts.

    Runs whatever happened to the trials (trigger rule all_done). It fails only
    when no trial succeeded, because then there is no result to report. With
    ``cleanup=True`` it then asks each platform to remove the experiment's files
    (remote machines: the trial folders; local results are kept, as NNI keeps them).

    :param config_path: the NNI experiment config (v1 or v2 YAML); templated.
    :param store_conn_id: the ``trialflow`` connection of the experiment store.
    :param cleanup: remove the experiment's files from the platforms after summarising.
    """

    def __init__(self, *, cleanup: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.cleanup = cleanup

    def _cleanup(self, experiment: Any) -> None:
        connections = airflow_connections()
        for i in range(len(experiment.config.training_service)):
            self.log.info(
                "Removing experiment %s's files from %s", experiment.experiment_id, experiment.config.platform_names[i]
            )
            experiment.platform(i, connections).cleanup_sync(experiment.experiment_id)

    def execute(self, context: Context) -> dict[str, Any]:
        from trialflow.tuning.store import best_row

        experiment, store = self.owned_experiment(context)
        window = experiment.window(store, context["run_id"])
        if not window.count:
            raise AirflowFailException(
                f"experiment {experiment.experiment_id}: this run has no trials (its start step did not give it any)"
            )
        all_rows = store.trial_rows(experiment.experiment_id)
        # A run that continues a study reports its own trials, and the study's best beside them.
        end = window.first_index + window.count
        rows = [r for r in all_rows if window.first_index <= (r["trial_index"] or 0) < end]
        mode = experiment.config.optimize_mode
        best = best_row(rows, mode)
        study_best = best_row(all_rows, mode)
        counts = Counter(r["status"] for r in rows)
        keep = ("trial_index", "trial_id", "parameters", "final_metric", "final_extra")
        summary = {
            "experiment_id": experiment.experiment_id,
            "experiment_name": experiment.config.experiment_name,
            "optimize_mode": mode,
            "status_counts": dict(counts),
            "best": None if best is None else {k: best[k] for k in keep},
            "study_best": None if study_best is None else {k: study_best[k] for k in keep},
            "trials": [
                {
                    k: r[k]
                    for k in (
                        "trial_index",
                        "trial_id",
                        "parameters",
                        "status",
                        "final_metric",
                        "final_extra",
                        "intermediate_count",
                        "message",
                    )
                }
                for r in rows
            ],
        }
        self.log.info(
            "Results of experiment %s (%s):\n%s",
            experiment.experiment_id,
            mode,
            format_table(rows, best["trial_index"] if best else None),
        )
        following = experiment.continuation(store, context["run_id"])
        summary["continuation"] = {"run_id": following.run_id, "conf": following.conf, "reason": following.reason}
        if self.cleanup and following.run_id is None:  # the next run still needs the experiment's files
            self._cleanup(experiment)
        from trialflow.experiment import continued_run

        continued = continued_run(getattr(context.get("dag_run"), "conf", None)) is not None
        if best is None and continued and study_best is not None and window.expired():
            # A follow-on run the duration ended before any of its trials did: the experiment
            # ended as it should, with the best of the runs before.
            self.log.info("No trial of this run succeeded (%s); the experiment's best stands", dict(counts))
            return summary
        if best is None:
            raise AirflowFailException(
                f"no trial of experiment {experiment.experiment_id} succeeded with a final result ({dict(counts)})"
            )
        self.log.info("Best trial %s: %s = %s", best["trial_id"], best["parameters"], best["final_metric"])
        return summary


class ContinueExperimentOperator(BaseOperator):
    """An unbounded experiment's next step: trigger the follow-on run of this DAG.

    A config without maxTrialNumber (and a tuner that never runs out) runs until
    maxExperimentDuration, as in NNI, but one DAG run holds a finite fan-out: the end step
    decides whether the experiment goes on (``continuation`` in its XCom) and this task
    starts the next run with a conf naming the same experiment; it is skipped when the
    experiment is over. The run id is fixed per step, so a retry never starts two runs.
    The next run waits for this one to finish (``max_active_runs=1``).

    The triggering itself is Airflow's TriggerDagRunOperator, imported when the task runs:
    its module pulls in Airflow's models (~0.9 s), which no DAG parse should pay for.

    :param trigger_dag_id: the DAG to run again (the experiment's own).
    :param end_task_id: the end step whose XCom says whether the experiment goes on.
    """

    template_fields: Sequence[str] = ("trigger_dag_id",)
    ui_color = "#d9ead3"

    def __init__(self, *, trigger_dag_id: str, end_task_id: str = "end_experiment", **kwargs: Any):
        super().__init__(**kwargs)
        self.trigger_dag_id = trigger_dag_id
        self.end_task_id = end_task_id

    def execute(self, context: Context) -> Any:
        from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

        summary = context["ti"].xcom_pull(task_ids=self.end_task_id) or {}
        following = summary.get("continuation") or {}
        if not following.get("run_id"):
            raise AirflowSkipException(f"the experiment does not go on: {following.get('reason', 'no summary')}")
        self.log.info("%s (run %s)", following["reason"], following["run_id"])
        trigger = TriggerDagRunOperator(
            task_id=self.task_id,
            trigger_dag_id=self.trigger_dag_id,
            trigger_run_id=following["run_id"],
            conf=following["conf"],
            skip_when_already_exists=True,  # a retry finds the run it started
        )
        return trigger.execute(context)
