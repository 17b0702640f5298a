"""The two ends of an experiment DAG: start (store, folder, platform) and end (the summary)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from trialflow.hooks import airflow_connections
from trialflow.hooks.experiment_store import DEFAULT_CONN_ID, ExperimentStoreHook
from trialflow.limits import TRACKING_GIVE_UP_SECONDS
from trialflow.operators.trial import experiment_for

if TYPE_CHECKING:
    from airflow.sdk import Asset

    from trialflow.experiment import Experiment
    from trialflow.runs.summary import ExperimentSummary
    from trialflow.store.experiment_store import ExperimentStore


class _ExperimentStep(BaseOperator):
    """What the start and end steps share: the config and the store connection.

    :param config_path: the NNI experiment config (v1 or v2 YAML); templated.
    :param store_conn_id: the ``trialflow`` connection of the experiment store (absent: a
        SQLite file under ``$AIRFLOW_HOME``).
    :param experiment_group: the task group whose experiment it is (ExperimentTaskGroup); None
        for a DAG's own experiment.
    """

    template_fields: Sequence[str] = ("config_path",)
    ui_color = "#d9ead3"

    def __init__(
        self,
        *,
        config_path: str,
        store_conn_id: str = DEFAULT_CONN_ID,
        experiment_group: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.config_path = config_path
        self.store_conn_id = store_conn_id
        self.experiment_group = experiment_group

    def experiment(self, context: Context, check: bool = False) -> Experiment:
        return experiment_for(self.config_path, context, check=check, group=self.experiment_group)

    def experiment_and_store(self, context: Context, check: bool = False) -> tuple[Experiment, ExperimentStore]:
        return self.experiment(context, check), ExperimentStoreHook(self.store_conn_id).get_conn()


class StartExperimentOperator(_ExperimentStep):
    """Create (or re-open, on a cleared run) the experiment in the store and prepare the platform.

    The config is checked in full here (platform preflight included), before any trial
    starts: a broken config fails this step and nothing else runs. Returns the run's trial
    window and the experiment id (its XCom).

    :param config_path: the NNI experiment config (v1 or v2 YAML); templated.
    :param store_conn_id: the ``trialflow`` connection of the experiment store.
    :param trial_count: the DAG's fan-out (trials per run), when it is not the config's own.
    :param inputs: values for every trial of the run, from upstream tasks (XComArgs or Jinja
        templates, rendered once here; trialflow.trial.inputs says how trials get them); templated.
    """

    template_fields: Sequence[str] = ("config_path", "inputs")
    template_fields_renderers = {"inputs": "json"}

    def __init__(self, *, trial_count: int | None = None, inputs: dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.trial_count = trial_count
        self.inputs = inputs

    def execute(self, context: Context) -> dict[str, Any]:
        from trialflow.from_airflow.secrets import masked_names
        from trialflow.runs import ExperimentNotOwned, start_run
        from trialflow.runs.start import unused_inputs
        from trialflow.seeding.warm_start import WarmStartError
        from trialflow.store.urls import safe_url
        from trialflow.trial.inputs import InputsError
        from trialflow.trial.sealing import SealingUnavailable

        experiment, store = self.experiment_and_store(context, check=True)  # in full: nothing has started yet
        conf = getattr(context.get("dag_run"), "conf", None) or {}
        try:
            started = start_run(
                experiment,
                store,
                context["dag"].dag_id,
                context["run_id"],
                conf,
                count=self.trial_count,
                connections=airflow_connections(),
                inputs=self.inputs,
                secret_inputs=masked_names(self.inputs if isinstance(self.inputs, dict) else None),
            )
        except (ExperimentNotOwned, InputsError, WarmStartError, SealingUnavailable) as exc:
            raise AirflowFailException(str(exc)) from None
        window, config = started.window, experiment.config
        for said in unused_inputs(experiment, list(window.inputs or ())):
            self.log.warning("Inputs: %s", said)
        self.log.info(
            "Experiment %s (%s): trials %d..%d, %d at a time, on %s; files in %s",
            experiment.experiment_id,
            "continued" if started.resumed else "new",
            window.first_index,
            window.first_index + window.count - 1,
            config.trial_concurrency,
            ", ".join(config.platform_names),
            experiment.directory,
        )
        retune = started.retune
        if retune is not None:
            self.log.info("Re-tuning: %s", retune.reason)
            for dropped in retune.dropped:
                self.log.warning("Not re-evaluated (no longer in the search space): %s", dropped)
        warm = started.warm_start
        if warm is not None:
            self.log.info("Warm start: %s", warm.reason)
            for dropped in warm.dropped:
                self.log.warning("Not taken over (not in this search space): %s", dropped)
        return {
            "experiment_id": experiment.experiment_id,
            "directory": str(experiment.directory),
            "retuned_from": retune.experiment_id if retune else None,
            "warm_started_from": warm.experiment_id if warm else None,
            "trial_count": window.count,
            "first_trial_index": window.first_index,
            "resumed": started.resumed,
            "deadline": window.deadline,
            "trial_concurrency": config.trial_concurrency,
            "store": safe_url(store.url),
            "inputs": sorted(window.inputs or ()),  # their names (the values: Rendered Template)
        }


class WatchTrialsOperator(_ExperimentStep):
    """Reconcile the run's trials with their tasks while they run (trialflow.runs.reconcile).

    Defers at once to RunWatchTrigger, which holds no worker slot: every ``poll_interval``
    seconds, and at once when a trial trigger of the run in the same triggerer ends its task
    (trialflow.triggers.run_wakeups), it stops and closes any trial the store holds as running
    whose task has ended (a click Airflow's ``on_kill`` never saw, at the hand-off from worker
    to triggerer), and ends once every trial task has ended. The end step waits for it.

    :param config_path: the NNI experiment config (v1 or v2 YAML); templated.
    :param store_conn_id: the ``trialflow`` connection of the experiment store.
    :param trial_task_id: the mapped trial task of the run.
    :param poll_interval: seconds between two passes.
    """

    ui_color = "#f3f3f3"

    def __init__(self, *, trial_task_id: str = "trial", poll_interval: float = 2.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.trial_task_id = trial_task_id
        self.poll_interval = poll_interval

    def execute(self, context: Context) -> Any:
        from trialflow.operators.in_process import runs_in_process
        from trialflow.triggers.watch import RunWatchTrigger

        if runs_in_process():
            # dag.test(): the trial tasks run one by one after this one, never beside it, so a
            # watch waiting for them would wait for ever; nothing can end a trial's task behind
            # its back there, and the end step's own pass reconciles what is left.
            self.log.info("dag.test() runs one task at a time: the end step reconciles the trials")
            return {"status": "DONE", "reconciled": [], "in_process": True}
        experiment = self.experiment(context)
        self.defer(
            trigger=RunWatchTrigger(
                config_path=str(self.config_path),
                store_conn_id=self.store_conn_id,
                experiment_id=experiment.experiment_id,
                workdir=str(experiment.workdir),
                dag_id=context["dag"].dag_id,
                run_id=context["run_id"],
                trial_task_id=self.trial_task_id,
                poll_interval=self.poll_interval,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if event.get("status") == "ERROR":
            raise AirflowFailException(event.get("message"))  # the end step's own pass remains
        return event


class EndExperimentOperator(_ExperimentStep):
    """Summarise the experiment from the store: per-trial table, best trial, counts.

    Runs whatever happened to the trials (trigger rule all_done). It fails only
    when no trial succeeded, because then there is no result to report. With
    ``cleanup=True`` it then asks each platform to remove the experiment's files
    (remote machines: the trial folders; local results are kept, as NNI keeps them).

    :param config_path: the NNI experiment config (v1 or v2 YAML); templated.
    :param store_conn_id: the ``trialflow`` connection of the experiment store.
    :param cleanup: remove the experiment's files from the platforms after summarising.
    :param trial_task_id: the mapped trial task of the run (its trials are reconciled first).
    """

    def __init__(self, *, cleanup: bool = False, trial_task_id: str = "trial", **kwargs: Any):
        super().__init__(**kwargs)
        self.cleanup = cleanup
        self.trial_task_id = trial_task_id
        self._lineage: tuple[ExperimentSummary, dict[str, Any] | None] | None = None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage's listener asks this after a success (trialflow.outputs.lineage: the experiment's
        search space and what it found, as a run facet); only where the provider is installed."""
        from trialflow.outputs.lineage import operator_lineage

        return operator_lineage(*self._lineage) if self._lineage else None

    def _cleanup(self, experiment: Any) -> None:
        connections = airflow_connections()
        for i in range(len(experiment.config.training_service)):
            self.log.info(
                "Removing experiment %s's files from %s", experiment.experiment_id, experiment.config.platform_names[i]
            )
            experiment.platform(i, connections).cleanup_sync(experiment.experiment_id)

    def _task_states(self, context: Context) -> dict[int, str | None]:
        """Airflow's state of each trial task of the run (all ended: trigger rule all_done)."""
        from trialflow.from_airflow.why_stopped import ask_trial_states

        try:
            return ask_trial_states(context["dag"].dag_id, context["run_id"], self.trial_task_id)
        except Exception as exc:  # the run is over all the same: the messages say less
            self.log.warning("cannot ask Airflow the trial tasks' states: %s", exc)
            return {}

    def execute(self, context: Context) -> dict[str, Any]:
        from trialflow.platforms.event_loop import run_sync
        from trialflow.runs import ExperimentNotOwned, RunHasNoTrials, end_run
        from trialflow.runs.summary import BEST_PARAMETERS_KEY, BEST_VALUE_KEY, best_parameters, best_value

        experiment, store = self.experiment_and_store(context)
        conf = getattr(context.get("dag_run"), "conf", None) or {}
        states = self._task_states(context)
        try:
            ended = run_sync(
                end_run(
                    experiment, store, context["dag"].dag_id, context["run_id"], conf, states, airflow_connections()
                )
            )
        except (ExperimentNotOwned, RunHasNoTrials) as exc:
            raise AirflowFailException(str(exc)) from None
        for trial in ended.reconciled:
            self.log.warning("Trial %s stopped: %s", trial.trial_id, trial.reason)
        verdict, closed = ended.verdict, ended.closed
        if closed.dropped:
            self.log.warning("%d asked-for trial(s) had not started when the experiment ended: dropped", closed.dropped)
        if closed.concurrency_reset:
            self.log.info("trialConcurrency goes back to the config's for the DAG's next experiment")
        mode = experiment.config.optimize_mode
        self._lineage = (verdict.summary, experiment.config.search_space)
        self.log.info("Results of experiment %s (%s):\n%s", experiment.experiment_id, mode, verdict.table)
        if self.cleanup and closed.may_clean_up:
            self._cleanup(experiment)
        for note in verdict.notes:
            self.log.info("%s", note)
        if verdict.failure:
            raise AirflowFailException(verdict.failure)
        if verdict.best:
            best = verdict.best
            self.log.info("Best trial %s: %s = %s", best.trial_id, best.parameters, best.values or best.final_metric)
        # What a task downstream of an experiment task group takes (ExperimentTaskGroup.best).
        context["ti"].xcom_push(key=BEST_PARAMETERS_KEY, value=best_parameters(verdict.summary))
        context["ti"].xcom_push(key=BEST_VALUE_KEY, value=best_value(verdict.summary))
        return dict(verdict.summary)


class TrackExperimentOperator(_ExperimentStep):
    """Bring the experiment's MLflow runs level with the store once the run has ended (its
    config's ``mlflow`` key; trialflow.tracking), then end the experiment's MLflow run.

    After the end step, whatever its outcome (trigger rule all_done), beside the published
    asset (which does not wait for it). The run's watch logged while the trials ran; this makes
    the last pass. When the tracking server does not take everything (down, slow, refusing), it
    defers to TrackingTrigger, which holds no worker slot and tries again with a growing pause,
    so what the server missed reaches it when it is back, once. After ``give_up_after`` seconds
    (30 minutes: a DAG run held longer would hold up the DAG's next run where max_active_runs
    is 1) it stops trying and is skipped, saying so: what is kept is still sent by ``trialflow
    sync-mlflow``. It never fails: tracking never decides a run's outcome.

    :param config_path: the NNI experiment config (v1 or v2 YAML); templated.
    :param store_conn_id: the ``trialflow`` connection of the experiment store.
    :param end_task_id: the end step (its summary says whether the experiment found a result).
    :param give_up_after: seconds to keep trying after the run ended.
    """

    ui_color = "#e8f0fe"

    def __init__(
        self, *, end_task_id: str = "end_experiment", give_up_after: float = TRACKING_GIVE_UP_SECONDS, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.end_task_id = end_task_id
        self.give_up_after = give_up_after

    def execute(self, context: Context) -> Any:
        import time

        from trialflow.from_airflow.secrets import masked_text
        from trialflow.operators.in_process import runs_in_process
        from trialflow.tracking.runner import END_PASS_BUDGET, open_tracking
        from trialflow.triggers.tracking import TrackingTrigger
        from trialflow.ui.links import tracking_links

        experiment, store = self.experiment_and_store(context)
        status = "FINISHED" if context["ti"].xcom_pull(task_ids=self.end_task_id) else "FAILED"
        tracking = open_tracking(store, experiment.experiment_id, airflow_connections())
        if tracking is None:
            raise AirflowSkipException("the experiment is not logged to MLflow from here (see the log above)")
        report = tracking.sync(tracking_links(experiment.experiment_id), masked_text, status, END_PASS_BUDGET)
        if report.passed and not report.error and not report.pending:
            url = tracking.run_urls().get("experiment", tracking.target.uri)
            self.log.info("MLflow has every result of experiment %s: %s", experiment.experiment_id, url)
            return {"status": "DONE", "run_url": url}
        why = report.error or ("another pass is under way" if not report.passed else "out of time")
        if runs_in_process():  # dag.test(): no triggerer to wait in
            raise AirflowSkipException(f"MLflow: {why}; sent by `trialflow sync-mlflow {experiment.experiment_id}`")
        self.log.warning("MLflow: %s; trying again in the triggerer until it takes the rest", why)
        self.defer(
            trigger=TrackingTrigger(
                store_conn_id=self.store_conn_id,
                experiment_id=experiment.experiment_id,
                status=status,
                until=time.time() + self.give_up_after,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if event.get("status") != "DONE":
            raise AirflowSkipException(str(event.get("message")))  # kept: trialflow sync-mlflow sends it
        return event


class ContinueExperimentOperator(BaseOperator):
    """An unbounded experiment's next step: trigger the follow-on run of this DAG.

    A config without maxTrialNumber (and a tuner that never runs out) runs until
    maxExperimentDuration, as in NNI, but one DAG run holds a finite fan-out: the end step
    decides whether the experiment goes on (``continuation`` in its XCom) and this task
    starts the next run with a conf naming the same experiment; it is skipped when the
    experiment is over. The run id is fixed per step, so a retry never starts two runs.
    The next run waits for this one to finish (``max_active_runs=1``).

    The triggering itself is Airflow's TriggerDagRunOperator, imported only when a run follows:
    its module pulls in Airflow's models (~0.9 s), which no DAG parse, and no run that ends its
    experiment, should pay for.

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
        from trialflow.runs.summary import as_summary

        summary = as_summary(context["ti"].xcom_pull(task_ids=self.end_task_id))
        following = summary["continuation"] if summary else None
        if not following or not following["run_id"]:
            raise AirflowSkipException(
                f"the experiment does not go on: {following['reason'] if following else 'no summary'}"
            )
        from trialflow.operators.in_process import runs_in_process

        if runs_in_process():
            # dag.test() runs its one DAG run: a follow-on run would wait, queued, in the local
            # database for a scheduler that may start it any time later
            raise AirflowSkipException(
                f"dag.test() runs one DAG run: the experiment would go on in run {following['run_id']} "
                f"({following['reason']}), not started here; `trialflow run` or a deployment runs it"
            )
        self.log.info("%s (run %s)", following["reason"], following["run_id"])
        # Imported only now: a bounded experiment's last run (the usual case) skips this task,
        # and the import is most of the task's time (~0.9 s of CPU at the end of every run).
        from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

        trigger = TriggerDagRunOperator(
            task_id=self.task_id,
            trigger_dag_id=self.trigger_dag_id,
            trigger_run_id=following["run_id"],
            conf=following["conf"],
            skip_when_already_exists=True,  # a retry finds the run it started
        )
        return trigger.execute(context)


class PublishBestOperator(BaseOperator):
    """Publish the experiment's best parameters as an event on its Asset, for the DAGs downstream.

    After the end step, when it succeeded (Airflow's all_success): when the experiment is over
    with a succeeded trial, the event's extra carries the experiment, the best trial's id,
    parameters and metric (the Pareto set, with several objectives), the DAG run and a link to
    the experiment's page (trialflow.outputs.published). Otherwise the task is skipped and says why:
    Airflow emits an outlet's event only for a task that succeeds, so nothing is published.
    When the end step failed (no trial succeeded, the start step failed) this task is
    upstream_failed, so a DAG whose last step is an experiment task group has a failed run,
    as a whole experiment DAG has (with all_done it was skipped, and Airflow's leaf rule read
    the run as a success: "a run that trained nothing ends green").
    A downstream DAG reads it with ``trialflow.assets.best_parameters(context)``.

    :param asset: the asset to publish on (``trialflow.assets.best_parameters_asset``).
    :param end_task_id: the end step whose XCom holds the experiment's summary.
    :param start_task_id: the start step whose XCom names the experiment's folder.
    """

    ui_color = "#d9ead3"

    def __init__(
        self,
        *,
        asset: Asset,
        end_task_id: str = "end_experiment",
        start_task_id: str = "start_experiment",
        store_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ):
        super().__init__(outlets=[asset], **kwargs)
        self.asset = asset
        self.end_task_id = end_task_id
        self.start_task_id = start_task_id
        self.store_conn_id = store_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from trialflow.outputs.published import publication
        from trialflow.runs.summary import as_summary
        from trialflow.ui.links import experiment_page

        summary = as_summary(context["ti"].xcom_pull(task_ids=self.end_task_id))
        started = context["ti"].xcom_pull(task_ids=self.start_task_id) or {}
        url = experiment_page(summary["experiment_id"]) if summary else None
        artifacts = self._artifacts_of_best(summary) if summary else None
        extra, reason = publication(
            summary, context["dag"].dag_id, context["run_id"], url, started.get("directory"), artifacts
        )
        if extra is None:
            raise AirflowSkipException(f"nothing published on {self.asset.name!r}: {reason}")
        context["outlet_events"][self.asset].extra = extra
        self.log.info("Published on asset %r: %s", self.asset.name, reason)
        return extra

    def _artifacts_of_best(self, summary: Any) -> Any:
        """The best trial's artifacts where the experiment keeps them (None: it keeps none, or
        it has several objectives and no one best)."""
        from trialflow.checkpoints.artifacts import TrialArtifacts
        from trialflow.config.checkpoints import ARTIFACT_STORE_ATTR, ArtifactStore
        from trialflow.hooks.artifact_store import store_root
        from trialflow.hooks.experiment_store import ExperimentStoreHook
        from trialflow.outputs.published import ArtifactsOfBest, PublishedArtifact

        best = summary["study_best"] or summary["best"]
        if not best or len(summary.get("objectives") or []) > 1:
            return None
        store = ExperimentStoreHook(self.store_conn_id).get_conn()
        where = ArtifactStore.from_attr(store.experiment_attr(summary["experiment_id"], ARTIFACT_STORE_ATTR))
        if where is None:
            return None
        try:
            root = store_root(where.url, where.conn_id)
            kept = TrialArtifacts(root, summary["experiment_id"], best["trial_id"]).listed()
        except Exception as exc:  # the store down or its manifest refused: the parameters still go out
            from trialflow.from_airflow.secrets import masked_text

            self.log.warning("Publishing without the best trial's artifacts: %s", masked_text(str(exc))[:500])
            return None
        files = tuple(PublishedArtifact(f.name, f.size) for f in kept)
        return ArtifactsOfBest(best["trial_id"], where.url, where.conn_id, files)
