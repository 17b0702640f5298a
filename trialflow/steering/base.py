"""What every action on a running experiment shares: its refusals, who asked, the history.

Every action is appended to the experiment's history (``actions``), which the pages show; the
Airflow layer also writes Airflow's audit log. No Airflow here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore, TrialRecord

#: The experiment attribute listing every action taken on it, oldest first.
HISTORY = "actions"
#: Entries kept in the history (the oldest go first): a bound on the attribute's size.
HISTORY_LIMIT = 500


class ActionRefused(ValueError):
    """The action cannot be taken as asked (a trial already ended); nothing changed."""


class UnknownTarget(ActionRefused):
    """The action names an experiment, trial or run that does not exist; nothing changed."""


class BadInput(ActionRefused):
    """A value the action was given is not one it takes (a limit, a parameter); nothing changed."""


class NotRunning(ActionRefused):
    """The experiment's runs are all over: actions act on a running experiment only."""


def check_running(store: ExperimentStore, experiment_id: str) -> None:
    """NotRunning unless some run of the experiment is still going (not ended, not stopped).

    The rule trialflow keeps, the same on the pages (409) and on the command line: killing,
    stopping, new limits, added and re-run trials act on a running experiment; once its runs
    are over, nothing is offered (NNI let a person raise maxTrialNumber on a finished
    experiment to go on; here, run more trials as a new experiment, which ``scheduledRuns:
    retune`` starts from the best of this one). An experiment without runs (made by a test or
    a tool) is not refused."""
    from trialflow.experiment.run_windows import RunWindows

    windows = RunWindows(store, experiment_id).all().values()
    if windows and all(w.over for w in windows):
        raise NotRunning(
            f"experiment {experiment_id!r} is not running (its runs are over): nothing changed; "
            "to run more trials, start a new experiment (scheduledRuns: retune begins from this one's best)"
        )


@dataclass(frozen=True)
class Request:
    """Who asked for something, when and why."""

    by: str
    reason: str
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "reason": self.reason, "at": self.at}


def record_action(store: ExperimentStore, experiment_id: str, by: str, action: str, detail: str) -> dict[str, Any]:
    """Append one action to the experiment's history (the newest HISTORY_LIMIT are kept)."""
    entry = {"at": time.time(), "by": by, "action": action, "detail": detail}
    # Atomic: two actions at once both keep their line.
    store.update_experiment_attr(experiment_id, HISTORY, lambda old: [*(old or []), entry][-HISTORY_LIMIT:])
    return entry


def history(store: ExperimentStore, experiment_id: str) -> list[dict[str, Any]]:
    """Every action, oldest first: the recorded ones and the runs stopped with a history line
    in their mark (steering.stops.stop_runs)."""
    from trialflow.experiment.run_windows import windows_in

    attrs = store.experiment_attrs(experiment_id)
    entries = list(attrs.get(HISTORY) or [])
    for window in windows_in(attrs).values():
        stopped = window.stopped
        if isinstance(stopped, dict) and stopped.get("action"):
            entries.append(
                {
                    "at": stopped.get("at"),
                    "by": stopped.get("by"),
                    "action": stopped["action"],
                    "detail": stopped.get("reason"),
                }
            )
    return sorted(entries, key=lambda e: e.get("at") or 0)


def find_trial(store: ExperimentStore, experiment_id: str, trial_index: int) -> TrialRecord:
    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"there is no experiment {experiment_id!r}")
    record = store.find_trial(experiment_id, trial_index)
    if record is None:
        raise UnknownTarget(f"experiment {experiment_id!r} has no trial {trial_index} (it has not started)")
    return record
