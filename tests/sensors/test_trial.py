"""TrialSensor over real local trials in a real store: poking follows the trial step by step
(the experiment's deadline included), deferring hands the same submission to TrialTrigger, and
the trigger's event becomes the task's outcome as it does for the operator."""

from __future__ import annotations

import asyncio
import time

import pytest
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred

from tests.operators.test_trial import RecordingTI
from tests.triggers.test_trial import only_event
from trialflow.platforms.base import TrialStatus
from trialflow.sensors.trial import TrialSensor
from trialflow.triggers import trial as trial_module
from trialflow.triggers.trial import TrialTrigger


def test_the_poking_sensor_enforces_the_experiment_deadline_too(local_trials):
    """Each poke is a step of the same follower: past maxExperimentDuration the first poke cancels,
    a later one sees the trial stopped and skips the task (stopped on purpose)."""
    submit, store = local_trials
    trigger = submit(6, "hang", experiment_deadline=time.time() - 1)
    sensor = TrialSensor(task_id="wait", submission=trigger.submission.to_dict())  # the operator's XCom
    pushed: list = []
    context = {"ti": type("TI", (), {"xcom_push": lambda self, key, value: pushed.append(value)})()}
    assert sensor.poke(context) is False  # cancels
    deadline = time.monotonic() + 20
    with pytest.raises(AirflowSkipException, match="SYS_CANCELED: maxExperimentDuration reached"):
        while sensor.poke(context) is False:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert pushed and pushed[0]["status"] == "SYS_CANCELED"
    assert store.trial(trigger.submission.storage_id).status == TrialStatus.SYS_CANCELED


def test_a_deferrable_sensor_hands_its_submission_to_the_trigger_and_takes_its_event(local_trials, monkeypatch):
    submit, store = local_trials
    monkeypatch.setattr(trial_module, "listeners_present", lambda: True)  # the worker ends the task
    trigger = submit(5, "ok")
    sensor = TrialSensor(
        task_id="wait", submission=trigger.submission.to_dict(), deferrable=True, trigger_poll_interval=0.05
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"ti": RecordingTI()})
    handed = deferred.value.trigger
    assert isinstance(handed, TrialTrigger) and deferred.value.method_name == "execute_complete"
    assert handed.submission.to_dict() == trigger.submission.to_dict()
    event = asyncio.run(only_event(handed))
    result = sensor.execute_complete({"ti": RecordingTI()}, event.payload)
    assert result["status"] == "SUCCEEDED" and result["trial_index"] == 5
    assert store.trial(trigger.submission.storage_id).status == TrialStatus.SUCCEEDED
