"""TrialSensor: wait for a trial submitted with ``wait_for_completion=False``.

The usual Airflow pairing (SubmitXOperator + XSensor)::

    submit = SubmitTrialOperator(task_id="submit", config_path=..., trial_index=0,
                                 wait_for_completion=False)
    wait = TrialSensor(task_id="wait", submission=submit.output)

Poke mode reads status and metrics directly; ``deferrable=True`` hands the
wait to TrialTrigger like the operator does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from trialflow.experiment import Experiment, load_runnable_config
from trialflow.follow import EXPERIMENT_DEADLINE_REASON
from trialflow.hooks.store import ExperimentStoreHook
from trialflow.operators.trial import complete_from_event
from trialflow.platforms.background import run_sync
from trialflow.platforms.base import TrialStatus
from trialflow.triggers.trial import TrialTrigger


class TrialSensor(BaseSensorOperator):
    template_fields: Sequence[str] = ("submission",)

    def __init__(self, *, submission: Any, deferrable: bool = False, trigger_poll_interval: float = 1.0,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.submission = submission
        self.deferrable = deferrable
        self.trigger_poll_interval = trigger_poll_interval

    # complete_from_event reads these from the task
    @property
    def config_path(self) -> str:
        return self.submission["config_path"]

    @property
    def store_conn_id(self) -> str:
        return self.submission["store_conn_id"]

    def execute(self, context: Context) -> Any:
        if self.deferrable:
            self.defer(trigger=TrialTrigger(**self.submission, poll_interval=self.trigger_poll_interval),
                       method_name="execute_complete")
        return super().execute(context)

    def poke(self, context: Context) -> PokeReturnValue | bool:
        from trialflow.hooks import register_connectors

        register_connectors()
        sub = self.submission
        experiment = Experiment(load_runnable_config(sub["config_path"]), sub["experiment_id"],
                                Path(sub["workdir"]))
        platform = experiment.platform(sub["service_index"])
        store = ExperimentStoreHook(sub["store_conn_id"]).get_conn()
        # Poke mode keeps no cursor between pokes: re-reading from 0 is safe (the store keys
        # intermediate values by sequence) and bounded by the trial's own output.
        update = run_sync(platform.poll(sub["handle"], {}))
        store.record_metrics(sub["storage_id"], update.metrics)
        if not update.status.is_terminal:
            self._stop_if_due(experiment, platform, store, sub)
            return False
        result = complete_from_event(self, context, {"status": update.status.value, "message": update.message})
        return PokeReturnValue(is_done=True, xcom_value=result)

    @staticmethod
    def _stop_if_due(experiment: Experiment, platform: Any, store: Any, sub: dict[str, Any]) -> None:
        """What the trigger's follow loop does between polls: the experiment's deadline, then
        the assessor. The cancelled state is reported by a later poke."""
        if sub.get("experiment_deadline") and time.time() > sub["experiment_deadline"]:
            platform.cancel(sub["handle"], TrialStatus.SYS_CANCELED, EXPERIMENT_DEADLINE_REASON)
            return
        check = experiment.early_stop_check(store, sub["storage_id"])
        reason = check() if check is not None else None
        if reason:
            platform.cancel(sub["handle"], TrialStatus.EARLY_STOPPED, reason)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        return complete_from_event(self, context, event)
