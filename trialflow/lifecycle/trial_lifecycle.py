"""A trial's life, from the core's side: start it, wait for it, finish it. No Airflow.

The operator, the sensor and the trigger are shells over these functions (the
way the pod operator sits on its PodManager): what a trial does does not
depend on which of them runs it, and all of it is tested without a scheduler.

* :func:`start_trial`: the run's window decides whether trial ``map_index`` may
  still start; the tuner gives its parameters (or the ones it already has);
  hybrid mode picks its platform (kept for a retry); it is submitted (a retry
  re-attaches) and its handle recorded. A trial that already finished is
  reported, not run again.
* :func:`wait_in_worker`: the short wait in the task before deferring.
* :func:`finish_trial`: close the trial in the store and say what the task's
  outcome is (success, skipped on purpose, failed, or what a person chose:
  trialflow.lifecycle.task_states).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from trialflow.config.redaction import mask_text
from trialflow.config.registry import is_host_bound
from trialflow.experiment import Experiment, TrialXCom, job_stops, trial_result
from trialflow.experiment.follow import Follower, FollowOutcome
from trialflow.experiment.keeping import parent_checkpoint
from trialflow.experiment.run_windows import EXPERIMENT_DEADLINE_REASON
from trialflow.lifecycle.start_state import read_start
from trialflow.lifecycle.submission import Submission
from trialflow.lifecycle.task_states import TaskState, task_state
from trialflow.platforms.base import (
    Connections,
    Resume,
    TrainingPlatform,
    TrialHandle,
    TrialSpec,
    TrialStatus,
    trial_id_for,
)
from trialflow.platforms.event_loop import run_sync
from trialflow.platforms.gpus import GpuRequestError
from trialflow.platforms.hosts import check_host, this_host
from trialflow.steering import stop_requested
from trialflow.store.experiment_store import TASK_ATTR
from trialflow.tracking.content import TaskIdentity
from trialflow.trial.handle import current_handle
from trialflow.trial.packing import CodeDirectoryError
from trialflow.trial.sealing import SealingUnavailable
from trialflow.tuning.asker import AskedTrial, ask_new
from trialflow.tuning.custom.runner import AdvisorWaits, CustomAlgorithmError
from trialflow.tuning.parameter_sources import NewTrial
from trialflow.tuning.pbt import PopulationNotReady

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore, TrialRecord

#: How often the worker polls while it waits (it holds a slot anyway: a trial's end is seen at once).
WORKER_POLL_INTERVAL = 0.2


class StartTracking(Protocol):
    """The seam a trial's start tells tracking through (MLflow's: trialflow.tracking.runner.
    TrialStartTracking); a second tracker is a second implementation, not a line here."""

    #: The experiment attributes it needs, read with the start's own (one store call).
    @property
    def reads(self) -> tuple[str, ...]: ...

    def trial_env(self, storage_id: int, attrs: Mapping[str, Any]) -> dict[str, str]:
        """What the trial is told of where it is tracked (its environment), before its launch."""
        ...


class TrialNotStarted(Exception):
    """The trial's run is past maxExperimentDuration and the trial never started: it is not
    counted (maxTrialNumber counts started trials, as in NNI)."""

    def __init__(self, trial_id: str, reason: str):
        super().__init__(f"trial {trial_id} not started: {reason}")
        self.trial_id = trial_id


class TrialWaits(Exception):
    """The trial may not be given parameters yet (Population Based Training: the generation
    before it has trials still running; a custom advisor that sent none yet); its task asks
    again later, holding no slot. ``waits_for`` says for what, in a few words."""

    def __init__(self, trial_id: str, reason: str, waits_for: str = "its generation"):
        super().__init__(f"trial {trial_id} waits: {reason}")
        self.trial_id = trial_id
        self.waits_for = waits_for


class TrialCannotRun(Exception):
    """The trial can never run as configured (GPUs no machine has, code over the limits, the
    user's tuner class failing its ask); its task fails without retry. Retrying would not help."""


@dataclass
class StartedTrial:
    """A trial that has its parameters and, unless it had already finished, its job."""

    experiment: Experiment
    record: TrialRecord
    spec: TrialSpec
    service_index: int
    resumed: bool
    platform: TrainingPlatform[Any] | None = None
    handle: TrialHandle | None = None
    deadline: float | None = None
    experiment_deadline: float | None = None
    run_id: str = ""

    @property
    def platform_name(self) -> str:
        return self.experiment.config.platform_names[self.service_index]

    @property
    def finished(self) -> bool:
        return self.record.finished

    def submission(self, config_path: str, store_conn_id: str) -> Submission:
        """What following it needs, wherever that happens (a sensor's XCom, the trigger's kwargs)."""
        assert self.handle is not None
        return Submission(
            config_path=str(config_path),
            store_conn_id=store_conn_id,
            experiment_id=self.experiment.experiment_id,
            workdir=str(self.experiment.workdir),
            handle=self.handle,
            storage_id=self.record.storage_id,
            service_index=self.service_index,
            deadline=self.deadline,
            experiment_deadline=self.experiment_deadline,
            run_id=self.run_id,
        )


def _service_index(
    experiment: Experiment, active: tuple[TrialRecord, ...] | None, record: TrialRecord, given: int | None
) -> tuple[int, bool]:
    """Which listed platform runs the trial: the one given, the one a retry already used, or
    (NNI's hybrid mode) the one with the fewest active trials; and whether it was chosen now
    (the start then records it, for the retries, with its other facts before the launch)."""
    if given is not None:
        return int(given), False
    if record.service_index is not None:
        return int(record.service_index), False
    if active is None:  # one platform (the start read no active trials): nothing to choose or record
        return 0, False
    return experiment.choose_service(active, record.trial_index), True


def start_trial(
    experiment: Experiment,
    store: ExperimentStore,
    run_id: str,
    map_index: int,
    *,
    service_index: int | None = None,
    connections: Connections | None = None,
    pin_host: bool = False,
    task: TaskIdentity | None = None,
    tracking: StartTracking | None = None,
) -> StartedTrial:
    """Give trial ``map_index`` of run ``run_id`` its parameters and submit it (see module).

    ``pin_host``: tasks may run on several hosts (trialflow.platforms.hosts). A local trial then claims
    this host in the store before it is launched, so a retry elsewhere is refused even if the
    first attempt died before the store had its handle.

    ``task``: the task instance starting it (recorded on the trial: what its MLflow run links
    back to); ``tracking``: where the experiment is tracked, told of the trial before its launch
    (None: it is not).
    """
    state = read_start(experiment, store, run_id, map_index, tracking.reads if tracking is not None else ())
    window, index = state.window, state.trial_index
    trial_id = trial_id_for(experiment.experiment_id, index)
    refused = window.admission(int(map_index), state.max_trial_number, lambda i: state.existing is not None)
    if refused is not None and not refused.owned:
        raise TrialCannotRun(
            f"run {run_id!r} has no trial {map_index} in experiment {experiment.experiment_id!r} "
            f"({refused.reason}): nothing was started"
        )
    if refused is not None:
        raise TrialNotStarted(trial_id, refused.reason)
    try:
        asked = (
            AskedTrial.resumed_from(state.existing)
            if state.existing is not None
            else ask_new(
                store,
                NewTrial(
                    experiment.experiment_id,
                    index,
                    trial_id,
                    experiment.algorithm,
                    state.space,  # the newest (a person may have changed it while the experiment runs)
                    window.first_index,
                    state.space_version,
                    state.unasked,
                    state.generation,
                ),
                experiment.pruner,
            )
        )
    except PopulationNotReady as exc:
        raise TrialWaits(trial_id, str(exc)) from None
    except AdvisorWaits as exc:  # the user's advisor sent no parameters (NNI's NoMoreTrialJobs)
        if exc.final:
            raise TrialNotStarted(trial_id, str(exc)) from None
        raise TrialWaits(trial_id, str(exc), "its advisor") from None
    except CustomAlgorithmError as exc:
        # The user's own class raised, exited, answered outside the space or hung: its code, not
        # the infrastructure. Airflow's retries ran it again (3 tries, a hung one holding a
        # worker 3 x 60 s); the trial fails once, with the class's words, as the docs say.
        raise TrialCannotRun(f"trial {trial_id}: {exc}") from None
    record = asked.record
    chosen, newly_chosen = _service_index(experiment, state.active, record, service_index)
    try:
        spec = experiment.trial_spec(
            index, asked.number, asked.parameters, chosen, record.parameter_source, inputs=window.inputs
        )
    except SealingUnavailable as exc:
        store.fail_unlaunched(record.storage_id, str(exc))
        raise TrialCannotRun(f"trial {trial_id}: {exc}") from None
    loaded = bool(record.lineage is not None and record.lineage.parent_trial_id and not record.finished)
    if loaded:
        record, start_from = _parent_checkpoint(experiment, record, connections)
        spec = replace(spec, start_from=start_from)
    started = StartedTrial(
        experiment,
        record,
        spec,
        chosen,
        asked.resumed,
        handle=record.handle,
        experiment_deadline=window.deadline,
        run_id=run_id,
    )
    if record.finished:
        return started
    facts: dict[str, Any] = {}  # what the start records before the launch, in one write
    if newly_chosen:
        facts["service_index"] = chosen
    if loaded and record.handle is None and record.lineage is not None:  # what its parent's checkpoint gave
        facts["pbt"] = record.lineage.to_attr()
    if is_host_bound(started.platform_name):
        check_host(trial_id, {"host": record.host} if record.host else record.handle)
        if pin_host and record.host is None:
            facts["host"] = this_host()
    if task is not None:
        facts[TASK_ATTR] = task.to_attr()
    if facts:
        store.set_attrs(record.storage_id, **facts)
    if tracking is not None and record.handle is None:  # made now: trial code logging to MLflow lands in it
        started.spec = replace(spec, env={**spec.env, **tracking.trial_env(record.storage_id, state.attrs)})
    platform = experiment.platform(chosen, connections)
    platform.prepare_sync(experiment.experiment_id)
    try:
        handle = platform.describe(platform.submit_sync(started.spec))
    except (GpuRequestError, CodeDirectoryError) as exc:
        store.fail_unlaunched(record.storage_id, str(exc))
        raise TrialCannotRun(f"trial {trial_id}: {exc}") from exc
    started_at = record.started_at or time.time()
    store.set_status(record.storage_id, TrialStatus.WAITING, handle=handle, started_at=started_at)
    max_duration = experiment.config.max_trial_duration
    started.platform, started.handle = platform, handle
    started.deadline = started_at + max_duration if max_duration else None
    started.record = replace(record, status=TrialStatus.WAITING, handle=handle, started_at=started_at)
    # A stop that came while it was being submitted (steering.stop_runs marks the run, then asks
    # the trials it finds running: one asked meanwhile sees the mark here), and a deadline moved
    # meanwhile (steering's change reaches the trials it finds running; this one was not yet).
    now_window = experiment.window(store, run_id)
    started.experiment_deadline = now_window.deadline
    reason = stop_requested(store, record.storage_id) or now_window.stop_reason
    if reason:
        run_sync(stop_trial(platform, store, handle, record.storage_id, reason))
        started.record = store.trial(record.storage_id)
    return started


def _parent_checkpoint(
    experiment: Experiment, record: TrialRecord, connections: Connections | None
) -> tuple[TrialRecord, Resume | None]:
    """The PBT parent's last checkpoint this trial starts from, and at its first start the
    trial's lineage with what was found (the step, or why there is none: the trial then starts
    fresh, and its page says so), which the start records with its other facts."""
    assert record.lineage is not None
    step, start_from, note = None, None, None
    try:
        found = parent_checkpoint(experiment, record.lineage, connections)
        if found is None:
            note = f"its parent {record.lineage.parent_trial_id} kept no checkpoint"
        else:
            step, start_from = found
    except Exception as exc:  # the store down or refusing: said (its secrets masked), and the trial starts fresh
        note = mask_text(f"its parent's checkpoint could not be read: {exc}")[:500]
    if record.handle is None:
        record = replace(record, lineage=replace(record.lineage, loaded_step=step, note=note))
    return record, start_from


async def stop_trial(
    platform: TrainingPlatform[Any],
    store: ExperimentStore,
    handle: TrialHandle,
    storage_id: int,
    reason: str,
    status: TrialStatus = TrialStatus.USER_CANCELED,
) -> bool:
    """Close the trial in the store as ``status`` with ``reason``, then cancel its job.

    The store first: whoever follows the trial then sees the job end and finds this outcome
    already recorded (not a FAILED from a killed process), and the tuner and the end step stop
    counting it as running at once. A trial that had already ended keeps its outcome and its
    job is left alone (False); of two stops racing for one trial, one is told True.

    The stop is noted in the store before the close and cleared once the platform took it
    (trialflow.experiment.job_stops): a stop that dies between the two leaves its note, and the
    run's reconciler stops the job."""
    record = await asyncio.to_thread(store.trial, storage_id)
    if record.finished:
        return False
    noted = await job_stops.note(store, storage_id, status, reason)
    closed = await asyncio.to_thread(store.close_first, storage_id, status, reason)
    # Also when another stop closed it a moment ago. The store's handle is the trial's job now
    # where a restart from a checkpoint replaced the one the asker was given (a restart under
    # way when it closed cancels its own new job).
    await job_stops.stop_noted(platform, store, current_handle(handle, record.handle), storage_id, noted)
    return closed


def follower(
    started: StartedTrial, store: ExperimentStore, cursor: dict[str, Any] | None = None, seen_running: bool = False
) -> Follower:
    """The follow loop in the worker that submitted it (its experiment and platform reused)."""
    assert started.platform is not None
    return started.submission("", "").follower(
        store, cursor=cursor, seen_running=seen_running, experiment=started.experiment, platform=started.platform
    )


def wait_in_worker(
    started: StartedTrial, store: ExperimentStore, give_up_after: float | None, poll_interval: float
) -> FollowOutcome:
    """Follow from the worker for up to ``give_up_after`` seconds (None: to the end): a short
    trial ends here, without a deferral's second task start. ``outcome.status`` is None if it is
    still running."""
    return run_sync(follower(started, store).run(min(poll_interval, WORKER_POLL_INTERVAL), give_up_after))


@dataclass(frozen=True)
class TrialResult:
    """A finished trial: its XCom (``result``) and what the task's outcome is."""

    result: TrialXCom
    status: TrialStatus
    message: str | None

    @property
    def succeeded(self) -> bool:
        return self.status == TrialStatus.SUCCEEDED

    @property
    def xcom(self) -> dict[str, Any]:
        """The result as Airflow's XCom takes it (JSON values)."""
        return cast("dict[str, Any]", self.result)

    @property
    def stopped_on_purpose(self) -> bool:
        """Early stops, a person's kill or stop and the experiment's deadline end a trial by
        decision, not by error: the task is skipped. Failures and other cancellations fail it (without retry: the same
        parameters would fail the same way)."""
        return self.status in (TrialStatus.EARLY_STOPPED, TrialStatus.USER_CANCELED) or (
            self.status == TrialStatus.SYS_CANCELED and self.message == EXPERIMENT_DEADLINE_REASON
        )

    @property
    def task_state(self) -> TaskState:
        """The state its task ends in: a person's choice in Airflow where one marked it
        (trialflow.lifecycle.task_states), else success, skipped on purpose, or failed."""
        return task_state(self.succeeded, self.stopped_on_purpose, self.message)

    @property
    def label(self) -> str:
        return f"{self.result['trial_id']} {self.status.value}"

    def describe(self) -> str:
        return f"trial {self.result['trial_id']} {self.status.value}: {self.message or 'no detail'}"


def finish_trial(store: ExperimentStore, storage_id: int, status: TrialStatus, message: str | None) -> TrialResult:
    """Close the trial in the store (a second call leaves the first outcome) and build its result."""
    from trialflow.store.results import scalar

    record = store.close(storage_id, status, message)
    metric = scalar(record.final)
    result = trial_result(
        record.trial_index,
        record.trial_id,
        record.parameters,
        status,
        metric if metric is not None and math.isfinite(metric) else None,
        record.intermediate_count,
        record.handle,
        record.message,
    )
    return TrialResult(result, status, message)


def finished_outcome(record: TrialRecord) -> tuple[TrialStatus, str | None]:
    """How a trial that the store had already closed ended."""
    return record.status, record.message


def locate_trial(experiment: Experiment, store: ExperimentStore, run_id: str, map_index: int) -> int:
    """The storage id of trial ``map_index`` of run ``run_id`` (for a task resumed after a
    deferral that did not keep it)."""
    index = experiment.window(store, run_id).first_index + int(map_index)
    storage_id = store.find_trial_id(experiment.experiment_id, index)
    if storage_id is None:
        raise LookupError(f"trial {index} is not in the experiment store")
    return storage_id
