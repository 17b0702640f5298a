"""A follower killed while it stores a big trial's results: the retry re-attaches and every
result is stored exactly once (a real local trial, a real follower process, SIGKILL).

The trial writes half its results, then waits for the test to say the follower is dead before
it writes the rest: a trial that ended before the follower's first poll was read in one piece
(the whole file at once), and the kill then came after everything was in (seen once under two
workers, 2026-12-02)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from trialflow.config.model import AlgorithmConfig
from trialflow.config.platforms import LocalConfig
from trialflow.config.search_space import parse_search_space
from trialflow.experiment.follow import follow_trial
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.local import LocalPlatform
from trialflow.queries import INTERMEDIATE
from trialflow.store.experiment_store import ExperimentStore
from trialflow.tuning.asker import ask

RESULTS = 60_000
HALF = RESULTS // 2
TRIAL = """\
import os, sys, time
from trialflow import trial
trial.get_next_parameter()
for step in range({results}):
    if step == {half}:
        deadline = time.monotonic() + 180
        while not os.path.exists({killed!r}):  # the test kills the follower while we wait
            if time.monotonic() > deadline:
                sys.exit("the test never said the follower was killed")
            time.sleep(0.05)
    trial.report_intermediate_result(step / 7)
trial.report_final_result(1.0)
"""
SPACE = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
RANDOM = AlgorithmConfig(name="Random")


def _follow(url: str, work: Path, handle: dict, storage_id: int) -> None:
    store = ExperimentStore(url)  # a process of its own, as a task is
    platform = LocalPlatform(LocalConfig(), work)
    asyncio.run(follow_trial(platform, store, handle, storage_id, poll_interval=0.05))  # type: ignore[arg-type]


def _stored(store: ExperimentStore, storage_id: int) -> int:
    with store.engine.connect() as conn:
        query = sa.select(sa.func.count()).select_from(INTERMEDIATE).where(INTERMEDIATE.c.trial_id == storage_id)
        return int(conn.execute(query).scalar() or 0)


@pytest.mark.slow  # real processes for seconds: make test runs it, the inner loops do not
@pytest.mark.timeout(240)
@pytest.mark.both_databases
def test_a_follower_killed_mid_ingest_is_retried_and_stores_every_result_once(store, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    killed = tmp_path / "killed"
    (code / "t.py").write_text(TRIAL.format(results=RESULTS, half=HALF, killed=str(killed)))
    store.open_experiment("ecrash01")
    asked = ask(store, "ecrash01", 0, "ecrash01-0000", RANDOM, SPACE)
    platform = LocalPlatform(LocalConfig(), tmp_path / "work")
    platform.prepare_sync("ecrash01")
    spec = TrialSpec("ecrash01", "ecrash01-0000", 0, 0, asked.parameters, f"{sys.executable} t.py", code)
    handle = platform.submit_sync(spec)
    store.storage.engine.dispose()  # nothing of the parent's pool crosses the fork
    follower = multiprocessing.get_context("fork").Process(
        target=_follow, args=(store.url, tmp_path / "work", dict(handle), asked.storage_id)
    )
    follower.start()
    try:
        deadline = time.monotonic() + 120
        while _stored(store, asked.storage_id) < 5_000:  # it is storing: kill it there
            assert time.monotonic() < deadline and follower.is_alive(), "the follower stored nothing"
            time.sleep(0.01)
        os.kill(follower.pid, signal.SIGKILL)
        follower.join()
        killed_at = _stored(store, asked.storage_id)
        assert killed_at <= HALF, killed_at  # the trial waits at its half: killed before its end
    finally:  # whatever failed above, neither the follower nor the waiting trial outlives the test
        if follower.is_alive():
            follower.kill()
            follower.join()
        killed.touch()  # the trial writes the rest

    # the retry: a new follower re-attaches from the start of the metrics and goes to the end
    retry = ExperimentStore(store.url)
    again = LocalPlatform(LocalConfig(), tmp_path / "work")
    outcome = asyncio.run(follow_trial(again, retry, handle, asked.storage_id, poll_interval=0.05))
    assert outcome.status == TrialStatus.SUCCEEDED
    with retry.engine.connect() as conn:
        rows = conn.execute(
            sa.select(INTERMEDIATE.c.step, INTERMEDIATE.c.intermediate_value)
            .where(INTERMEDIATE.c.trial_id == asked.storage_id)
            .order_by(INTERMEDIATE.c.step)
        ).all()
    assert [step for step, _ in rows] == list(range(RESULTS))  # every result, each once
    assert all(value == step / 7 for step, value in rows)
