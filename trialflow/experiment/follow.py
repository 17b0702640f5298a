"""Following one running trial: poll, store new metrics, enforce maxTrialDuration.

One loop serves both places that wait for a trial: the operator's short
in-process wait (a trial that ends within ``defer_after`` seconds never pays
for a deferral round trip) and TrialTrigger in the triggerer (everything
longer). No Airflow imports.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trialflow.blocking import in_thread
from trialflow.experiment.run_windows import EXPERIMENT_DEADLINE_REASON
from trialflow.platforms.base import (
    Cursor,
    PlatformUnreachable,
    TrainingPlatform,
    TrialHandle,
    TrialStatus,
    TrialUpdate,
)

if TYPE_CHECKING:
    from trialflow.experiment.keeping import TrialKeeping
    from trialflow.store.experiment_store import ExperimentStore

log = logging.getLogger(__name__)
TIMEOUT_REASON = "maxTrialDuration exceeded"
#: Returns why the trial should stop now (the assessor's verdict), or None to let it run.
StopCheck = Callable[[], "str | None"]


@dataclass(frozen=True)
class Control:
    """What a person changed, read from the store at most every CONTROL_INTERVAL
    (trialflow.steering): a stop they asked for, a new maxExperimentDuration deadline."""

    stop: str | None = None
    deadline_changed: bool = False
    deadline: float | None = None


ControlCheck = Callable[[], Control]
FIRST_POLL_INTERVAL = 0.05
#: Seconds in a row a platform may be unreachable while a trial is followed (see Follower.run).
UNREACHABLE_GRACE = 600.0
#: Longest pause between two tries while it is.
UNREACHABLE_RETRY = 5.0
#: Seconds between two readings of the store for a person's stop request (trialflow.steering).
CONTROL_INTERVAL = 1.0


@dataclass
class FollowOutcome:
    """Where following stopped: a terminal ``status``, or None if it gave up waiting first."""

    status: TrialStatus | None
    cursor: Cursor = field(default_factory=dict)
    message: str | None = None
    exit_code: int | None = None
    seen_running: bool = False

    def to_event(self) -> dict[str, Any]:
        return {
            "status": self.status.value if self.status else None,
            "message": self.message,
            "exit_code": self.exit_code,
            "cursor": self.cursor,
        }


#: Cursor keys of the follow loop itself (platforms keep their own keys beside them).
SKIPPED_COUNT = "skipped_metrics"
SKIPPED_FIRST = "skipped_first"


def carry_skipped(before: Cursor, update: TrialUpdate, trial_id: Any, uncounted: list[str] | None = None) -> Cursor:
    """The platform's new cursor, still counting the records skipped so far: malformed ones the
    platform could not read and ``uncounted`` ones the store would not count (the count travels
    with the cursor from the worker to the triggerer). Each skip is warned once."""
    cursor = dict(update.cursor)
    count = int(before.get(SKIPPED_COUNT, 0))
    first = before.get(SKIPPED_FIRST)
    for reason in [*update.skipped, *(uncounted or [])]:
        log.warning("Trial %s: skipped %s", trial_id, reason)
        count += 1
        first = first or reason[:300]
    if count:
        cursor[SKIPPED_COUNT], cursor[SKIPPED_FIRST] = count, first
    return cursor


def fresh_cursor(cursor: Cursor) -> Cursor:
    """The cursor for a restarted trial whose output starts afresh: read from its start, still
    counting what was skipped before."""
    return {k: v for k, v in cursor.items() if k in (SKIPPED_COUNT, SKIPPED_FIRST)}


def with_skipped(message: str | None, cursor: Cursor) -> str | None:
    """The trial's status message, saying how many metric records could not be read."""
    count = int(cursor.get(SKIPPED_COUNT, 0))
    if not count:
        return message
    note = f"{count} metric record{'s' if count > 1 else ''} skipped (first: {cursor.get(SKIPPED_FIRST)})"
    return f"{message}; {note}" if message else note


class Follower:
    """Following one trial: each :meth:`step` polls once, stores what is new, and applies the
    deadlines and the assessor; :meth:`run` steps until the trial ends. The sensor's poke is one
    step; the operator's short wait and the trigger are runs."""

    def __init__(
        self,
        platform: TrainingPlatform[Any],
        store: ExperimentStore,
        handle: TrialHandle,
        storage_id: int,
        cursor: Cursor | None = None,
        *,
        deadline: float | None = None,
        experiment_deadline: float | None = None,
        stop_check: StopCheck | None = None,
        control_check: ControlCheck | None = None,
        seen_running: bool = False,
        keeping: TrialKeeping | None = None,
    ):
        self.platform, self.store, self.handle, self.storage_id = platform, store, handle, storage_id
        self.keeping = keeping
        self.deadline, self.experiment_deadline, self.stop_check = deadline, experiment_deadline, stop_check
        self.control_check = control_check
        self._controlled_at = -CONTROL_INTERVAL
        self.outcome = FollowOutcome(None, dict(cursor or {}), seen_running=seen_running)
        self.cancelling = False
        self._just_cancelled = False
        self.unreachable_grace = UNREACHABLE_GRACE

    async def _cancel(self, status: TrialStatus, reason: str) -> None:
        self.cancelling = self._just_cancelled = True
        log.info("Stopping trial %s: %s", self.handle.get("trial_id"), reason)
        await self.platform.cancel(self.handle, status, reason)

    async def step(self, judge_always: bool = False) -> bool:
        """One poll; True once the trial has ended (``self.outcome`` says how).

        ``deadline`` (epoch seconds) is maxTrialDuration: past it the trial is cancelled once
        as EARLY_STOPPED, and following continues until the platform reports the cancelled
        state. ``control_check`` reads what a person changed, at most every CONTROL_INTERVAL
        seconds: a kill or stop cancels it as USER_CANCELED with its reason, a changed
        maxExperimentDuration replaces ``experiment_deadline``.
        ``experiment_deadline`` is maxExperimentDuration: past it the trial is cancelled
        as SYS_CANCELED. The assessor (``stop_check``) is asked when new intermediate results
        were stored (every step with ``judge_always``); a reason from it cancels the trial as
        EARLY_STOPPED.

        With ``keeping`` (the experiment keeps checkpoints), each checkpoint the trial saved is
        copied to the store as its record is read, and a FAILED job is started again from the
        last one where trialflow.checkpoints.restarts says so: following goes on with the new
        job's handle.
        """
        outcome = self.outcome
        update = await self.platform.poll(self.handle, outcome.cursor)
        uncounted: list[str] = []
        if update.metrics:
            uncounted = await in_thread(self.store.record_metrics, self.storage_id, update.metrics)
        for step in (m.sequence for m in update.metrics if m.is_checkpoint):
            if self.keeping is None:
                uncounted.append(f"a checkpoint record (step {step}) was ignored: this experiment keeps none")
            else:
                await self.keeping.keep(self.handle, step)
        outcome.cursor = carry_skipped(outcome.cursor, update, self.handle.get("trial_id"), uncounted)
        if update.status.is_terminal:
            if update.status == TrialStatus.FAILED and self.keeping is not None and not self.cancelling:
                restarted = await self.keeping.restart(self.handle, update, self.experiment_deadline)
                if restarted is not None:
                    self.handle, outcome.seen_running = restarted, False
                    if not self.platform.restart_keeps_output:
                        outcome.cursor = fresh_cursor(outcome.cursor)
                    return False
            if self.keeping is not None:
                await self.keeping.keep_pending(self.handle)
                await self.keeping.keep_saved(self.handle)
                await self.keeping.keep_artifacts(self.handle)
            outcome.status, outcome.exit_code = update.status, update.exit_code
            notes = self.keeping.notes if self.keeping is not None else []
            message = "; ".join(m for m in (update.message, *notes) if m) or None
            outcome.message = with_skipped(message, outcome.cursor)
            return True
        if update.status == TrialStatus.RUNNING and not outcome.seen_running:
            outcome.seen_running = True
            await in_thread(self.store.set_status, self.storage_id, TrialStatus.RUNNING)
        if self.cancelling:
            return False
        if self.control_check is not None and time.monotonic() - self._controlled_at >= CONTROL_INTERVAL:
            self._controlled_at = time.monotonic()
            control = await in_thread(self.control_check)
            if control.deadline_changed:
                self.experiment_deadline = control.deadline
            if control.stop:
                await self._cancel(TrialStatus.USER_CANCELED, control.stop)
                return False
        now = time.time()
        if self.experiment_deadline is not None and now > self.experiment_deadline:
            await self._cancel(TrialStatus.SYS_CANCELED, EXPERIMENT_DEADLINE_REASON)
        elif self.deadline is not None and now > self.deadline:
            await self._cancel(TrialStatus.EARLY_STOPPED, TIMEOUT_REASON)
        elif self.stop_check is not None and (judge_always or any(m.type == "PERIODICAL" for m in update.metrics)):
            reason = await in_thread(self.stop_check)
            if reason:
                await self._cancel(TrialStatus.EARLY_STOPPED, reason)
        return False

    async def run(self, poll_interval: float = 1.0, give_up_after: float | None = None) -> FollowOutcome:
        """Step until the trial ends, or ``give_up_after`` seconds pass (then ``outcome.status``
        is None). Polls start fast and back off to ``poll_interval``: a trial that ends in a
        second is seen at once, one that runs for hours costs a poll per ``poll_interval``.

        A platform that cannot be reached (PlatformUnreachable: its machine or server is down,
        the network cut) is asked again, every UNREACHABLE_RETRY seconds at most, for up to
        ``UNREACHABLE_GRACE`` seconds in a row before the error is raised: the trial itself
        may be fine, and failing the task at once spent one of its retries per outage (an SSH
        server stopped for 30 s cost 8 of 12 trial tasks a retry, measured)."""
        stop_at = time.monotonic() + give_up_after if give_up_after is not None else None
        interval = min(poll_interval, FIRST_POLL_INTERVAL)
        unreachable_since: float | None = None
        while True:
            try:
                ended = await self.step()
            except PlatformUnreachable as exc:
                now = time.monotonic()
                if unreachable_since is None:
                    unreachable_since = now
                    log.warning(
                        "Trial %s: %s; asking again for up to %.0f s",
                        self.handle.get("trial_id"),
                        exc,
                        self.unreachable_grace,
                    )
                if now - unreachable_since >= self.unreachable_grace:
                    raise
                if stop_at is not None and now >= stop_at:
                    break  # the trigger takes over, and asks again itself
                await asyncio.sleep(min(UNREACHABLE_RETRY, max(interval, 0.5)))
                interval = min(interval * 1.5, poll_interval)
                continue
            if unreachable_since is not None:
                log.info("Trial %s: its platform answers again", self.handle.get("trial_id"))
                unreachable_since = None
            if ended:
                break
            if self._just_cancelled:
                self._just_cancelled = False
                continue  # poll again at once: the stop may already show
            if stop_at is not None and time.monotonic() >= stop_at:
                break
            # A platform told of changes (the Kubernetes watch) returns early from its pause.
            await self.platform.wait_for_change(self.handle, self.outcome.cursor, interval)
            interval = min(interval * 1.5, poll_interval)
        return self.outcome


async def follow_trial(
    *follower_args: Any, poll_interval: float = 1.0, give_up_after: float | None = None, **follower_kwargs: Any
) -> FollowOutcome:
    """A Follower built from these arguments (its own, see Follower), run until the trial ends
    or ``give_up_after`` seconds pass: one call for a script or a test that follows one trial."""
    return await Follower(*follower_args, **follower_kwargs).run(poll_interval, give_up_after)
