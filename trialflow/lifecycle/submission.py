"""A submitted trial as it travels between the operator, the sensor and the trigger.

The submit step hands it on (the operator's XCom for a TrialSensor, the trigger's kwargs when it
defers); whoever follows the trial rebuilds the experiment, the platform and the follow loop from
it, in one place. It is plain JSON on the way (``to_dict`` / ``from_dict``) and holds no secret:
the platform is rebuilt from the config file and Airflow's connections where it is followed.
No Airflow here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trialflow.experiment.follow import Follower, fresh_cursor
from trialflow.trial.handle import current_handle

if TYPE_CHECKING:
    from trialflow.experiment import Experiment
    from trialflow.platforms.base import Connections, Cursor, TrainingPlatform, TrialHandle
    from trialflow.store.experiment_store import ExperimentStore


@dataclass(frozen=True)
class Submission:
    """One submitted trial: where its experiment is, what its platform returned, its row in the
    store, and its deadlines (epoch seconds: maxTrialDuration, maxExperimentDuration)."""

    config_path: str
    store_conn_id: str
    experiment_id: str
    workdir: str
    handle: TrialHandle
    storage_id: int
    service_index: int = 0
    deadline: float | None = None
    experiment_deadline: float | None = None
    #: The DAG run it belongs to (its inputs reach a restarted trial as they reached the first).
    run_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Submission:
        """From ``to_dict``'s form; keys it does not know (a newer writer's) are left out, and a
        missing required one is an error naming it."""
        if not isinstance(data, dict):  # a sensor templated on an XCom that is not a submission
            got = type(data).__name__
            raise ValueError(f"not a trial submission: expected SubmitTrialOperator's result, got {got}")
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError as exc:
            raise ValueError(f"not a trial submission: {exc}") from None

    def experiment(self) -> Experiment:
        """The experiment as its config file says now (validated in full at DAG parse and at the
        experiment's start; here only loaded)."""
        from trialflow.config import load_config
        from trialflow.experiment import Experiment

        return Experiment(load_config(self.config_path), self.experiment_id, Path(self.workdir))

    def follower(
        self,
        store: ExperimentStore,
        connections: Connections | None = None,
        cursor: Cursor | None = None,
        *,
        seen_running: bool = False,
        experiment: Experiment | None = None,
        platform: TrainingPlatform[Any] | None = None,
    ) -> Follower:
        """The follow loop for this trial: its platform, the store, its deadlines and the
        experiment's assessor. The one way the worker, the sensor and the trigger build it
        (the worker passes the experiment and platform it submitted with)."""
        from trialflow.experiment.keeping import trial_keeping
        from trialflow.steering import trial_control

        experiment = experiment or self.experiment()
        platform = platform or experiment.platform(self.service_index, connections)
        storage_id = self.storage_id
        trial_id = str(self.handle.get("trial_id", ""))
        handle = self.handle
        if experiment.config.checkpoints is not None:
            # A restart since this submission was made (a follower before this one restarted
            # it): follow the job the store names, from its output's start where it has its own.
            handle = current_handle(self.handle, store.trial(storage_id).handle)
            if handle is not self.handle and not platform.restart_keeps_output:
                cursor = fresh_cursor(cursor or {})
        return Follower(
            platform,
            store,
            handle,
            self.storage_id,
            cursor,
            deadline=self.deadline,
            experiment_deadline=self.experiment_deadline,
            stop_check=experiment.early_stop_check(store, self.storage_id),
            control_check=lambda: trial_control(store, storage_id),
            seen_running=seen_running,
            keeping=trial_keeping(
                experiment, platform, store, storage_id, trial_id, connections or platform.connections, self.run_id
            ),
        )
