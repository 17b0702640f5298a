"""The restart verdict, case by case: a fault restarts while restarts are left, a trial's own
exit only with restartOnFailure, nothing past the experiment's deadline, and each "no" says why."""

from __future__ import annotations

import itertools

import pytest

from trialflow.checkpoints.restarts import restart_verdict


@pytest.mark.parametrize(
    ("fault", "done", "allowed", "on_failure", "past", "restart", "why"),
    [
        (True, 0, 3, False, False, True, "restart 1 of 3 after a fault"),
        (True, 2, 3, False, False, True, "restart 3 of 3 after a fault"),
        (True, 3, 3, False, False, False, "not restarted: its 3 restarts are spent"),
        (True, 1, 1, False, False, False, "not restarted: its restart is spent"),
        (True, 0, 0, False, False, False, "not restarted: checkpoints.restarts is 0"),
        (False, 0, 3, False, False, False, "not restarted: it exited on its own (checkpoints.restartOnFailure is off)"),
        (False, 0, 3, True, False, True, "restart 1 of 3 after a failure (checkpoints.restartOnFailure)"),
        (False, 3, 3, True, False, False, "not restarted: its 3 restarts are spent"),
        (True, 0, 3, False, True, False, "not restarted: the experiment's maxExperimentDuration has passed"),
    ],
)
def test_each_case_says_what_it_decided(fault, done, allowed, on_failure, past, restart, why):
    verdict = restart_verdict(
        fault=fault, restarts_done=done, restarts_allowed=allowed, restart_on_failure=on_failure, past_deadline=past
    )
    assert (verdict.restart, verdict.why) == (restart, why)


def test_no_combination_restarts_past_its_allowance_or_deadline():
    for fault, done, allowed, on_failure, past in itertools.product(
        (True, False), range(5), range(4), (True, False), (True, False)
    ):
        verdict = restart_verdict(
            fault=fault, restarts_done=done, restarts_allowed=allowed, restart_on_failure=on_failure, past_deadline=past
        )
        assert verdict.restart == (not past and (fault or on_failure) and done < allowed)
        assert verdict.why.startswith("restart " if verdict.restart else "not restarted: ")
