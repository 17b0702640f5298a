"""The state a trial's task ends in (trialflow.lifecycle.task_states): every outcome, and a
person's mark read back from the stop reason the api-server's listener and on_kill write."""

from __future__ import annotations

import pytest

from trialflow.from_airflow.why_stopped import SOME_ACTION, reason_for
from trialflow.lifecycle.task_states import marked_reason, person_chose, task_state


@pytest.mark.parametrize("state", ["success", "failed", "skipped"])
def test_a_persons_mark_is_read_back_from_every_writer_of_it(state):
    assert person_chose(marked_reason(state)) == state  # the listener's words
    on_kill = reason_for(state, "running", "manual__1")  # the worker's and the trigger's on_kill
    assert on_kill is not None and person_chose(on_kill.reason) == state
    whole_run = reason_for(state, "failed", "manual__1")  # the DAG run marked failed too
    assert whole_run is not None and whole_run.whole_run and person_chose(whole_run.reason) == state


@pytest.mark.parametrize(
    "message",
    [
        None,
        "",
        "killed by alice",  # the pages' Kill: no state chosen in Airflow
        "stopped from Airflow: its task was cleared",
        SOME_ACTION.reason,  # Airflow could not be asked which mark it was
        "stopped from Airflow: its task was marked successful",
        "stopped from Airflow: its task was marked success and more",
        "its task was marked success",  # not a stop from Airflow
        "stopped from Airflow: its task was set to removed",
        "stopped from Airflow: " + "its task was marked success" * 1000,
    ],
)
def test_anything_else_is_no_persons_choice(message):
    assert person_chose(message) is None


@pytest.mark.parametrize(
    ("succeeded", "on_purpose", "message", "state"),
    [
        (True, False, None, "success"),
        (False, True, "stopped early by Medianstop", "skipped"),
        (False, True, "killed by alice", "skipped"),
        (False, True, "stopped from Airflow: its task was cleared", "skipped"),
        (False, True, marked_reason("success"), "success"),  # a mark the deferral had undone
        (False, True, marked_reason("failed"), "failed"),
        (False, True, marked_reason("failed") + "; DAG run manual__1 is failed", "failed"),
        (False, True, marked_reason("skipped"), "skipped"),
        (False, False, "exit code 3", "failed"),
        # a failure's message is the trial's own words, never read as a person's choice
        (False, False, marked_reason("success"), "failed"),
    ],
)
def test_the_task_state_of_every_outcome(succeeded, on_purpose, message, state):
    assert task_state(succeeded, on_purpose, message) == state
