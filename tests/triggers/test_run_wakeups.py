"""The wake-ups a run's trial triggers give its watch in the same triggerer: kept only while a
watch listens, and Airflow's answer wins as soon as it shows a task anything but deferred."""

from __future__ import annotations

import asyncio

from trialflow.triggers import run_wakeups


def test_nothing_is_kept_for_a_run_no_watch_listens_to():
    run_wakeups.task_ended("d", "r", "trial", 0, "success")
    assert run_wakeups._LISTENING == {}
    with run_wakeups.listening("d", "r", "trial") as wakeup:
        run_wakeups.task_ended("d", "other-run", "trial", 0, "success")
        run_wakeups.task_ended("d", "r", "group.trial", 0, "success")  # another group's trials
        assert wakeup.ended == {} and not wakeup.event.is_set()
    assert run_wakeups._LISTENING == {}


def test_a_task_ended_here_counts_as_ended_while_airflow_still_shows_it_deferred():
    with run_wakeups.listening("d", "r", "trial") as wakeup:
        run_wakeups.task_ended("d", "r", "trial", 1, "success")
        run_wakeups.task_ended("d", "r", "trial", 2, "skipped")
        run_wakeups.task_ended("d", "r", "trial", 3, None)  # a worker resumes it: no state here
        asked = {0: "running", 1: "deferred", 2: "deferred", 3: "deferred"}
        assert wakeup.merged(asked) == {0: "running", 1: "success", 2: "skipped", 3: "deferred"}
        assert asked[1] == "deferred"  # Airflow's answer itself is left as it was
        # once Airflow shows the end, its answer is the truth, and the note goes
        assert wakeup.merged({1: "success", 2: "deferred"}) == {1: "success", 2: "skipped"}
        assert wakeup.ended == {2: "skipped"}


def test_a_task_cleared_after_it_ended_here_is_not_taken_for_ended_on_its_next_try():
    with run_wakeups.listening("d", "r", "trial") as wakeup:
        run_wakeups.task_ended("d", "r", "trial", 0, "success")
        assert wakeup.merged({0: None}) == {0: None}  # cleared before the event was applied
        assert wakeup.merged({0: "deferred"}) == {0: "deferred"}  # its next try, deferred again
        run_wakeups.task_ended("d", "r", "trial", 5, "success")
        assert wakeup.merged({}) == {}  # not in Airflow's answer at all: nothing invented
        assert wakeup.ended == {}


def test_wait_returns_at_once_when_woken_and_after_the_timeout_otherwise():
    async def scenario() -> tuple[bool, float, bool, float]:
        loop = asyncio.get_running_loop()
        with run_wakeups.listening("d", "r", "trial") as wakeup:
            started = loop.time()
            quiet = await wakeup.wait(0.2)
            quiet_took = loop.time() - started
            loop.call_later(0.05, run_wakeups.task_ended, "d", "r", "trial", 0, "success")
            started = loop.time()
            woken = await wakeup.wait(30)
            woken_took = loop.time() - started
            assert not wakeup.event.is_set()  # cleared for the next wait
        return quiet, quiet_took, woken, woken_took

    quiet, quiet_took, woken, woken_took = asyncio.run(scenario())
    assert quiet is False and quiet_took >= 0.19
    assert woken is True and woken_took < 5


def test_only_a_wake_that_may_end_the_run_is_worth_asking_airflow_at_once():
    with run_wakeups.listening("d", "r", "trial") as wakeup:
        asked = {0: "success", 1: "deferred", 2: "deferred", 3: "scheduled"}
        assert not wakeup.may_end_run(asked)
        run_wakeups.task_ended("d", "r", "trial", 1, "success")
        assert not wakeup.may_end_run(asked)  # 2 and 3 still to end: the poll will see 1
        run_wakeups.task_ended("d", "r", "trial", 2, None)  # handed back: its worker ends it
        assert not wakeup.may_end_run(asked)
        run_wakeups.task_ended("d", "r", "trial", 3, "skipped")
        assert wakeup.may_end_run(asked)  # every task ended, or ended here since the answer
        assert not wakeup.may_end_run({})  # no answer yet: nothing to say the run is over
        wakeup.merged({0: "success", 1: "success", 2: "deferred", 3: "deferred"})
        # after an answer, a handed-back task is Airflow's to say ended
        assert not wakeup.may_end_run({0: "success", 1: "success", 2: "deferred", 3: "deferred"})
