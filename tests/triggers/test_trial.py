"""TrialTrigger run directly (no scheduler) against real local trials and a real store.

A trial that succeeded or was stopped on purpose ends its task from the trigger (the
task-ending events, the result XCom with them); failures and errors resume the worker.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from airflow.triggers.base import BaseTaskEndEvent, TaskSkippedEvent, TaskSuccessEvent, TriggerEvent

from trialflow.lifecycle.submission import Submission
from trialflow.lifecycle.task_states import marked_reason
from trialflow.platforms.base import TrialStatus
from trialflow.platforms.local import process_alive
from trialflow.steering.base import Request
from trialflow.steering.stops import STOP_REQUEST
from trialflow.triggers.trial import TrialTrigger


async def only_event(trigger: TrialTrigger) -> TriggerEvent:
    events = [event async for event in trigger.run()]
    assert len(events) == 1, events
    return events[0]


async def first_event(trigger: TrialTrigger) -> dict:
    """The trial's outcome however it came: the ending event's XCom or the worker's event."""
    event = await only_event(trigger)
    if isinstance(event, BaseTaskEndEvent):
        assert event.xcoms is not None
        return dict(event.xcoms["return_value"], ending=type(event).__name__)
    return event.payload


def test_serialize_round_trip(local_trials):
    submit, _ = local_trials
    trigger = submit(0, "ok")
    path, kwargs = trigger.serialize()
    assert path == "trialflow.triggers.trial.TrialTrigger"
    again = TrialTrigger(**json.loads(json.dumps(kwargs)))
    assert again.serialize() == (path, kwargs)


def test_a_trigger_made_by_a_start_follows_with_its_experiment_without_reading_the_config(local_trials):
    """A triggered start hands its trigger the experiment it read (TrialTrigger.experiment, never
    serialized): the follow does not parse the config again; one made from its kwargs does."""
    submit, _ = local_trials
    handed, remade = submit(2, "ok"), submit(3, "ok")
    handed.experiment = handed.submission.experiment()
    Path(handed.submission.config_path).unlink()  # whoever reads it now fails
    assert "experiment" not in handed.serialize()[1]
    assert asyncio.run(first_event(handed))["status"] == "SUCCEEDED"
    event = asyncio.run(only_event(remade))
    assert event.payload["status"] == "ERROR" and "cannot follow trial" in event.payload["message"]


def test_trigger_follows_to_the_end_and_records_metrics(local_trials):
    submit, store = local_trials
    trigger = submit(1, "ok")
    event = asyncio.run(only_event(trigger))
    # The task ends here, with the result the worker would have returned, already in the store.
    assert isinstance(event, TaskSuccessEvent) and event.xcoms is not None
    result = event.xcoms["return_value"]
    frozen = store.storage.get_trial(trigger.submission.storage_id)
    assert frozen.intermediate_values == {0: 0.0, 1: 0.25, 2: 0.5, 3: 0.75}
    assert frozen.user_attrs["final_metric"] == frozen.user_attrs["parameters"]["x"]
    assert result["status"] == "SUCCEEDED" and result["final_metric"] == frozen.user_attrs["final_metric"]
    assert result["intermediate_count"] == 4 and result["trial_index"] == 1
    assert store.trial(trigger.submission.storage_id).status == TrialStatus.SUCCEEDED
    assert trigger.cursor["metrics_offset"] > 0
    json.dumps(event.xcoms)  # what the triggerer stores as the task's XCom


def test_a_failed_trial_goes_back_to_the_worker(local_trials):
    """A task-ending failure would be retried; the worker fails a failed trial without retries."""
    submit, store = local_trials
    trigger = submit(7, "fail")
    event = asyncio.run(only_event(trigger))
    assert not isinstance(event, BaseTaskEndEvent)
    assert event.payload["status"] == "FAILED" and event.payload["exit_code"] == 3
    assert store.trial(trigger.submission.storage_id).status == TrialStatus.FAILED  # recorded already


def test_without_end_task_every_outcome_resumes_the_worker(local_trials):
    submit, store = local_trials
    trigger = submit(8, "ok")
    trigger.end_task = False
    event = asyncio.run(only_event(trigger))
    assert not isinstance(event, BaseTaskEndEvent) and event.payload["status"] == "SUCCEEDED"
    assert store.trial(trigger.submission.storage_id).status != TrialStatus.SUCCEEDED  # the worker records it


def test_a_restarted_trigger_resumes_from_its_cursor(local_trials):
    submit, store = local_trials
    trigger = submit(2, "ok")
    asyncio.run(first_event(trigger))
    path, kwargs = trigger.serialize()
    resumed = TrialTrigger(**kwargs)  # as a new triggerer would build it, with the saved cursor
    event = asyncio.run(first_event(resumed))
    assert event["status"] == "SUCCEEDED"
    assert len(store.storage.get_trial(trigger.submission.storage_id).intermediate_values) == 4


def test_deadline_stops_the_trial_and_its_children(local_trials):
    submit, _ = local_trials
    trigger = submit(3, "hang", deadline=time.time() + 1.0)
    started = time.monotonic()
    event = asyncio.run(first_event(trigger))
    assert event["status"] == "EARLY_STOPPED" and event["message"] == "maxTrialDuration exceeded"
    assert event["ending"] == TaskSkippedEvent.__name__  # stopped on purpose: skipped, as in the worker
    assert time.monotonic() - started < 30
    child = int((Path(trigger.submission.handle["trial_dir"]) / "child.pid").read_text())
    assert not process_alive(child) and not process_alive(trigger.submission.handle["pid"])


@pytest.mark.parametrize(
    ("reason", "ending"),
    [
        (marked_reason("success"), TaskSuccessEvent),
        # the worker fails it without a retry (a trigger's TaskFailedEvent would be retried)
        (marked_reason("failed") + "; DAG run manual__1 is failed", TriggerEvent),
        (marked_reason("skipped"), TaskSkippedEvent),
        ("killed by alice", TaskSkippedEvent),  # the pages' Kill chose no task state
    ],
)
def test_a_task_a_person_marked_as_it_deferred_ends_in_the_state_chosen(local_trials, reason, ending):
    """Issue 64, 8: a mark that lands as the task defers is undone by the deferral (the task is
    deferred again), and the api-server's listener has written the stop request with the
    person's words. The trigger stops the trial (USER_CANCELED, those words) and ends the task
    in the state the person chose (a failed one through the worker); it ended every one skipped
    before."""
    submit, store = local_trials
    trigger = submit(6, "hang")
    store.set_attrs(trigger.submission.storage_id, **{STOP_REQUEST: Request("Airflow", reason, time.time()).to_dict()})
    event = asyncio.run(only_event(trigger))
    assert type(event) is ending
    if ending is TriggerEvent:
        assert event.payload["status"] == "USER_CANCELED" and event.payload["message"] == reason
    else:
        assert event.xcoms is not None and event.xcoms["return_value"]["status"] == "USER_CANCELED"
    record = store.trial(trigger.submission.storage_id)
    assert record.status == TrialStatus.USER_CANCELED and record.message == reason
    assert not process_alive(trigger.submission.handle["pid"])


def test_a_broken_handle_is_an_error_event_not_a_hang(local_trials):
    submit, _ = local_trials
    trigger = submit(4, "ok")
    from dataclasses import replace

    trigger.submission = replace(trigger.submission, config_path="/nonexistent/config.yml")
    event = asyncio.run(first_event(trigger))
    assert event["status"] == "ERROR" and "file not found" in event["message"]


def test_the_experiment_deadline_cancels_a_running_trial(local_trials):
    submit, _ = local_trials
    trigger = submit(5, "hang", experiment_deadline=time.time() + 0.5)
    event = asyncio.run(first_event(trigger))
    assert event["status"] == "SYS_CANCELED" and event["message"] == "maxExperimentDuration reached"
    assert event["ending"] == TaskSkippedEvent.__name__
    assert not process_alive(trigger.submission.handle["pid"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithms", ["tuner: {name: Random}\nassessor: {name: Medianstop, classArgs: {start_step: 3}}"]
)
def test_the_assessor_stops_a_trial_below_the_median_from_the_trigger(local_trials):
    """A good trial finishes; a worse one is stopped by Medianstop as its results arrive."""
    submit, store = local_trials
    # Medianstop compares at a step that completed trials reached: a long good trial leaves a
    # wide window (steps 3..59) for the follower's polls even on a loaded machine.
    good = submit(0, "curve=0.9", steps=60)
    assert asyncio.run(first_event(good))["status"] == "SUCCEEDED"
    store.finish(good.submission.storage_id, TrialStatus.SUCCEEDED, 0.9)
    same = submit(1, "curve=0.9", steps=6)
    assert asyncio.run(first_event(same))["status"] == "SUCCEEDED"  # at the median: not stopped
    bad = submit(2, "curve=0.1", steps=600)  # 30 s if nobody stops it
    event = asyncio.run(first_event(bad))
    assert event["status"] == "EARLY_STOPPED"
    assert event["message"].startswith("stopped early by Medianstop at step ")
    reported = store.storage.get_trial(bad.submission.storage_id).intermediate_values
    assert 3 <= len(reported) < 600
    assert not process_alive(bad.submission.handle["pid"])


def test_a_trigger_serialized_before_submissions_were_one_value_still_loads():
    """Deferred tasks of an older trialflow keep their flat kwargs in Airflow's database."""
    flat = {
        "config_path": "/x/config.yml",
        "experiment_id": "eold0001",
        "workdir": "/w",
        "handle": {"platform": "local", "trial_id": "eold0001-0000"},
        "storage_id": 7,
        "cursor": {"metrics_offset": 12},
        "service_index": 0,
        "store_conn_id": "trialflow_default",
        "deadline": 123.0,
        "poll_interval": 2.0,
        "seen_running": True,
        "experiment_deadline": None,
        "end_task": True,
    }
    trigger = TrialTrigger(**flat)
    _, kwargs = trigger.serialize()
    assert kwargs["submission"]["storage_id"] == 7 and kwargs["submission"]["deadline"] == 123.0
    assert kwargs["cursor"] == {"metrics_offset": 12} and kwargs["poll_interval"] == 2.0 and kwargs["seen_running"]
    assert TrialTrigger(**kwargs).serialize() == trigger.serialize()
    with pytest.raises(ValueError, match="not a trial submission"):
        TrialTrigger(submission={"config_path": "/x"})

    with pytest.raises(ValueError, match="expected SubmitTrialOperator's result, got NoneType"):
        Submission.from_dict(None)  # type: ignore[arg-type]


def test_with_listeners_the_worker_ends_the_task(local_trials, monkeypatch):
    """Airflow's listeners (OpenLineage) never see a task the triggerer ends: with any loaded,
    the worker resumes and ends it, and the DAG bag's refusal of ``end_from_trigger`` does not
    apply to the operator (it keeps the choice under another name)."""
    from trialflow.operators.trial import SubmitTrialOperator
    from trialflow.triggers import trial as trial_module

    submit, store = local_trials
    monkeypatch.setattr(trial_module, "listeners_present", lambda: True)
    trigger = submit(9, "ok")
    event = asyncio.run(only_event(trigger))
    assert not isinstance(event, BaseTaskEndEvent) and event.payload["status"] == "SUCCEEDED"
    operator = SubmitTrialOperator(task_id="t", config_path="c.yml", trial_index=0)
    assert operator.end_in_triggerer is True and getattr(operator, "end_from_trigger", False) is False
