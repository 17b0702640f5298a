"""SubmitTrialOperator: one trial = one (mapped) task instance.

A shell over trialflow.lifecycle.trial_lifecycle: it starts the trial (parameters from the
tuner when the task starts, so later trials learn from earlier ones, as in
NNI; a retry re-attaches to the job it already started), then either returns
the submission (``wait_for_completion=False``: pair it with TrialSensor) or
waits: in the task for up to ``defer_after`` seconds (short trials end
there, without a deferral's second task start), then deferred to TrialTrigger
until the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk import BaseOperator, Context, timezone
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSkipException,
)
from airflow.triggers.base import StartTriggerArgs

from trialflow.from_airflow.why_stopped import TaskRef
from trialflow.hooks import airflow_connections
from trialflow.hooks.experiment_store import DEFAULT_CONN_ID, ExperimentStoreHook
from trialflow.triggers.task_context import experiment_for as experiment_for  # where operators find it
from trialflow.triggers.task_context import tracking_for
from trialflow.ui.links import PLATFORM_URL_KEY, PlatformLink, trial_platform_page

#: Seconds between asks of a trial that waits for its generation (Population Based Training).
WAIT_INTERVAL = 5.0

if TYPE_CHECKING:
    from trialflow.experiment import Experiment
    from trialflow.lifecycle import trial_lifecycle
    from trialflow.lifecycle.submission import Submission
    from trialflow.platforms.base import TrainingPlatform
    from trialflow.store.experiment_store import ExperimentStore


def label_task(context: Context, label: str) -> None:
    """The mapped task's name in the grid: its trial id (the DAG's map_index_template renders
    ``trial_label`` from the context, Airflow's documented way to name mapped instances)."""
    cast("dict[str, Any]", context)["trial_label"] = label


def report(context: Context, result: trial_lifecycle.TrialResult) -> dict[str, Any]:
    """The trial's outcome as the task's (``result.task_state``): SUCCEEDED -> success;
    EARLY_STOPPED, a kill and the maxExperimentDuration cancel -> skipped; FAILED and other
    cancellations -> failed without retry (retries are for infrastructure faults); a task a
    person marked keeps the state chosen, where a deferral had undone the mark. The result
    XCom is pushed in every case."""
    label_task(context, result.label)
    state = result.task_state
    if state == "success":
        return result.xcom
    context["ti"].xcom_push(key="return_value", value=result.xcom)
    if state == "skipped":
        raise AirflowSkipException(result.describe())
    raise AirflowFailException(result.describe())


def complete_from_event(
    context: Context, event: dict[str, Any] | str, experiment: Experiment, store: ExperimentStore, storage_id: int
) -> dict[str, Any]:
    """Turn TrialTrigger's event into the task outcome (the operator and the sensor alike).

    An event that is a task state (``"success"``, ``"skipped"``) means the trigger ended the task
    itself (TaskSuccessEvent, after recording the trial's end in the store) and the task was
    resumed all the same: Airflow's dag.test() does so, handing the end event's state as the
    event (each trial's first try failed on it, and only Airflow's retry re-attached). The
    store's record is the outcome then."""
    from trialflow.lifecycle import trial_lifecycle
    from trialflow.platforms.base import TrialStatus

    if isinstance(event, str):
        record = store.trial(storage_id)
        if not record.finished:
            raise AirflowException(f"the trial trigger ended its task ({event[:40]!r}) with the trial not ended")
        status, message = trial_lifecycle.finished_outcome(record)
        return report(context, trial_lifecycle.finish_trial(store, storage_id, status, message))
    if event["status"] == "ERROR":
        # The trial itself may be fine: fail this attempt so a retry re-attaches to it.
        raise AirflowException(event["message"])
    return report(
        context, trial_lifecycle.finish_trial(store, storage_id, TrialStatus(event["status"]), event.get("message"))
    )


def stop_from_worker(submission: Submission, ref: TaskRef | None, platform: TrainingPlatform | None = None) -> None:
    """The worker side of on_kill, for the operator and the sensor: cancel the trial only if a
    person stopped the task."""
    from trialflow.from_airflow.why_stopped import stop_from_airflow, worker_kill_reason
    from trialflow.platforms.event_loop import run_sync

    stop = worker_kill_reason(ref)
    if stop is None or ref is None:
        return
    run_sync(stop_from_airflow(submission, stop, ref.run_id, platform, dag_id=ref.dag_id))


class SubmitTrialOperator(BaseOperator):
    """Submit trial ``trial_index`` of the experiment in ``config_path`` and (by default) wait for it.

    :param config_path: the NNI experiment config (v1 or v2 YAML).
    :param trial_index: which trial of the DAG run (the mapped index); the run's window makes it
        the experiment's trial index.
    :param service_index: which listed training service runs it (hybrid configs); None lets the
        experiment choose the one with the fewest active trials.
    :param store_conn_id: the ``trialflow`` connection of the experiment store.
    :param wait_for_completion: wait for the trial to end (True), or return the submission for a
        TrialSensor (False).
    :param poll_interval: seconds between polls while deferred (the triggerer starts faster).
    :param defer_after: seconds to follow the trial in the worker before deferring.
    :param end_from_trigger: a deferred trial that succeeds or is stopped on purpose ends its task
        from the triggerer (no worker round trip); False resumes a worker for every outcome.
        Where Airflow has listeners (OpenLineage), the triggerer resumes the worker anyway, so
        they see every trial task end (trialflow.triggers.trial.listeners_present).
    :param stay_on_host: tasks may run on several hosts (a multi-host executor, its queue pinned
        to one host by experiment_dag): a local trial claims this host before its launch and is
        followed here to its end, since a triggerer elsewhere could not see its process.
    :param experiment_group: the task group whose experiment the trial is (ExperimentTaskGroup);
        None for a DAG's own experiment.
    """

    template_fields: Sequence[str] = (
        "config_path",
        "trial_index",
        "trial_id",
        "parameters",
        "command",
        "platform_name",
    )
    template_fields_renderers = {"parameters": "json", "command": "bash"}
    # Parameters are chosen at run time; show them in "Rendered Template" once known.
    overwrite_rtif_after_execution = True
    ui_color = "#e8f1fb"
    # "Trial" is the plugin's link (trialflow.ui.plugin.TrialPageLink), made on the api-server
    # from the task instance's key alone: listed here, every attempt would write it to XCom
    # through the api-server for nothing (one request a trial).
    operator_extra_links = (PlatformLink(),)

    def __init__(
        self,
        *,
        config_path: str,
        trial_index: int,
        service_index: int | None = None,
        store_conn_id: str = DEFAULT_CONN_ID,
        wait_for_completion: bool = True,
        poll_interval: float = 1.0,
        defer_after: float = 10.0,
        end_from_trigger: bool = True,
        stay_on_host: bool = False,
        experiment_group: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.stay_on_host = stay_on_host
        self.experiment_group = experiment_group
        # Not kept as ``end_from_trigger``: Airflow's DAG bag refuses a task with that attribute
        # true as soon as a listener plugin (OpenLineage's) is loaded, since listeners never see
        # a task the triggerer ends. The trigger checks for listeners itself instead.
        self.end_in_triggerer = end_from_trigger
        self.config_path = config_path
        self.trial_index = trial_index
        self.service_index = service_index
        self.store_conn_id = store_conn_id
        self.wait_for_completion = wait_for_completion
        self.poll_interval = poll_interval
        self.defer_after = defer_after
        self.trial_id: str | None = None
        self.parameters: dict[str, Any] | None = None
        self.command: str | None = None
        self.platform_name: str | None = None
        self._following: tuple[Submission, TrainingPlatform | None, TaskRef | None] | None = None
        #: This attempt's platform page once its trial is submitted ("" for none), so the
        #: "Platform" link Airflow writes at the attempt's end need not read it back (PlatformLink).
        self.platform_web_url: str | None = None

    def _show(self, context: Context, started: trial_lifecycle.StartedTrial) -> None:
        self.trial_id, self.parameters = started.spec.trial_id, started.spec.parameters
        self.command, self.platform_name = started.spec.command, started.platform_name
        label_task(context, started.spec.trial_id)

    def execute(self, context: Context) -> Any:
        from trialflow.lifecycle import trial_lifecycle
        from trialflow.triggers.trial import TrialTrigger

        experiment = experiment_for(self.config_path, context, group=self.experiment_group)
        store = ExperimentStoreHook(self.store_conn_id).get_conn()
        try:
            started = trial_lifecycle.start_trial(
                experiment,
                store,
                context["run_id"],
                int(self.trial_index),
                service_index=self.service_index,
                connections=airflow_connections(),
                pin_host=self.stay_on_host,
                **tracking_for(experiment, context, store),
            )
        except trial_lifecycle.TrialNotStarted as exc:
            label_task(context, f"{exc.trial_id} not started")
            raise AirflowSkipException(str(exc)) from None
        except trial_lifecycle.TrialWaits as exc:
            # Up for reschedule, not deferred: a waiting task holds no slot of trialConcurrency,
            # so the trials it waits for (a retry among them) always find one.
            label_task(context, f"{exc.trial_id} waits for {exc.waits_for}")
            self.log.info("%s; asking again in %.0f s", exc, WAIT_INTERVAL)
            raise AirflowRescheduleException(timezone.utcnow() + timedelta(seconds=WAIT_INTERVAL)) from None
        except trial_lifecycle.TrialCannotRun as exc:
            raise AirflowFailException(str(exc)) from exc
        self._show(context, started)
        if started.finished:
            self.log.info(
                "Trial %s already finished (%s); reporting it", started.spec.trial_id, started.record.status.value
            )
            status, message = trial_lifecycle.finished_outcome(started.record)
            return report(context, trial_lifecycle.finish_trial(store, started.record.storage_id, status, message))
        assert started.handle is not None
        web = trial_platform_page(
            experiment.config.training_service[started.service_index].trial_web_url,
            dict(started.handle),
            experiment.experiment_id,
        )
        if web:
            context["ti"].xcom_push(key=PLATFORM_URL_KEY, value=web)
        self.platform_web_url = web or ""
        self.log.info(
            "Trial %s %s with parameters %s",
            started.spec.trial_id,
            "re-attached" if started.resumed else "submitted",
            started.spec.parameters,
        )
        submission = started.submission(str(self.config_path), self.store_conn_id)
        if not self.wait_for_completion:
            return submission.to_dict()
        from trialflow.config.registry import is_host_bound

        stays = self.stay_on_host and is_host_bound(started.platform_name)
        self._following = (submission, started.platform, TaskRef.of(context["ti"]))
        try:
            outcome = trial_lifecycle.wait_in_worker(
                started, store, None if stays else self.defer_after, self.poll_interval
            )
        finally:
            self._following = None
        if outcome.status is not None:
            result = trial_lifecycle.finish_trial(store, started.record.storage_id, outcome.status, outcome.message)
            return report(context, result)
        self.defer(
            trigger=TrialTrigger(
                submission=submission.to_dict(),
                cursor=outcome.cursor,
                poll_interval=self.poll_interval,
                seen_running=outcome.seen_running,
                end_task=self.end_in_triggerer,
            ),
            method_name="execute_complete",
        )

    def on_kill(self) -> None:
        """The worker is stopping this task while it follows its trial. A person's action (mark
        failed or success, clear, a failed DAG run) cancels the job and records USER_CANCELED;
        a stop nobody asked for (the api-server unreachable, the worker shutting down) leaves
        the trial running for the task's retry to re-attach to (trialflow.from_airflow.why_stopped)."""
        following = getattr(self, "_following", None)
        if following is None:
            return  # not following a trial (submitting, or deferred: the trigger's on_kill acts)
        submission, platform, ref = following
        stop_from_worker(submission, ref, platform)

    def execute_complete(self, context: Context, event: dict[str, Any] | str) -> Any:
        from trialflow.lifecycle import trial_lifecycle

        experiment = experiment_for(self.config_path, context, group=self.experiment_group)
        store = ExperimentStoreHook(self.store_conn_id).get_conn()
        storage_id = trial_lifecycle.locate_trial(experiment, store, context["run_id"], int(self.trial_index))
        record = store.trial(storage_id)
        self.trial_id, self.parameters = record.trial_id, record.parameters
        service_index = int(record.service_index or 0)
        self.command = experiment.trial_spec(record.trial_index, record.number, {}, service_index).command
        self.platform_name = experiment.config.platform_names[service_index]
        return complete_from_event(context, event, experiment, store, storage_id)


class TriggeredTrialOperator(SubmitTrialOperator):
    """SubmitTrialOperator whose task starts in the triggerer: no worker process is made for it
    (trialflow.triggers.trial_start). The trial's start, follow and stop are the same; its turn
    under trialConcurrency is kept by the store, since Airflow holds no limit over tasks that
    start there. For a task mapped over ``trial_index`` as experiment_dag builds it (the
    trigger starts trial ``map_index``); a worker runs only ``execute_complete``, for an
    outcome the triggerer does not end the task with (a failure, a listener to tell).

    The start arguments are the class's own: Airflow 3.3 does not see a mapped task's
    instance-level ``start_trigger_args`` (measured), and they are the same for every trial.
    """

    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls="trialflow.triggers.trial_start.TrialStartTrigger",
        trigger_kwargs={},
        next_method="execute_complete",
        next_kwargs=None,
        timeout=None,
    )

    def execute(self, context: Context) -> Any:
        # Airflow runs this only where the triggered start is off (a task not mapped as
        # experiment_dag maps it): then it is the worker's start, as the base class has it.
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any] | str) -> Any:
        from trialflow.triggers.trial_start import CANNOT_RUN, NOT_STARTED

        if isinstance(event, dict) and event.get("status") == CANNOT_RUN:
            raise AirflowFailException(str(event.get("message")))
        if isinstance(event, dict) and event.get("status") == NOT_STARTED:
            label_task(context, "not started")
            raise AirflowSkipException(str(event.get("message")))
        if isinstance(event, dict) and event.get("status") == "ERROR":
            # the start may have asked nothing yet: its words, and a retry starts it again
            raise AirflowException(str(event.get("message")))
        return super().execute_complete(context, event)
