"""A stop's note (trialflow.experiment.job_stops): what counts as one, and when it is due."""

from __future__ import annotations

import math

import pytest

from trialflow.experiment.job_stops import JOB_STOP_GRACE, REASON_LIMIT, JobStop, due_stops
from trialflow.trial.status import CANCEL_STATUSES, TrialStatus


@pytest.mark.parametrize("status", sorted(CANCEL_STATUSES, key=lambda s: s.value))
def test_a_note_reads_back_as_written(status):
    stop = JobStop(status, "its task was marked failed", 1000.5)
    assert JobStop.parse(stop.to_value()) == stop


@pytest.mark.parametrize(
    "value",
    [
        None,
        "USER_CANCELED",
        [],
        {"status": "SUCCEEDED", "reason": "r", "at": 1.0},  # no stop ends a job as succeeded
        {"status": "RUNNING", "reason": "r", "at": 1.0},
        {"status": "user_canceled", "reason": "r", "at": 1.0},
        {"status": ["USER_CANCELED"], "reason": "r", "at": 1.0},
        {"status": "USER_CANCELED", "reason": "r"},
        {"status": "USER_CANCELED", "reason": "r", "at": "1.0"},
        {"status": "USER_CANCELED", "reason": "r", "at": True},
        {"status": "USER_CANCELED", "reason": "r", "at": math.nan},
        {"status": "USER_CANCELED", "reason": "r", "at": math.inf},
    ],
)
def test_what_is_not_a_note_is_never_acted_on(value):
    assert JobStop.parse(value) is None
    assert due_stops({1: value}, 1e12) == {}


def test_a_long_reason_is_bounded_and_a_missing_one_says_stopped():
    assert len(JobStop(TrialStatus.USER_CANCELED, "x" * 10**6, 1.0).to_value()["reason"]) == REASON_LIMIT
    assert len(JobStop.parse({"status": "USER_CANCELED", "reason": "y" * 10**6, "at": 1}).reason) == REASON_LIMIT
    assert JobStop.parse({"status": "USER_CANCELED", "at": 1}).reason == "stopped"


def test_a_note_is_due_after_the_grace_and_one_dated_ahead_of_it_at_once():
    notes = {
        1: JobStop(TrialStatus.USER_CANCELED, "a", 1000.0).to_value(),
        2: JobStop(TrialStatus.EARLY_STOPPED, "b", 1000.0 + JOB_STOP_GRACE).to_value(),
        3: JobStop(TrialStatus.SYS_CANCELED, "c", 1000.0 + 3 * JOB_STOP_GRACE).to_value(),  # a clock ahead
        4: JobStop(TrialStatus.USER_CANCELED, "d", 1e15).to_value(),
    }
    assert sorted(due_stops(notes, 1000.0 + JOB_STOP_GRACE - 0.1)) == [3, 4]
    assert sorted(due_stops(notes, 1000.0 + JOB_STOP_GRACE)) == [1, 3, 4]
    assert sorted(due_stops(notes, 1000.0 + 2.5 * JOB_STOP_GRACE)) == [1, 2, 4]  # 3 is within the grace now
    assert sorted(due_stops(notes, 1000.0, grace=0.0)) == [1, 2, 3, 4]
