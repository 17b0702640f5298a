"""Whether an experiment is still going: its DAG run decides, the trial counts only without one."""

from __future__ import annotations

import pytest

from trialflow.ui.access import run_state

KEY = ("dag", "run")


@pytest.mark.parametrize(
    ("runs", "active_trials", "expected"),
    [
        # Between two waves: no trial waiting or running, but the run goes on (the page must refresh).
        ({KEY: "running"}, False, ("running", True)),
        ({KEY: "queued"}, False, ("queued", True)),
        ({KEY: "success"}, False, ("success", False)),
        # A run that ended while the store still says RUNNING (a killed worker): it ended.
        ({KEY: "failed"}, True, ("failed", False)),
        # No run any more (the DAG was deleted, or the CLI ran it): the trials are all there is.
        ({}, True, ("running", True)),
        ({}, False, ("finished", False)),
        ({("dag", "another run"): "running"}, False, ("finished", False)),
    ],
)
def test_the_run_decides_whether_an_experiment_is_live(runs, active_trials, expected):
    row = {"dag_id": "dag", "run_id": "run", "active": active_trials}
    assert run_state(row, runs) == expected


@pytest.mark.parametrize("dag_run", ["running", "queued"])
def test_an_experiment_whose_runs_are_over_is_finished_while_its_dag_run_goes_on(dag_run):
    """Issue 64, 8: after the end step the DAG run waits for an approval; the page said "running"
    and offered steering every action refused (trialflow.steering.check_running)."""
    row = {"dag_id": "dag", "run_id": "run", "active": False, "runs_over": True}
    assert run_state(row, {KEY: dag_run}) == ("finished", False)
    assert run_state({**row, "stopped": {"by": "ann"}}, {KEY: dag_run}) == ("stopped", False)
    assert run_state({**row, "runs_over": False}, {KEY: dag_run}) == (dag_run, True)


def test_the_rows_say_when_every_run_is_over():
    from trialflow.queries.experiments import runs_over

    assert not runs_over([])  # no runs (a tool's experiment): not refused, not over
    assert not runs_over([{"first_index": 0, "count": 4, "ended_at": 5.0}, {"first_index": 4, "count": 4}])
    assert runs_over([{"first_index": 0, "count": 4, "ended_at": 5.0}, {"first_index": 4, "stopped": {"by": "ann"}}])


def test_a_row_without_a_dag_reads_its_trials():
    assert run_state({"dag_id": None, "run_id": None, "active": True}, {("", ""): "success"}) == ("running", True)


@pytest.mark.parametrize(
    ("runs", "active_trials", "expected"),
    [
        ({KEY: "success"}, False, ("stopped", False)),  # issue 36 (2): never "success"
        ({KEY: "failed"}, False, ("stopped", False)),
        ({KEY: "running"}, True, ("running", True)),  # stopping: its trials are still ending
        ({}, False, ("stopped", False)),
    ],
)
def test_an_experiment_a_person_stopped_reads_stopped_once_its_run_is_over(runs, active_trials, expected):
    row = {"dag_id": "dag", "run_id": "run", "active": active_trials, "stopped": {"by": "ann", "at": 1.0}}
    assert run_state(row, runs) == expected
