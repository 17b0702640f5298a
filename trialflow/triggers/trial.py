"""TrialTrigger: follows one trial on its platform from the triggerer, without a worker slot.

It polls the platform for status and *new* metrics only (the cursor), writes
intermediate results to the experiment store as they arrive, enforces
maxTrialDuration by cancelling the trial (EARLY_STOPPED, as NNI), and fires
once when the trial ends. Everything it needs is in its kwargs, so a restarted
triggerer picks up where the last one was (re-reading at most one poll, which
the store absorbs: intermediate values are keyed by sequence).

A trial that succeeded or was stopped on purpose ends its task here (Airflow's
task-ending events, the result as the task's XCom): resuming a worker only to
record what the trigger already knows cost a scheduler round and a task start
(seconds per trial). A failed trial still goes back to the worker, which fails the
task without retries (a task-ending failure would be retried, and a retry of a
failed trial only finds it failed again). A trigger error goes back too: the
worker fails that attempt so a retry re-attaches to the same job.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TaskSkippedEvent, TaskSuccessEvent, TriggerEvent

if TYPE_CHECKING:
    from trialflow.follow import FollowOutcome, StopCheck
    from trialflow.platforms.base import TrainingPlatform
    from trialflow.tuning.store import ExperimentStore


class TrialTrigger(BaseTrigger):
    """Follow one submitted trial until it ends; fires one event with its outcome.

    :param config_path: the experiment config (read again here: the platform is rebuilt
        from it, so the trigger's kwargs hold no secrets).
    :param experiment_id: the experiment's id in the store.
    :param workdir: the experiment's working folder on this machine.
    :param handle: what the platform's submit returned (JSON: pod name, remote folder...).
    :param storage_id: the trial's row in the store.
    :param cursor: how far the metrics were read (a restarted triggerer resumes from it).
    :param service_index: which training service of the config runs the trial.
    :param store_conn_id: the ``trialflow`` connection of the experiment store.
    :param deadline: epoch seconds when maxTrialDuration ends the trial (EARLY_STOPPED).
    :param poll_interval: seconds between polls (a platform with a watch wakes sooner).
    :param seen_running: the trial was seen running before (a vanished handle then means
        it was lost, not that it has not started).
    :param experiment_deadline: epoch seconds when maxExperimentDuration ends the trial.
    :param end_task: end the task from here when the trial succeeded or was stopped on purpose
        (False: always resume the worker with the outcome).
    """

    def __init__(
        self,
        *,
        config_path: str,
        experiment_id: str,
        workdir: str,
        handle: dict[str, Any],
        storage_id: int,
        cursor: dict[str, Any] | None = None,
        service_index: int = 0,
        store_conn_id: str = "trialflow_default",
        deadline: float | None = None,
        poll_interval: float = 1.0,
        seen_running: bool = False,
        experiment_deadline: float | None = None,
        end_task: bool = True,
    ):
        super().__init__()
        self.config_path = config_path
        self.experiment_id = experiment_id
        self.workdir = workdir
        self.handle = handle
        self.storage_id = storage_id
        self.cursor = cursor or {}
        self.service_index = service_index
        self.store_conn_id = store_conn_id
        self.deadline = deadline
        self.poll_interval = poll_interval
        self.seen_running = seen_running
        self.experiment_deadline = experiment_deadline
        self.end_task = end_task

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "config_path": self.config_path,
                "experiment_id": self.experiment_id,
                "workdir": self.workdir,
                "handle": self.handle,
                "storage_id": self.storage_id,
                "cursor": self.cursor,
                "service_index": self.service_index,
                "store_conn_id": self.store_conn_id,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "seen_running": self.seen_running,
                "experiment_deadline": self.experiment_deadline,
                "end_task": self.end_task,
            },
        )

    def _open(self) -> tuple[TrainingPlatform, ExperimentStore, StopCheck | None]:
        from trialflow.config import load_config
        from trialflow.experiment import Experiment
        from trialflow.hooks import airflow_connections
        from trialflow.hooks.store import ExperimentStoreHook

        # The config as it is now (validated in full at DAG parse and at the experiment's start).
        experiment = Experiment(load_config(self.config_path), self.experiment_id, Path(self.workdir))
        store = ExperimentStoreHook(self.store_conn_id).get_conn()
        return (
            experiment.platform(self.service_index, airflow_connections()),
            store,
            experiment.early_stop_check(store, self.storage_id),
        )

    def _error(self, message: str) -> TriggerEvent:
        return TriggerEvent({"status": "ERROR", "message": message, "exit_code": None, "cursor": self.cursor})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from trialflow.follow import follow_trial

        trial_id = self.handle.get("trial_id")
        try:
            platform, store, stop_check = await asyncio.to_thread(self._open)
        except Exception as exc:
            yield self._error(f"cannot follow trial {trial_id}: {exc}")
            return
        try:
            outcome = await follow_trial(
                platform,
                store,
                self.handle,
                self.storage_id,
                self.cursor,
                deadline=self.deadline,
                poll_interval=self.poll_interval,
                seen_running=self.seen_running,
                experiment_deadline=self.experiment_deadline,
                stop_check=stop_check,
            )
        except Exception as exc:
            yield self._error(f"following trial {trial_id} failed: {exc}")
            return
        self.cursor = outcome.cursor
        try:
            event = await asyncio.to_thread(self._ending, store, outcome)
        except Exception as exc:  # the store refused: the worker records it (and retries if need be)
            self.log.warning("cannot end trial %s's task from the triggerer: %s", trial_id, exc)
            event = TriggerEvent(outcome.to_event())
        yield event

    def _ending(self, store: ExperimentStore, outcome: FollowOutcome) -> TriggerEvent:
        """The task-ending event for a trial that succeeded or was stopped on purpose (recorded
        in the store first, as the worker would); the outcome for the worker otherwise."""
        from trialflow import lifecycle

        if not self.end_task or outcome.status is None:
            return TriggerEvent(outcome.to_event())
        result = lifecycle.finish_trial(store, self.storage_id, outcome.status, outcome.message)
        if result.succeeded:
            return TaskSuccessEvent(xcoms={"return_value": result.result})
        if result.stopped_on_purpose:
            self.log.info("%s", result.describe())
            return TaskSkippedEvent(xcoms={"return_value": result.result})
        return TriggerEvent(outcome.to_event())
