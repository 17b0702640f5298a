"""Following a trial in platform tests the way the operator and the trigger do (follow_trial),
with a store that only records what it is given."""

from __future__ import annotations

import asyncio
from typing import Any

from trialflow.follow import follow_trial
from trialflow.platforms.background import run_sync
from trialflow.platforms.base import TrialStatus
from trialflow.trial.protocol import Metric


class Recorder:
    """What follow_trial needs from a store: collects what it is given."""

    def __init__(self) -> None:
        self.metrics: list[Metric] = []
        self.statuses: list[TrialStatus] = []

    def record_metrics(self, storage_id: int, metrics: list[Metric]) -> None:
        self.metrics.extend(metrics)

    def set_status(self, storage_id: int, status: TrialStatus) -> None:
        self.statuses.append(status)


def follow(platform: Any, handle: dict, deadline: float | None = None, timeout: float = 90) -> tuple[Any, Recorder]:
    """Follow to the end (or ``deadline``, maxTrialDuration's wall-clock end): (outcome, recorder)."""
    recorder = Recorder()

    async def run() -> Any:
        return await asyncio.wait_for(
            follow_trial(platform, recorder, handle, 1, {}, deadline=deadline, poll_interval=0.2), timeout
        )

    return run_sync(run()), recorder
