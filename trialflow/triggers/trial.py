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
import functools
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TaskSkippedEvent, TaskSuccessEvent, TriggerEvent

from trialflow.blocking import in_thread

if TYPE_CHECKING:
    from trialflow.experiment import Experiment
    from trialflow.experiment.follow import Follower, FollowOutcome
    from trialflow.store.experiment_store import ExperimentStore


#: The event that ends a trial's task from the triggerer, by the state the task ends in
#: (trialflow.lifecycle.task_states decides which). Not "failed": Airflow turns a trigger's
#: TaskFailedEvent into a retry where retries are left, and a trial's are for infrastructure
#: faults; the worker fails the task without one.
_END_EVENTS: dict[str, type[TaskSuccessEvent | TaskSkippedEvent]] = {
    "success": TaskSuccessEvent,
    "skipped": TaskSkippedEvent,
}

#: Stops under way (a reference keeps each task alive until it ends: see TrialTrigger.on_kill).
_STOPPING: set[asyncio.Future[None]] = set()


class TrialTrigger(BaseTrigger):
    """Follow one submitted trial until it ends; fires one event with its outcome.

    :param submission: the trial as trialflow.lifecycle.submission.Submission.to_dict() wrote it (the
        config is read again here and the platform rebuilt from it, so the kwargs hold no secret).
    :param cursor: how far the metrics were read (a restarted triggerer resumes from it).
    :param poll_interval: seconds between polls (a platform with a watch wakes sooner).
    :param seen_running: the trial was seen running before (a vanished handle then means
        it was lost, not that it has not started).
    :param end_task: end the task from here when the trial succeeded or was stopped on purpose
        (False: always resume the worker with the outcome).
    :param legacy: a trigger serialized before submissions were one value (its fields flat).
    """

    def __init__(
        self,
        *,
        submission: dict[str, Any] | None = None,
        cursor: dict[str, Any] | None = None,
        poll_interval: float = 1.0,
        seen_running: bool = False,
        end_task: bool = True,
        **legacy: Any,
    ):
        super().__init__()
        from trialflow.lifecycle.submission import Submission

        self.submission = Submission.from_dict(submission if submission is not None else legacy)
        self.cursor = cursor or {}
        self.poll_interval = poll_interval
        self.seen_running = seen_running
        self.end_task = end_task
        #: The experiment of the start that made this trigger in this process (never
        #: serialized): the follow takes it, as the worker's follow does, instead of loading
        #: the config again for each trial (a trigger the triggerer made from its kwargs, after
        #: a restart, loads it). Not the platform: one made for the start's thread may hold a
        #: client of another event loop (Kubernetes'), so the follow builds its own.
        self.experiment: Experiment | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "submission": self.submission.to_dict(),
                "cursor": self.cursor,
                "poll_interval": self.poll_interval,
                "seen_running": self.seen_running,
                "end_task": self.end_task,
            },
        )

    def _open(self) -> tuple[Follower, ExperimentStore]:
        from trialflow.hooks import airflow_connections
        from trialflow.triggers.task_context import shared_store

        store = shared_store(self.submission.store_conn_id)  # one per store in the triggerer
        follower = self.submission.follower(
            store, airflow_connections(), self.cursor, seen_running=self.seen_running, experiment=self.experiment
        )
        return follower, store

    def _error(self, message: str) -> TriggerEvent:
        return TriggerEvent({"status": "ERROR", "message": message, "exit_code": None, "cursor": self.cursor})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        trial_id = self.submission.handle.get("trial_id")
        try:
            follower, store = await in_thread(self._open)
        except Exception as exc:
            yield self._error(f"cannot follow trial {trial_id}: {exc}")
            return
        try:
            outcome = await follower.run(self.poll_interval)
        except Exception as exc:
            yield self._error(f"following trial {trial_id} failed: {exc}")
            return
        self.cursor = outcome.cursor
        try:
            event = await in_thread(self._ending, store, outcome)
        except Exception as exc:  # the store refused: the worker records it (and retries if need be)
            self.log.warning("cannot end trial %s's task from the triggerer: %s", trial_id, exc)
            event = TriggerEvent(outcome.to_event())
        self._tell_watch(event)
        yield event

    def _tell_watch(self, event: TriggerEvent) -> None:
        """Wake the run's watch if it listens in this triggerer (trialflow.triggers.run_wakeups):
        with the state this event ends the task with, or none when a worker ends it."""
        from trialflow.triggers import run_wakeups

        ti = getattr(self, "task_instance", None)
        if ti is None:
            return
        ended = next((state for state, kind in _END_EVENTS.items() if type(event) is kind), None)
        run_wakeups.task_ended(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ended)

    async def on_kill(self) -> None:
        """A person marked the deferred task failed or success, cleared it, or failed its DAG
        run (Airflow calls this for nothing else: not on a triggerer restart or redistribution,
        which must leave the trial running): cancel its job and record USER_CANCELED.

        The work runs as a task of its own, shielded: the triggerer cancels a killed trigger's
        task again on its next loop (measured: ~2.5 s later), which would otherwise interrupt
        the stop half done."""
        work = asyncio.ensure_future(self._stop_from_airflow())
        _STOPPING.add(work)
        work.add_done_callback(_STOPPING.discard)
        await asyncio.shield(work)

    async def _stop_from_airflow(self) -> None:
        from trialflow.from_airflow.why_stopped import TaskRef, stop_from_airflow, trigger_kill_reason

        trial_id = self.submission.handle.get("trial_id")
        try:
            ref = TaskRef.of(self.task_instance)
            stop = await trigger_kill_reason(ref)
            self.log.info("Stopping trial %s: %s", trial_id, stop.reason)
            await stop_from_airflow(
                self.submission, stop, ref.run_id if ref else "", dag_id=ref.dag_id if ref else None
            )
        except Exception:
            self.log.exception("could not stop trial %s", trial_id)

    def _ending(self, store: ExperimentStore, outcome: FollowOutcome) -> TriggerEvent:
        """The task-ending event for a trial that succeeded or was stopped on purpose (recorded
        in the store first, as the worker would); the outcome for the worker otherwise."""
        from trialflow.lifecycle import trial_lifecycle

        if not self.end_task or outcome.status is None or listeners_present():
            return TriggerEvent(outcome.to_event())
        result = trial_lifecycle.finish_trial(store, self.submission.storage_id, outcome.status, outcome.message)
        ending = _END_EVENTS.get(result.task_state)
        if ending is None:  # a failure, or a task a person marked failed: the worker fails it
            return TriggerEvent(outcome.to_event())
        if not result.succeeded:
            self.log.info("%s", result.describe())
        return ending(xcoms={"return_value": result.xcom})


@functools.cache
def listeners_present() -> bool:
    """Whether Airflow has listener plugins here (OpenLineage's, when it is configured). A task
    the triggerer ends never reaches them (Airflow's DAG bag refuses ``end_from_trigger`` then),
    so with listeners the worker resumes and ends the task. Read once per triggerer process
    (loading the listener manager takes ~1.5 s; callers are in a thread)."""
    try:
        from airflow.listeners.listener import get_listener_manager

        return bool(get_listener_manager().has_listeners)
    except Exception:  # no listener machinery: nothing to tell
        return False
