from __future__ import annotations

import pytest

from trialflow.task_ids import task_id, trial_task_group


def test_task_ids_at_the_top_and_in_a_group():
    assert task_id("trial") == "trial"
    assert task_id("trial", "tune") == "tune.trial"
    assert task_id("end_experiment", "outer.inner") == "outer.inner.end_experiment"


@pytest.mark.parametrize(
    "full, expected",
    [
        ("trial", (True, None)),
        ("tune.trial", (True, "tune")),
        ("outer.inner.trial", (True, "outer.inner")),
        (".trial", (False, None)),
        ("trials", (False, None)),
        ("tune.trial_x", (False, None)),
        ("tune.start_experiment", (False, None)),
        ("", (False, None)),
    ],
)
def test_which_tasks_are_trial_tasks(full, expected):
    assert trial_task_group(full) == expected
