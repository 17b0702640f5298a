"""A stop's second half, written down: the trial is closed in the store, its job not yet stopped.

A stop closes the trial in the store first (its follower then finds the outcome recorded, and
the tuner stops counting it), then asks its platform to stop the job. Whatever runs the stop can
die or be interrupted between the two: measured, a Kubeflow trial marked failed 0.1 s after its
hand-off to the triggerer was closed USER_CANCELED and its PyTorchJob ran on (nothing follows a
closed trial, so nothing would ever stop it). So the stop notes itself in the store before the
close and clears the note once its platform took the stop; a note left behind is a stop half
done, and the run's reconciler (trialflow.runs.reconcile.finish_job_stops) does the other half
after JOB_STOP_GRACE. The platforms' stops are idempotent (a job already stopped is left alone),
so a stop done twice costs a call, never a second outcome. No Airflow.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trialflow.trial.status import CANCEL_STATUSES, TrialStatus

if TYPE_CHECKING:
    from trialflow.platforms.base import TrainingPlatform, TrialHandle
    from trialflow.store.experiment_store import ExperimentStore

#: Seconds a noted stop is left to whoever runs it before the reconciler takes it over: a stop
#: may wait out its trial's grace (5 s for a process that traps SIGTERM) and a loaded platform.
JOB_STOP_GRACE = 15.0
#: Longest reason kept in a note (the trial's own message keeps the whole reason).
REASON_LIMIT = 2000


@dataclass(frozen=True)
class JobStop:
    """One noted stop: the cancel status and reason its platform is given, and when (epoch s)."""

    status: TrialStatus
    reason: str
    at: float

    def to_value(self) -> dict[str, Any]:
        return {"status": self.status.value, "reason": self.reason[:REASON_LIMIT], "at": self.at}

    @classmethod
    def parse(cls, value: object) -> JobStop | None:
        """A note as stored, or None when it is not one (another writer's value, a status that
        is no cancel, a time that is not a finite number): such a note is never acted on."""
        if not isinstance(value, Mapping):
            return None
        status, reason, at = value.get("status"), value.get("reason"), value.get("at")
        if not isinstance(status, str) or status not in {s.value for s in CANCEL_STATUSES}:
            return None
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
            return None
        return cls(TrialStatus(status), str(reason or "stopped")[:REASON_LIMIT], float(at))

    def due(self, now: float, grace: float = JOB_STOP_GRACE) -> bool:
        """Left ``grace`` seconds to whoever noted it. A note dated more than the grace ahead
        (another host's clock) is due as well: its time says nothing, and waiting for it could
        leave a job running for as long as that clock is ahead (a second stop costs a call)."""
        return abs(now - self.at) >= grace


def due_stops(notes: Mapping[int, object], now: float, grace: float = JOB_STOP_GRACE) -> dict[int, JobStop]:
    """The notes (storage id -> as stored) that are stops left ``grace`` seconds or more."""
    found = {}
    for storage_id, value in notes.items():
        stop = JobStop.parse(value)
        if stop is not None and stop.due(now, grace):
            found[storage_id] = stop
    return found


async def stop_noted(
    platform: TrainingPlatform[Any],
    store: ExperimentStore,
    handle: TrialHandle,
    storage_id: int,
    stop: JobStop,
) -> None:
    """Stop the job on its platform and clear the note; the note stays if the platform refused
    (the error is raised) or this is interrupted, for the reconciler to finish."""
    await platform.cancel(handle, stop.status, stop.reason)
    await asyncio.to_thread(store.clear_job_stop, storage_id)


async def note(store: ExperimentStore, storage_id: int, status: TrialStatus, reason: str) -> JobStop:
    """Write the stop down before the trial is closed; returns it for :func:`stop_noted`."""
    stop = JobStop(status, reason, time.time())
    await asyncio.to_thread(store.note_job_stop, storage_id, stop.to_value())
    return stop
