"""Whether a trial whose job ended is started again from its last checkpoint, and if not, why.

A job that ended by a fault (its machine or pod gone, its process killed by a signal nobody
asked for: the platform judges, TrainingPlatform.ended_by_fault) is restarted while the
experiment's ``checkpoints.restarts`` allow; one that exited non-zero on its own is FAILED, as
on NNI, since the same code fails the same way, unless ``restartOnFailure`` says otherwise. A
stop somebody asked for is never FAILED, so never restarted. Pure: tested case by case.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartVerdict:
    restart: bool
    #: What the trial's message says: why it restarts, or why it does not.
    why: str


def restart_verdict(
    *, fault: bool, restarts_done: int, restarts_allowed: int, restart_on_failure: bool, past_deadline: bool
) -> RestartVerdict:
    """The verdict on a FAILED trial's job (see module)."""
    if past_deadline:
        return RestartVerdict(False, "not restarted: the experiment's maxExperimentDuration has passed")
    if not fault and not restart_on_failure:
        return RestartVerdict(False, "not restarted: it exited on its own (checkpoints.restartOnFailure is off)")
    if restarts_allowed == 0:
        return RestartVerdict(False, "not restarted: checkpoints.restarts is 0")
    if restarts_done >= restarts_allowed:
        spent = "its restart is spent" if restarts_allowed == 1 else f"its {restarts_allowed} restarts are spent"
        return RestartVerdict(False, f"not restarted: {spent}")
    cause = "a fault" if fault else "a failure (checkpoints.restartOnFailure)"
    return RestartVerdict(True, f"restart {restarts_done + 1} of {restarts_allowed} after {cause}")
