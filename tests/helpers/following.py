"""Following a trial in platform tests the way the operator and the trigger do (follow_trial),
with a store that only records what it is given."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from trialflow.experiment.follow import follow_trial
from trialflow.platforms.base import TrialStatus
from trialflow.platforms.event_loop import run_sync
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


async def poll_until_done(
    platform: Any, handle: dict, timeout: float = 60, interval: float = 0.1
) -> tuple[Any, list, Any]:
    """Poll as a follower does, without a store: (final status, every metric, the last update)."""
    cursor: dict = {}
    metrics: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        update = await platform.poll(handle, cursor)
        metrics += update.metrics
        cursor = update.cursor
        if update.status.is_terminal:
            return update.status, metrics, update
        await asyncio.sleep(interval)
    raise AssertionError(f"trial {handle.get('trial_id')} did not finish in {timeout} s")
