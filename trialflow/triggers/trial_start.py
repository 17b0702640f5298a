"""TrialStartTrigger: a trial task that starts in the triggerer, then follows its trial there.

Airflow 3 lets a deferrable operator begin in the triggerer (``start_from_trigger``): the task
instance exists for every button, log and retry, but no worker process is made for it, which
on a small machine is most of a short trial's cost (a task supervisor, a DAG parse, trialflow's
imports). The trigger waits for a slot of trialConcurrency, runs the worker's very start in a
thread (trialflow.lifecycle.triggered_start), then follows the trial as TrialTrigger does, in
the same coroutine. It decides nothing: what it yields is what the core said.

Airflow 3.3 starts a *mapped* task from the triggerer only with the operator class's own
``start_trigger_args`` (set on an instance, they are not seen: measured), so the trigger's
kwargs are the same for every trial and it reads the operator's arguments from the task it is
given (``task_instance.task``: for a mapped task, its partial arguments).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TaskSkippedEvent, TriggerEvent

from trialflow.blocking import in_thread

if TYPE_CHECKING:
    from trialflow.experiment import Experiment
    from trialflow.lifecycle.trial_lifecycle import StartedTrial
    from trialflow.store.experiment_store import ExperimentStore
    from trialflow.triggers.trial import TrialTrigger

log = logging.getLogger(__name__)

#: The worker's ``execute_complete`` fails the task with this event's message (no retry).
CANNOT_RUN = "CANNOT_RUN"
#: The trial did not start (a stopped run, its deadline, maxTrialNumber): the task is skipped.
NOT_STARTED = "NOT_STARTED"

#: Starts and stops under way (a reference keeps each alive until it ends: see on_kill).
_WORK: set[asyncio.Future[Any]] = set()


def _event(payload: dict[str, Any]) -> TriggerEvent:
    """Airflow's TriggerEvent (untyped there), made in one place."""
    return TriggerEvent(payload)  # type: ignore[no-untyped-call, unused-ignore]


def operator_argument(task: Any, name: str, default: Any = None) -> Any:
    """An argument the trial operator was given: a mapped task's partial argument, or an
    attribute of a task of its own."""
    partial = getattr(task, "partial_kwargs", None)
    if isinstance(partial, dict):
        return partial.get(name, default)
    return getattr(task, name, default)


class TrialStartTrigger(BaseTrigger):
    """Start trial ``map_index`` of its task's run (its turn, its parameters, its launch), then
    follow it to its end; the events are TrialTrigger's, and two of its own (see module)."""

    def __init__(self, **kwargs: Any):
        super().__init__()  # type: ignore[no-untyped-call, unused-ignore]
        self.kwargs = kwargs  # none today: the operator's arguments come with the task
        self._start: asyncio.Future[StartedTrial] | None = None  # its turn, then its start
        self._launching: asyncio.Future[StartedTrial] | None = None  # the start itself, in a thread
        self._follow: TrialTrigger | None = None
        self._prepared: PreparedStart | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", dict(self.kwargs)

    @property
    def _ti(self) -> Any:
        """The task instance the triggerer gave (a runtime one: the task, its context)."""
        return self.task_instance

    def _launched(self, future: asyncio.Future[StartedTrial]) -> None:
        self._launching = future

    def _in_flight(self) -> bool:
        """A start is running in its thread now (it cannot be interrupted: it is let end)."""
        return self._launching is not None and not self._launching.done()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from trialflow.lifecycle import trial_lifecycle, triggered_start
        from trialflow.triggers.task_context import TriggerContext

        ti = self._ti
        try:
            context = TriggerContext(ti)
            prepared = self._prepared = await in_thread(self._prepare, context)
        except Exception as exc:
            yield _event({"status": "ERROR", "message": f"cannot start the trial of {ti.task_id}: {exc}"})
            return
        self._start = asyncio.ensure_future(prepared.start_in_turn(self._launched))
        try:
            started = await asyncio.shield(self._start)
        except asyncio.CancelledError:
            if not self._in_flight():  # waiting for its turn: nothing asked or launched
                self._start.cancel()
            raise  # a start in flight ends, and on_kill (a person's action) stops what it launched
        except trial_lifecycle.TrialNotStarted as exc:
            from trialflow.triggers.trial import listeners_present

            # with listeners (OpenLineage) a worker ends the task, so they see it end
            ended = prepared.end_task and not await in_thread(listeners_present)
            yield TaskSkippedEvent() if ended else _event({"status": NOT_STARTED, "message": str(exc)})
            return
        except trial_lifecycle.TrialCannotRun as exc:
            yield _event({"status": CANNOT_RUN, "message": str(exc)})
            return
        except triggered_start.StartSuperseded as exc:  # an earlier try's trigger run again: no task hears it
            self.log.info("Not starting trial %s of try %s: %s", ti.map_index, ti.try_number, exc)
            yield _event({"status": "ERROR", "message": f"another start of this trial task is under way: {exc}"})
            return
        except Exception as exc:  # the store or the platform refused: a retry starts it again
            yield _event({"status": "ERROR", "message": f"starting the trial failed: {exc}"})
            return
        if started.finished:  # a retry found it ended: the worker reports it
            yield _event({"status": started.record.status.value, "message": started.record.message})
            return
        await in_thread(prepared.keep_platform_link, started)
        line = _SubmittedLine(self.log, started)
        self._follow = prepared.follow(started)
        self._follow.task_instance = ti
        try:
            async for event in self._follow.run():
                from trialflow.lifecycle.triggered_start import poke

                poke(prepared.experiment.experiment_id, str(ti.run_id))  # its slot frees: a waiting start looks now
                line.write()
                yield event
        finally:
            line.write()

    def _prepare(self, context: Any) -> PreparedStart:
        """The experiment, the store and the operator's arguments (blocking reads: a thread)."""
        from trialflow.hooks.experiment_store import DEFAULT_CONN_ID
        from trialflow.triggers.task_context import shared_experiment, shared_store

        task = self._ti.task
        config_path = str(operator_argument(task, "config_path"))
        conn_id = str(operator_argument(task, "store_conn_id", DEFAULT_CONN_ID))
        group = operator_argument(task, "experiment_group")
        experiment = shared_experiment(config_path, context, group=group)
        store = shared_store(conn_id)
        return PreparedStart(
            self.task_instance,
            context,
            experiment,
            store,
            config_path,
            conn_id,
            group,
            float(operator_argument(task, "poll_interval", 1.0)),
            bool(operator_argument(task, "end_from_trigger", True)),
        )

    async def on_kill(self) -> None:
        """A person marked the task, cleared it or failed its run. Once the trial is followed,
        the follow's on_kill stops it; a start in flight is let end (an ask and a launch:
        seconds) and what it launched is stopped then, so no trial runs without its task; a
        start still waiting for its turn was cancelled with the trigger. Shielded, as
        TrialTrigger's: the triggerer cancels a killed trigger's task again on its next loop."""
        work = asyncio.ensure_future(self._stop())
        _WORK.add(work)
        work.add_done_callback(_WORK.discard)
        await asyncio.shield(work)

    async def _stop(self) -> None:
        if self._follow is None and self._launching is not None and self._prepared is not None:
            try:
                started = await self._launching
            except Exception:
                return  # nothing was launched
            if started.finished or started.handle is None:
                return
            self._follow = self._prepared.follow(started)
            self._follow.task_instance = self.task_instance
        if self._follow is not None:
            await self._follow.on_kill()


#: Seconds a trial's "submitted" line may wait to be written with its end (see _SubmittedLine).
SUBMITTED_LINE_WAIT = 5.0


class _SubmittedLine:
    """The task log's "submitted" line, written when the trial's first event comes or
    SUBMITTED_LINE_WAIT seconds after its start, whichever is first, with the time of the
    submission in its words. Each line a trigger logs wakes the triggerer's supervisor for one
    turn of its loop, whose database work grows with the triggers it holds (a run of 1,000
    trials holds 1,000); a one-second trial's line then costs a turn of its own, where written
    with the end it rides on the turn the end needs anyway (bench/thousand.py)."""

    def __init__(self, log: Any, started: StartedTrial):
        self._log, self._started, self._at = log, started, time.time()
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(SUBMITTED_LINE_WAIT, self.write)

    def write(self) -> None:
        """Write the line, once."""
        if self._timer is None:
            return
        self._timer.cancel()
        self._timer = None
        spec = self._started.spec
        when = datetime.fromtimestamp(self._at, UTC).strftime("%H:%M:%S")
        self._log.info("Trial %s submitted at %s UTC with parameters %s", spec.trial_id, when, spec.parameters)


@dataclass(frozen=True)
class PreparedStart:
    """What a trial's start in the triggerer works with, read once."""

    ti: Any
    context: Any
    experiment: Experiment
    store: ExperimentStore
    config_path: str
    conn_id: str
    group: str | None
    poll_interval: float
    end_task: bool

    def start(self) -> StartedTrial:
        """The worker's start, as it is (blocking: run in a thread)."""
        from trialflow.hooks import airflow_connections
        from trialflow.lifecycle import trial_lifecycle
        from trialflow.triggers.task_context import tracking_for

        return trial_lifecycle.start_trial(
            self.experiment,
            self.store,
            str(self.ti.run_id),
            int(self.ti.map_index),
            connections=airflow_connections(),
            **tracking_for(self.experiment, self.context, self.store),
        )

    def keep_platform_link(self, started: StartedTrial) -> None:
        """The task's "Platform" link, where the config gives one (``trialWebUrl``, or a
        platform that knows its job's page): kept as the worker keeps it, since no worker
        runs this task (blocking: Airflow's XCom requests; run in a thread). A trial whose
        link could not be kept runs all the same."""
        from trialflow.ui.links import PLATFORM_URL_KEY, PlatformLink, trial_platform_page

        assert started.handle is not None  # a started trial that has not ended
        template = self.experiment.config.training_service[started.service_index].trial_web_url
        web = trial_platform_page(template, dict(started.handle), self.experiment.experiment_id)
        if not web:
            return
        from airflow.sdk.execution_time.xcom import XCom

        ti = self.ti  # its task is a serialized one here, which the task instance's own push refuses
        where = {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id, "map_index": ti.map_index}
        try:
            XCom.set(PLATFORM_URL_KEY, web, **where)
            XCom.set(PlatformLink().xcom_key, web, **where)
        except Exception as exc:
            log.warning("trial %s: its platform link was not kept: %s", started.spec.trial_id, exc)

    def start_in_turn(self, launching: Any) -> Any:
        from trialflow.lifecycle import triggered_start

        dag_id = str(self.ti.dag_id)
        return triggered_start.start_in_turn(
            self.experiment,
            self.store,
            str(self.ti.run_id),
            int(self.ti.map_index),
            lambda: triggered_start.concurrency(self.experiment, self.store, dag_id, self.group),
            self.start,
            launching=launching,
            attempt=int(self.ti.try_number),
        )

    def follow(self, started: StartedTrial) -> TrialTrigger:
        from trialflow.triggers.trial import TrialTrigger

        submission = started.submission(self.config_path, self.conn_id).to_dict()
        trigger = TrialTrigger(submission=submission, poll_interval=self.poll_interval, end_task=self.end_task)
        trigger.experiment = self.experiment
        return trigger
