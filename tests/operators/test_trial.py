"""SubmitTrialOperator's shell over real local trials in a real store: what a trial's outcome
makes of its task (``complete_from_event``, ``report``), the same for the operator and the
sensor. The task's instance is a recorder of its XCom pushes (what Airflow's would store)."""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from tests.triggers.test_trial import only_event
from trialflow.lifecycle.task_states import marked_reason
from trialflow.operators.trial import SubmitTrialOperator, complete_from_event
from trialflow.platforms.base import TrialStatus
from trialflow.triggers import trial as trial_module


class RecordingTI:
    """The task instance as the operator uses it: XCom pushes, kept to be read back."""

    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


@pytest.fixture
def ended(local_trials, monkeypatch):
    """A real trial run to its end by its trigger, which hands the outcome to the worker (as it
    does where Airflow has listeners): the event the operator's execute_complete receives."""
    submit, store = local_trials
    monkeypatch.setattr(trial_module, "listeners_present", lambda: True)

    def run(index: int, mode: str) -> tuple[dict, int]:
        trigger = submit(index, mode)
        event = asyncio.run(only_event(trigger))
        return event.payload, trigger.submission.storage_id

    return run, store


def _experiment(store):
    """complete_from_event hands the experiment on and reads nothing of it here."""
    return None


def _cancel(submission) -> None:
    submission.experiment().platform().cancel_sync(submission.handle, TrialStatus.USER_CANCELED, "test over")


def test_a_succeeded_trial_is_a_succeeded_task_whose_xcom_is_its_result(ended):
    run, store = ended
    event, storage_id = run(0, "ok")
    context = {"ti": RecordingTI()}
    result = complete_from_event(context, event, _experiment(store), store, storage_id)
    record = store.trial(storage_id)
    assert record.status == TrialStatus.SUCCEEDED and record.finished
    assert result["status"] == "SUCCEEDED" and result["trial_id"] == record.trial_id
    assert result["final_metric"] == record.final and result["intermediate_count"] == 4
    assert context["trial_label"] == f"{record.trial_id} SUCCEEDED"  # the grid's name for the task


def test_a_failed_trial_fails_its_task_without_retry_and_still_pushes_its_result(ended):
    run, store = ended
    event, storage_id = run(1, "fail")
    context = {"ti": RecordingTI()}
    with pytest.raises(AirflowFailException, match="FAILED"):
        complete_from_event(context, event, _experiment(store), store, storage_id)
    assert context["ti"].pushed["return_value"]["status"] == "FAILED"
    assert store.trial(storage_id).status == TrialStatus.FAILED


def test_a_task_its_trigger_ended_and_dag_test_resumed_reports_the_stored_outcome(local_trials, monkeypatch):
    """Issue 64, 7: the trigger ends a succeeded trial's task itself (TaskSuccessEvent, the
    outcome recorded first); Airflow's dag.test() resumes the task all the same with the event's
    state, "success", as its event. Each trial's first try failed on it (a retry re-attached)."""
    submit, store = local_trials
    monkeypatch.setattr(trial_module, "listeners_present", lambda: False)
    trigger = submit(4, "ok")
    ending = asyncio.run(only_event(trigger))
    assert isinstance(ending, trial_module.TaskSuccessEvent) and ending.payload == "success"
    storage_id = trigger.submission.storage_id
    result = complete_from_event({"ti": RecordingTI()}, ending.payload, _experiment(store), store, storage_id)
    assert result["status"] == "SUCCEEDED" and result["trial_id"] == store.trial(storage_id).trial_id
    running = submit(5, "hang")
    try:
        with pytest.raises(AirflowException, match="with the trial not ended"):
            complete_from_event({"ti": RecordingTI()}, "success", None, store, running.submission.storage_id)
    finally:
        _cancel(running.submission)


def test_an_early_stop_skips_its_task(local_trials):
    """Stopped on purpose (an assessor, a person, the experiment's deadline): the task is
    skipped, not failed, and its result is pushed all the same."""
    submit, store = local_trials
    trigger = submit(2, "hang")
    storage_id = trigger.submission.storage_id
    event = {"status": "EARLY_STOPPED", "message": "stopped early by Medianstop at step 3"}
    context = {"ti": RecordingTI()}
    try:
        with pytest.raises(AirflowSkipException, match="EARLY_STOPPED: stopped early by Medianstop"):
            complete_from_event(context, event, _experiment(store), store, storage_id)
    finally:
        _cancel(trigger.submission)
    assert context["ti"].pushed["return_value"]["status"] == "EARLY_STOPPED"
    assert store.trial(storage_id).status == TrialStatus.EARLY_STOPPED


@pytest.mark.parametrize("state", ["success", "failed"])
def test_a_task_a_person_marked_keeps_the_state_chosen_when_its_worker_ends_it(local_trials, state):
    """Issue 64, 8, on the worker's side (a try that resumed, or the worker's own wait): a
    trial stopped by a person's mark that Airflow's deferral undid ends its task as marked,
    with its result pushed; a skipped task would have overridden the person's choice."""
    submit, store = local_trials
    trigger = submit(3, "hang")
    storage_id = trigger.submission.storage_id
    event = {"status": "USER_CANCELED", "message": marked_reason(state)}
    context = {"ti": RecordingTI()}
    try:
        if state == "success":
            result = complete_from_event(context, event, _experiment(store), store, storage_id)
            assert result["status"] == "USER_CANCELED"
        else:
            with pytest.raises(AirflowFailException, match="USER_CANCELED: stopped from Airflow"):
                complete_from_event(context, event, _experiment(store), store, storage_id)
            assert context["ti"].pushed["return_value"]["status"] == "USER_CANCELED"
    finally:
        _cancel(trigger.submission)
    record = store.trial(storage_id)
    assert record.status == TrialStatus.USER_CANCELED and record.message == marked_reason(state)


def test_an_error_event_fails_the_attempt_for_a_retry_and_leaves_the_trial_open(local_trials):
    """The trigger lost the trial (its handle unreadable, the platform unreachable): the trial
    may be fine, so the attempt fails with a plain AirflowException (retried) and the store's
    trial is not closed; the retry re-attaches."""
    submit, store = local_trials
    trigger = submit(3, "hang")
    storage_id = trigger.submission.storage_id
    context = {"ti": RecordingTI()}
    try:
        with pytest.raises(AirflowException) as raised:
            complete_from_event(
                context, {"status": "ERROR", "message": "platform unreachable"}, _experiment(store), store, storage_id
            )
        assert not isinstance(raised.value, (AirflowFailException, AirflowSkipException))
        assert not store.trial(storage_id).finished and context["ti"].pushed == {}
    finally:
        _cancel(trigger.submission)


def test_the_operator_keeps_end_from_trigger_under_another_name():
    """Airflow's DAG bag refuses a task whose ``end_from_trigger`` is true once a listener
    plugin is loaded; the operator keeps the choice as ``end_in_triggerer`` (the trigger checks
    for listeners itself)."""
    operator = SubmitTrialOperator(task_id="t", config_path="c.yml", trial_index=0, end_from_trigger=True)
    assert operator.end_in_triggerer is True and getattr(operator, "end_from_trigger", False) is False
    assert {"parameters", "command", "trial_id"} <= set(operator.template_fields)


@pytest.mark.parametrize(
    "status, raised",
    [("CANNOT_RUN", AirflowFailException), ("NOT_STARTED", AirflowSkipException), ("ERROR", AirflowException)],
)
def test_a_triggered_starts_own_events_end_its_task_with_their_words(status, raised):
    """What TrialStartTrigger sends a worker besides TrialTrigger's events: a trial that can
    never run fails without retry, one not started is skipped, a start's error fails the attempt
    (a retry starts it again); each with the trigger's message, before any store is read."""
    from trialflow.operators.trial import TriggeredTrialOperator

    operator = TriggeredTrialOperator(task_id="trial", config_path="/nowhere/config.yml", trial_index=0)
    with pytest.raises(raised, match="the words of the start") as caught:
        operator.execute_complete({"ti": RecordingTI()}, {"status": status, "message": "the words of the start"})
    assert type(caught.value) is raised
