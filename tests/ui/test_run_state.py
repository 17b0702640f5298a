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
