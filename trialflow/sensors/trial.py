"""TrialSensor: wait for a trial submitted with ``wait_for_completion=False``.

The usual Airflow pairing (SubmitXOperator + XSensor)::

    submit = SubmitTrialOperator(task_id="submit", config_path=..., trial_index=0,
                                 wait_for_completion=False)
    wait = TrialSensor(task_id="wait", submission=submit.output)

Each poke is one step of the same follower the operator and the trigger use
(status, new metrics, maxTrialDuration, maxExperimentDuration, the assessor);
``deferrable=True`` hands the wait to TrialTrigger like the operator does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from trialflow.from_airflow.why_stopped import TaskRef
from trialflow.hooks import airflow_connections
from trialflow.hooks.experiment_store import ExperimentStoreHook
from trialflow.lifecycle.submission import Submission
from trialflow.operators.trial import complete_from_event, stop_from_worker
from trialflow.platforms.event_loop import run_sync
from trialflow.triggers.trial import TrialTrigger


class TrialSensor(BaseSensorOperator):
    """Wait for a submitted trial to end; its outcome becomes this task's.

    :param submission: what SubmitTrialOperator returned with ``wait_for_completion=False``
        (usually ``submit.output``).
    :param deferrable: wait in the triggerer (TrialTrigger) instead of poking.
    :param trigger_poll_interval: seconds between the trigger's polls when deferrable.
    """

    template_fields: Sequence[str] = ("submission",)

    def __init__(self, *, submission: Any, deferrable: bool = False, trigger_poll_interval: float = 1.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.submission = submission
        self.deferrable = deferrable
        self.trigger_poll_interval = trigger_poll_interval

    def _submission(self) -> Submission:
        return Submission.from_dict(self.submission)

    def execute(self, context: Context) -> Any:
        if self.deferrable:
            self.defer(
                trigger=TrialTrigger(submission=self._submission().to_dict(), poll_interval=self.trigger_poll_interval),
                method_name="execute_complete",
            )
        return super().execute(context)

    def on_kill(self) -> None:
        """A person stopped this task while it poked: cancel the trial (see SubmitTrialOperator.on_kill).
        A deferred sensor's trial is cancelled by the trigger's on_kill; one between two pokes
        in reschedule mode has no process to signal, so nothing reaches it until the next poke."""
        ref = getattr(self, "_ref", None)
        if ref is not None:
            stop_from_worker(self._submission(), ref)

    def poke(self, context: Context) -> PokeReturnValue | bool:
        self._ref = TaskRef.of(context["ti"])
        sub = self._submission()
        experiment = sub.experiment()
        store = ExperimentStoreHook(sub.store_conn_id).get_conn()
        # Poke mode keeps no cursor between pokes: re-reading from 0 is safe (the store keys
        # intermediate values by sequence) and bounded by the trial's own output.
        follower = sub.follower(store, airflow_connections(), experiment=experiment)
        if not run_sync(follower.step(judge_always=True)):
            return False
        outcome = follower.outcome
        assert outcome.status is not None
        result = complete_from_event(
            context, {"status": outcome.status.value, "message": outcome.message}, experiment, store, sub.storage_id
        )
        return PokeReturnValue(is_done=True, xcom_value=result)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        sub = self._submission()
        store = ExperimentStoreHook(sub.store_conn_id).get_conn()
        return complete_from_event(context, event, sub.experiment(), store, sub.storage_id)
