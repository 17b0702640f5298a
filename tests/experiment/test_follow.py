"""Following one trial (trialflow.experiment.follow) on a real local process: what the loop itself decides
(the assessor's early stop, a person's stop, a moved deadline, an unreachable platform's grace,
skipped records counted across the worker-to-triggerer hand-off), without Airflow."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from trialflow.config.platforms import LocalConfig
from trialflow.experiment.follow import (
    EXPERIMENT_DEADLINE_REASON,
    SKIPPED_COUNT,
    Control,
    Follower,
    carry_skipped,
    with_skipped,
)
from trialflow.platforms.base import PlatformUnreachable, TrialSpec, TrialStatus, TrialUpdate
from trialflow.platforms.local import LocalPlatform, process_alive
from trialflow.store.experiment_store import ExperimentStore
from trialflow.tuning.asker import ask

#: Reports an intermediate result every 0.1 s for ``steps`` steps, then a final one.
REPORTER = """\
import sys, time
from trialflow import trial
steps = int(sys.argv[1])
for i in range(steps):
    trial.report_intermediate_result(i / 10)
    time.sleep(0.1)
trial.report_final_result(1.0)
"""


def submitted(tmp_path: Path, store: ExperimentStore, steps: int, index: int = 0) -> tuple[LocalPlatform, Any, int]:
    """A real local trial of the store's experiment, submitted: (platform, handle, storage id)."""
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "reporter.py").write_text(REPORTER)
    if not store.experiment_exists("efollow"):
        store.open_experiment("efollow")
    from trialflow.config.model import AlgorithmConfig
    from trialflow.config.search_space import parse_search_space

    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    trial_id = f"efollow-{index:04d}"
    asked = ask(store, "efollow", index, trial_id, AlgorithmConfig(name="Random"), space)
    platform = LocalPlatform(LocalConfig(), tmp_path / "work")
    spec = TrialSpec("efollow", trial_id, index, index, asked.parameters, f"{sys.executable} reporter.py {steps}", code)
    return platform, platform.submit_sync(spec), asked.storage_id


def follow(follower: Follower, poll: float = 0.1, give_up_after: float | None = 60) -> Any:
    return asyncio.run(follower.run(poll, give_up_after))


def test_a_trial_followed_to_its_end_has_every_result_stored(tmp_path, store):
    platform, handle, storage_id = submitted(tmp_path, store, 5)
    outcome = follow(Follower(platform, store, handle, storage_id))
    assert outcome.status == TrialStatus.SUCCEEDED and outcome.seen_running
    record = store.trial(storage_id)
    assert record.intermediate_count == 5 and record.final == 1.0


def test_the_assessors_verdict_stops_the_trial_early_with_its_reason(tmp_path, store):
    platform, handle, storage_id = submitted(tmp_path, store, 600)
    follower = Follower(platform, store, handle, storage_id, stop_check=lambda: "worse than the median at step 2")
    outcome = follow(follower)
    assert outcome.status == TrialStatus.EARLY_STOPPED
    assert "worse than the median" in (outcome.message or "")
    assert not process_alive(handle["pid"])


def test_a_persons_stop_and_a_moved_deadline_are_read_from_the_control_check(tmp_path, store):
    platform, handle, storage_id = submitted(tmp_path, store, 600)
    stopped = Follower(platform, store, handle, storage_id, control_check=lambda: Control(stop="killed by ann"))
    outcome = follow(stopped)
    assert (outcome.status, outcome.message) == (TrialStatus.USER_CANCELED, "killed by ann")

    platform, handle, storage_id = submitted(tmp_path, store, 600, index=1)
    moved = Follower(
        platform, store, handle, storage_id, control_check=lambda: Control(deadline_changed=True, deadline=1.0)
    )
    outcome = follow(moved)  # a deadline moved into the past: the experiment is over for this trial
    assert (outcome.status, outcome.message) == (TrialStatus.SYS_CANCELED, EXPERIMENT_DEADLINE_REASON)


class Unreachable(LocalPlatform):
    """The real local platform, whose first ``outage`` polls find it unreachable (a machine or
    API server down for a while)."""

    outage = 3

    async def poll(self, handle: Any, cursor: Any) -> TrialUpdate:
        if self.outage:
            self.outage -= 1
            raise PlatformUnreachable("connection refused")
        return await super().poll(handle, cursor)


def test_an_unreachable_platform_is_asked_again_within_the_grace_and_past_it_the_error_is_raised(tmp_path, store):
    platform, handle, storage_id = submitted(tmp_path, store, 3)
    flaky = Unreachable(LocalConfig(), tmp_path / "work")
    outcome = follow(Follower(flaky, store, handle, storage_id))
    assert outcome.status == TrialStatus.SUCCEEDED and flaky.outage == 0

    down = Unreachable(LocalConfig(), tmp_path / "work")
    down.outage = 10**6
    follower = Follower(down, store, handle, storage_id)
    follower.unreachable_grace = 0.5
    with pytest.raises(PlatformUnreachable):
        follow(follower)


def test_skipped_records_are_counted_across_the_hand_off_and_said_once_in_the_message():
    first = TrialUpdate(TrialStatus.RUNNING, [], {"offset": 10}, skipped=["a frame that is not JSON"])
    in_worker = carry_skipped({}, first, "t")
    assert in_worker[SKIPPED_COUNT] == 1 and in_worker["offset"] == 10
    # The trigger goes on from the worker's cursor: the count travels with it.
    second = TrialUpdate(TrialStatus.SUCCEEDED, [], {"offset": 20}, skipped=["an over-long line"])
    in_trigger = carry_skipped(in_worker, second, "t", uncounted=["intermediate result 3 (NaN)"])
    assert in_trigger[SKIPPED_COUNT] == 3
    assert with_skipped("exited 0", in_trigger) == (
        "exited 0; 3 metric records skipped (first: a frame that is not JSON)"
    )
    assert with_skipped(None, {}) is None
