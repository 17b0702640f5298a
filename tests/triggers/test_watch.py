"""RunWatchTrigger beside real TrialTriggers of its run in one event loop (as in one triggerer),
with real local trials and a real store; what Airflow answers about the trial tasks is played
by the test (no scheduler): the watch ends as soon as the run's last trial trigger ends its
task, not at its next poll, and a task handed back to a worker is Airflow's to say ended."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from airflow.triggers.base import TaskSuccessEvent, TriggerEvent

from tests.triggers.test_trial import only_event
from trialflow.triggers import run_wakeups
from trialflow.triggers.trial import TrialTrigger
from trialflow.triggers.watch import RunWatchTrigger


def _watch(trial: TrialTrigger, poll_interval: float) -> RunWatchTrigger:
    sub = trial.submission
    return RunWatchTrigger(
        config_path=sub.config_path,
        store_conn_id=sub.store_conn_id,
        experiment_id=sub.experiment_id,
        workdir=sub.workdir,
        dag_id="dag",
        run_id="run1",
        trial_task_id="trial",
        poll_interval=poll_interval,
    )


def _in_run(trial: TrialTrigger, index: int) -> TrialTrigger:
    # what the triggerer sets on a trigger it runs for a task instance
    trial.task_instance = SimpleNamespace(dag_id="dag", run_id="run1", task_id="trial", map_index=index)
    return trial


async def _events(trigger: RunWatchTrigger) -> list[TriggerEvent]:
    return [event async for event in trigger.run()]


def test_the_watch_ends_when_the_last_trial_trigger_ends_its_task_not_at_its_next_poll(local_trials):
    submit, _ = local_trials
    trials = [_in_run(submit(i, "ok"), i) for i in range(2)]
    watch = _watch(trials[0], poll_interval=120)  # a poll would come far too late for the test
    asked: list[float] = []

    async def airflow_says() -> dict[int, str | None]:
        asked.append(time.monotonic())
        return {0: "deferred", 1: "deferred"}  # the trials' own events not applied yet

    watch._states = airflow_says  # type: ignore[method-assign]

    async def scenario() -> tuple[list[TriggerEvent], list[TriggerEvent], float]:
        watching = asyncio.ensure_future(_events(watch))
        while not asked:
            await asyncio.sleep(0.01)
        assert ("dag", "run1", "trial") in run_wakeups._LISTENING
        ended = await asyncio.gather(*(only_event(t) for t in trials))
        last_ended = time.monotonic()
        events = await asyncio.wait_for(watching, 30)
        return list(ended), events, time.monotonic() - last_ended

    ended, events, took = asyncio.run(scenario())
    assert all(isinstance(e, TaskSuccessEvent) for e in ended)
    assert len(events) == 1 and isinstance(events[0], TaskSuccessEvent), events
    assert events[0].xcoms == {"return_value": {"status": "DONE", "reconciled": []}}
    assert took < 10  # woken by the trial triggers (its poll is 120 s)
    assert len(asked) <= 4  # one pass at the start, one per wake-up: no polling between
    assert run_wakeups._LISTENING == {}  # nothing kept once the watch ended


def test_a_task_handed_back_to_its_worker_is_ended_when_airflow_says_so(local_trials):
    submit, _ = local_trials
    trial = _in_run(submit(3, "fail"), 0)  # a failed trial goes back to the worker
    watch = _watch(trial, poll_interval=0.3)
    says: dict[int, str | None] = {0: "deferred"}
    passes_before_failed: list[dict[int, str | None]] = []

    async def airflow_says() -> dict[int, str | None]:
        return dict(says)

    watch._states = airflow_says  # type: ignore[method-assign]

    async def scenario() -> list[TriggerEvent]:
        watching = asyncio.ensure_future(_events(watch))
        event = await only_event(trial)
        assert not isinstance(event, TaskSuccessEvent) and event.payload["status"] == "FAILED"
        await asyncio.sleep(1.5)  # woken, and several polls: the task is still Airflow's to end
        passes_before_failed.append(dict(says))
        assert not watching.done()
        says[0] = "failed"  # the worker ended it
        return await asyncio.wait_for(watching, 30)

    events = asyncio.run(scenario())
    assert passes_before_failed == [{0: "deferred"}]
    assert len(events) == 1 and isinstance(events[0], TaskSuccessEvent)


class _NeverEarly:
    async def ask_early(self, states: object, now: float, poll: float) -> bool:
        return False


def test_a_wake_while_other_tasks_run_waits_for_the_poll_and_the_last_one_passes_at_once():
    watch = RunWatchTrigger(
        config_path="c.yml",
        store_conn_id="conn",
        experiment_id="exp",
        workdir="/tmp",
        dag_id="dag",
        run_id="run1",
        trial_task_id="trial",
        poll_interval=1.0,
    )
    states: dict[int, str | None] = {0: "deferred", 1: "deferred"}

    async def pause_after(*ending: int) -> float:
        with run_wakeups.listening("dag", "run1", "trial") as wakeup:
            loop = asyncio.get_running_loop()
            for index in ending:
                loop.call_later(0.05, run_wakeups.task_ended, "dag", "run1", "trial", index, "success")
            began = time.monotonic()
            await watch._pause(wakeup, _NeverEarly(), states)  # type: ignore[arg-type]
            return time.monotonic() - began

    assert asyncio.run(pause_after(0)) >= 0.9  # one of two ended: Airflow is asked at the poll
    assert asyncio.run(pause_after(0, 1)) < 0.5  # the run's last task ended here: asked at once


def test_the_polls_leave_airflow_ten_times_its_last_answer_and_at_most_half_a_minute():
    from trialflow.triggers.watch import poll_after

    assert poll_after(2.0, 0.01) == 2.0  # a small run: the poll as configured
    assert poll_after(2.0, 0.5) == 5.0  # 1,000 tasks answered in 0.5 s: a tenth of the time asking
    assert poll_after(2.0, 7.0) == 30.0  # a slow answer at a busy start: not minutes of no look
    assert poll_after(60.0, 7.0) == 60.0  # a longer configured poll stays
