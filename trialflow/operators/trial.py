"""SubmitTrialOperator: one trial = one (mapped) task instance.

It asks the tuner for parameters when it starts (so later trials learn from
earlier ones, as in NNI), submits to the platform, and then either returns
the handle (``wait_for_completion=False``, pair it with TrialSensor) or waits:
in the task for up to ``defer_after`` seconds (short trials end there, without
a deferral's second task start), then deferred to TrialTrigger until the end.

A retry re-attaches: the trial id and its parameters are fixed per
(experiment, index), the platform's submit is idempotent, and a trial that
already finished is reported, not re-run.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Sequence

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from trialflow.experiment import Experiment, RunWindow, trial_result
from trialflow.follow import EXPERIMENT_DEADLINE_REASON, follow_trial
from trialflow.hooks.store import DEFAULT_CONN_ID, ExperimentStoreHook
from trialflow.platforms.background import run_sync
from trialflow.platforms.base import TrialStatus, trial_id_for
from trialflow.platforms.gpus import GpuRequestError
from trialflow.trial.packing import CodeDirectoryError
from trialflow.triggers.trial import TrialTrigger
from trialflow.ui.links import PLATFORM_URL_KEY, PlatformLink, TrialLink, platform_url

if TYPE_CHECKING:
    from trialflow.tuning.store import ExperimentStore


WORKER_POLL_INTERVAL = 0.2


def experiment_for(config_path: str, context: Context) -> Experiment:
    from trialflow.hooks import register_connectors

    register_connectors()  # machines and clusters named by Airflow connections
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    return Experiment.for_run(config_path, context["dag"].dag_id, context["run_id"], conf=conf)


def stopped_on_purpose(status: TrialStatus, message: str | None) -> bool:
    """Early stops and the experiment's deadline end a trial by decision, not by error."""
    return status == TrialStatus.EARLY_STOPPED or (
        status == TrialStatus.SYS_CANCELED and message == EXPERIMENT_DEADLINE_REASON)


def report_trial(context: Context, store: "ExperimentStore", storage_id: int, status: TrialStatus,
                 message: str | None, handle: dict[str, Any] | None) -> dict[str, Any]:
    """Close the trial in the store and turn its outcome into the task's outcome.

    SUCCEEDED -> success; EARLY_STOPPED and the maxExperimentDuration cancel ->
    skipped (stopped on purpose, not an error); FAILED and other cancellations
    -> failed without retry (re-running the
    same parameters would not change a trial's own failure; retries are for
    infrastructure faults). The result XCom is pushed in every case.
    """
    from trialflow.tuning.store import scalar

    frozen = store.storage.get_trial(storage_id)
    final = frozen.user_attrs.get("final_metric")
    store.finish(storage_id, status, final, message)
    frozen = store.storage.get_trial(storage_id)
    metric = scalar(final)
    result = trial_result(frozen.user_attrs["trial_index"], frozen.user_attrs["trial_id"],
                          frozen.user_attrs["parameters"], status,
                          metric if metric is not None and math.isfinite(metric) else None,
                          len(frozen.intermediate_values), handle, frozen.user_attrs.get("message"))
    context["trial_label"] = f"{result['trial_id']} {status.value}"
    if status == TrialStatus.SUCCEEDED:
        return result
    context["ti"].xcom_push(key="return_value", value=result)
    if stopped_on_purpose(status, message):
        raise AirflowSkipException(f"trial {result['trial_id']} {status.value}: {message}")
    raise AirflowFailException(f"trial {result['trial_id']} {status.value}: {message or 'no detail'}")


class SubmitTrialOperator(BaseOperator):
    """Submit trial ``trial_index`` of the experiment in ``config_path`` and (by default) wait for it."""

    template_fields: Sequence[str] = ("config_path", "trial_index", "trial_id", "parameters", "command",
                                      "platform_name")
    template_fields_renderers = {"parameters": "json", "command": "bash"}
    # Parameters are chosen at run time; show them in "Rendered Template" once known.
    overwrite_rtif_after_execution = True
    ui_color = "#e8f1fb"
    operator_extra_links = (TrialLink(), PlatformLink())

    def __init__(self, *, config_path: str, trial_index: int, service_index: int | None = None,
                 store_conn_id: str = DEFAULT_CONN_ID, wait_for_completion: bool = True,
                 poll_interval: float = 1.0, defer_after: float = 10.0, **kwargs: Any):
        super().__init__(**kwargs)
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

    def execute(self, context: Context) -> Any:
        experiment = experiment_for(self.config_path, context)
        store = ExperimentStoreHook(self.store_conn_id).get_conn()
        config = experiment.config
        study = experiment.open_study(store)
        window = RunWindow.of(study.user_attrs, context["run_id"])
        index = window.first_index + int(self.trial_index)
        trial_id = trial_id_for(experiment.experiment_id, index)
        if window.expired() and store.find_trial_id(study, index) is None:
            # maxTrialNumber counts started trials: one that never started is not counted.
            context["trial_label"] = f"{trial_id} not started"
            raise AirflowSkipException(f"trial {trial_id} not started: {EXPERIMENT_DEADLINE_REASON}")
        asked = store.ask(study, index, trial_id, experiment.algorithm, experiment.space)
        service_index = self._service_index(experiment, store, study, asked.storage_id, index)
        spec = experiment.trial_spec(index, asked.number, asked.parameters, service_index)
        self.platform_name = experiment.config.platform_names[service_index]
        self.trial_id, self.parameters, self.command = spec.trial_id, spec.parameters, spec.command
        context["trial_label"] = spec.trial_id
        frozen = store.storage.get_trial(asked.storage_id)
        handle = frozen.user_attrs.get("handle")
        if frozen.state.is_finished():
            self.log.info("Trial %s already finished (%s); reporting it", spec.trial_id,
                          frozen.user_attrs.get("nni_status"))
            return report_trial(context, store, asked.storage_id, TrialStatus(frozen.user_attrs["nni_status"]),
                                frozen.user_attrs.get("message"), handle)
        platform = experiment.platform(service_index)
        platform.prepare(experiment.experiment_id)
        try:
            handle = platform.submit(spec)
        except (GpuRequestError, CodeDirectoryError) as exc:  # can never run: retrying would not help
            store.finish(asked.storage_id, TrialStatus.FAILED, None, str(exc))
            raise AirflowFailException(f"trial {spec.trial_id}: {exc}") from exc
        started_at = frozen.user_attrs.get("started_at") or time.time()
        store.set_status(asked.storage_id, TrialStatus.WAITING, handle=handle, started_at=started_at)
        web = platform_url(experiment.config.training_service[service_index].trial_web_url,
                           {**handle, "experiment_id": experiment.experiment_id})
        if web:
            context["ti"].xcom_push(key=PLATFORM_URL_KEY, value=web)
        self.log.info("Trial %s %s with parameters %s", spec.trial_id,
                      "re-attached" if asked.resumed else "submitted", spec.parameters)
        submission = {"config_path": str(self.config_path), "experiment_id": experiment.experiment_id,
                      "workdir": str(experiment.workdir), "handle": handle, "storage_id": asked.storage_id,
                      "service_index": service_index, "store_conn_id": self.store_conn_id,
                      "deadline": started_at + config.max_trial_duration if config.max_trial_duration else None,
                      "experiment_deadline": window.deadline}
        if not self.wait_for_completion:
            return submission
        # Short trials end here: a deferral costs a second task start (seconds of overhead).
        # The worker polls at most every 0.2 s: it holds a slot anyway, and a trial's end is
        # then seen at once (the triggerer's poll_interval is for the long wait).
        outcome = run_sync(follow_trial(
            platform, store, handle, asked.storage_id, deadline=submission["deadline"],
            poll_interval=min(self.poll_interval, WORKER_POLL_INTERVAL), give_up_after=self.defer_after,
            experiment_deadline=window.deadline, stop_check=experiment.early_stop_check(store, asked.storage_id)))
        if outcome.status is not None:
            return report_trial(context, store, asked.storage_id, outcome.status, outcome.message, handle)
        self.defer(trigger=TrialTrigger(**submission, cursor=outcome.cursor, poll_interval=self.poll_interval,
                                        seen_running=outcome.seen_running),
                   method_name="execute_complete")

    def _service_index(self, experiment: Experiment, store: "ExperimentStore", study: Any, storage_id: int,
                       index: int) -> int:
        """Which listed platform runs this trial: the one given, the one a retry already used,
        or (NNI's hybrid mode) the one with the fewest active trials of the experiment."""
        if self.service_index is not None:
            return int(self.service_index)
        recorded = store.storage.get_trial(storage_id).user_attrs.get("service_index")
        if recorded is not None:
            return int(recorded)
        chosen = experiment.choose_service(study, index)
        store.storage.set_trial_user_attr(storage_id, "service_index", chosen)
        return chosen

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        return complete_from_event(self, context, event)


def complete_from_event(task: BaseOperator, context: Context, event: dict[str, Any]) -> Any:
    """Shared by the operator and the sensor: turn TrialTrigger's event into the task outcome."""
    experiment = experiment_for(task.config_path, context)  # type: ignore[attr-defined]
    store = ExperimentStoreHook(task.store_conn_id).get_conn()  # type: ignore[attr-defined]
    if event["status"] == "ERROR":
        # The trial itself may be fine: fail this attempt so a retry re-attaches to it.
        raise AirflowException(event["message"])
    storage_id = _storage_id(task, store, experiment, context["run_id"])
    frozen = store.storage.get_trial(storage_id)
    if hasattr(task, "trial_id"):
        task.trial_id = frozen.user_attrs["trial_id"]
        task.parameters = frozen.user_attrs["parameters"]
        service_index = int(frozen.user_attrs.get("service_index") or 0)
        task.command = experiment.trial_spec(frozen.user_attrs["trial_index"], frozen.number, {}, service_index).command
        task.platform_name = experiment.config.platform_names[service_index]
    return report_trial(context, store, storage_id, TrialStatus(event["status"]), event.get("message"),
                        frozen.user_attrs.get("handle"))


def _storage_id(task: BaseOperator, store: "ExperimentStore", experiment: Experiment, run_id: str) -> int:
    submission = getattr(task, "submission", None)
    if isinstance(submission, dict) and "storage_id" in submission:
        return int(submission["storage_id"])
    study = store.load_study(experiment.experiment_id)
    index = RunWindow.of(study.user_attrs, run_id).first_index + int(task.trial_index)  # type: ignore[attr-defined]
    storage_id = store.find_trial_id(study, index)
    if storage_id is None:
        raise AirflowException(f"trial {index} is not in the experiment store")
    return storage_id
