"""Which stops from Airflow cancel a trial: every task-instance state, both DAG-run states."""

from __future__ import annotations

import pytest

from trialflow.from_airflow.why_stopped import (
    NOT_A_PERSON,
    SOME_ACTION,
    AirflowStop,
    TaskRef,
    as_recorded,
    reason_for,
    stop_from_airflow,
    worker_kill_reason,
)

# Every TaskInstanceState Airflow 3.3 has, and None (a cleared task's new try).
STATES = [
    None,
    "removed",
    "scheduled",
    "queued",
    "running",
    "success",
    "restarting",
    "failed",
    "up_for_retry",
    "up_for_reschedule",
    "upstream_failed",
    "skipped",
    "deferred",
    "awaiting_input",
]


def test_the_list_covers_airflows_states():
    from airflow.utils.state import TaskInstanceState

    assert {s.value for s in TaskInstanceState} == {s for s in STATES if s}


@pytest.mark.parametrize("ti_state", STATES)
@pytest.mark.parametrize("dag_run_state", ["running", "failed"])
def test_only_a_persons_action_cancels(ti_state, dag_run_state):
    stop = reason_for(ti_state, dag_run_state, "manual__1")
    if ti_state in NOT_A_PERSON:
        assert stop is None  # a fault or a retry: the trial runs on for the next attempt
        return
    assert stop is not None and stop.reason.startswith("stopped from Airflow: ")
    assert stop.whole_run == (dag_run_state == "failed")
    assert stop.reason.endswith("; DAG run manual__1 is failed") == (dag_run_state == "failed")
    expected = {
        "failed": "marked failed",
        "success": "marked success",
        "restarting": "cleared",
        None: "cleared",
        "skipped": "marked skipped",
    }.get(ti_state, "")
    assert expected in stop.reason


@pytest.mark.parametrize("ti_state", sorted(NOT_A_PERSON))
def test_for_the_trigger_a_task_already_in_its_next_try_was_cleared(ti_state):
    stop = reason_for(ti_state, "running", "r", known_person=True)
    assert stop is not None and stop.reason == "stopped from Airflow: its task was cleared"
    assert reason_for("failed", "running", "r", known_person=True).reason.endswith("marked failed")


def test_the_worker_keeps_the_trial_when_airflow_cannot_be_asked(monkeypatch):
    import trialflow.from_airflow.why_stopped as module

    def unreachable(ref):
        raise ConnectionError("api-server down")

    monkeypatch.setattr(module, "ask_states", unreachable)
    assert worker_kill_reason(TaskRef("d", "r", "trial", 3)) is None
    assert worker_kill_reason(None) is None
    monkeypatch.setattr(module, "ask_states", lambda ref: ("failed", "running"))
    stop = worker_kill_reason(TaskRef("d", "r", "trial", 3))
    assert stop is not None and "marked failed" in stop.reason


def test_a_hung_answer_is_given_up_on_in_bounded_time(monkeypatch):
    import threading
    import time

    import trialflow.from_airflow.why_stopped as module

    release = threading.Event()
    monkeypatch.setattr(module, "ASK_TIMEOUT", 0.2)
    monkeypatch.setattr(module, "ask_states", lambda ref: (release.wait(5), ("failed", "running"))[1])
    started = time.monotonic()
    assert worker_kill_reason(TaskRef("d", "r", "trial", 0)) is None
    assert time.monotonic() - started < 2
    release.set()


def test_the_triggers_fallback_names_every_action():
    assert not SOME_ACTION.whole_run and "marked failed, success or cleared" in SOME_ACTION.reason


def test_task_ref_from_a_task_instance():
    class TI:
        dag_id, run_id, task_id, map_index = "d", "r", "trial", 4

    assert TaskRef.of(TI()) == TaskRef("d", "r", "trial", 4)
    TI.map_index = 0
    assert TaskRef.of(TI()) == TaskRef("d", "r", "trial", 0)
    assert TaskRef.of(None) is None


def test_states_are_read_as_airflow_spells_them(monkeypatch):
    """The execution API answers with enums whose str() is 'DagRunState.FAILED'."""
    import airflow.sdk.execution_time.task_runner as runner
    from airflow.sdk.api.datamodels._generated import DagRunState, TaskInstanceState

    import trialflow.from_airflow.why_stopped as module

    monkeypatch.setattr(
        runner.RuntimeTaskInstance,
        "get_task_states",
        staticmethod(lambda **kw: {"r": {"trial_2": TaskInstanceState.FAILED}}),
    )
    monkeypatch.setattr(runner.RuntimeTaskInstance, "get_dagrun_state", staticmethod(lambda **kw: DagRunState.FAILED))
    assert module.ask_states(TaskRef("d", "r", "trial", 2)) == ("failed", "failed")
    stop = worker_kill_reason(TaskRef("d", "r", "trial", 2))
    assert stop is not None and stop.whole_run


def test_a_task_marked_failed_asks_its_runs_state_again_a_moment_later(monkeypatch):
    """Marking a run failed marks its tasks first: the run read at that instant still says
    running, and one more look, a moment later, finds it failed (the message then says both)."""
    import airflow.sdk.execution_time.task_runner as runner

    import trialflow.from_airflow.why_stopped as module

    answers = iter(["running", "failed"])
    monkeypatch.setattr(module, "RUN_STATE_SETTLE_SECONDS", 0.01)
    monkeypatch.setattr(
        runner.RuntimeTaskInstance, "get_task_states", staticmethod(lambda **kw: {"r": {"trial": "failed"}})
    )
    monkeypatch.setattr(runner.RuntimeTaskInstance, "get_dagrun_state", staticmethod(lambda **kw: next(answers)))
    assert module.ask_states(TaskRef("d", "r", "trial", -1)) == ("failed", "failed")
    # A task marked failed in a run that goes on: asked twice, still running, said so.
    monkeypatch.setattr(runner.RuntimeTaskInstance, "get_dagrun_state", staticmethod(lambda **kw: "running"))
    assert module.ask_states(TaskRef("d", "r", "trial", -1)) == ("failed", "running")


RUN_FAILED = "stopped from Airflow: its task was marked failed; DAG run r1 is failed"
TASK_FAILED = "stopped from Airflow: its task was marked failed"


@pytest.mark.parametrize(
    ("on_kill", "requested", "expected"),
    [
        # the listener saw the run marked failed, on_kill read the run a moment too early
        (AirflowStop(TASK_FAILED), RUN_FAILED, AirflowStop(RUN_FAILED, whole_run=True)),
        (AirflowStop(RUN_FAILED, whole_run=True), RUN_FAILED, AirflowStop(RUN_FAILED, whole_run=True)),
        (AirflowStop(TASK_FAILED), TASK_FAILED, AirflowStop(TASK_FAILED)),
        # on_kill alone saw the whole run failed: it says more and stays
        (AirflowStop(RUN_FAILED, whole_run=True), TASK_FAILED, AirflowStop(RUN_FAILED, whole_run=True)),
        # no click recorded, or a request that is not Airflow's (a kill from the pages)
        (AirflowStop(TASK_FAILED), None, AirflowStop(TASK_FAILED)),
        (AirflowStop(TASK_FAILED), "killed by editor", AirflowStop(TASK_FAILED)),
        # another run's failure is not this run's
        (
            AirflowStop(TASK_FAILED),
            TASK_FAILED + "; DAG run r2 is failed",
            AirflowStop(TASK_FAILED + "; DAG run r2 is failed"),
        ),
    ],
)
def test_one_click_is_recorded_in_the_words_the_api_server_wrote_as_it_took_it(on_kill, requested, expected):
    assert as_recorded(on_kill, requested, "r1") == expected


def test_on_kill_closes_the_trial_with_the_clicks_recorded_words(local_trials):
    """A real local trial with the listener's request beside it (as the api-server writes it
    while it takes the PATCH): on_kill, which asked Airflow too early to see the run failed,
    closes the trial with the request's words, and whichever of the two closes it, the
    message is one (seen under load in the full suite: two messages for one click)."""
    import asyncio
    import time

    from trialflow import steering
    from trialflow.lifecycle.submission import Submission
    from trialflow.platforms.local import process_alive
    from trialflow.steering.base import Request
    from trialflow.trial.status import TrialStatus

    submit, store = local_trials
    trigger = submit(0, "hang")
    submission = Submission.from_dict(trigger.submission.to_dict())
    pid = int(submission.handle["pid"])
    store.set_attrs(
        submission.storage_id, **{steering.STOP_REQUEST: Request("Airflow", RUN_FAILED, time.time()).to_dict()}
    )
    assert asyncio.run(stop_from_airflow(submission, AirflowStop(TASK_FAILED), "r1"))
    record = store.trial(submission.storage_id)
    assert (record.status, record.message) == (TrialStatus.USER_CANCELED, RUN_FAILED)
    deadline = time.monotonic() + 15
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(pid)
