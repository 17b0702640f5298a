"""DLTS: the pure builders, then the real platform code against the dashboard emulator, whose
jobs really run with the work storage bind-mounted where the jobs expect it."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.emulators.dlts import DltsEmulator, can_run_jobs
from tests.helpers.experiment_setup import code_folder
from tests.helpers.following import follow, poll_until_done
from trialflow.config.platforms import DltsConfig
from trialflow.experiment.follow import TIMEOUT_REASON
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.dlts import STATES, DltsError, DltsPlatform, build_job, credentials, gpu_type_of, job_status

EMAIL = "alice@example.com"
PASSWORD = "dlts-pass-93kq"
TRIAL = """\
import os, sys, time
import trialflow.trial as t
p = t.get_next_parameter()
for i in range(3):
    t.report_intermediate_result(p["x"] + i)
    time.sleep(float(os.environ.get("STEP", "0.05")))
t.report_final_result(p["x"] * 10)
sys.exit(int(p.get("rc", 0)))
"""


def _config(tmp_path: Path, dashboard: str = "http://dlts.example/", **extra) -> DltsConfig:
    (tmp_path / "work").mkdir(exist_ok=True)
    values = {
        "platform": "dlts",
        "dashboard": dashboard,
        "team": "platform",
        "email": EMAIL,
        "password": PASSWORD,
        "localStorageMountPoint": str(tmp_path / "work"),
        "containerStorageMountPoint": str(tmp_path / "job-work"),
        "trialCommand": "python3 t.py",
        **extra,
    }
    return DltsConfig.model_validate(values)


def _spec(code: Path, index: int, command: str = "python3 t.py", **params) -> TrialSpec:
    return TrialSpec("edlts001", f"edlts001-{index:04d}", index, index, {"x": index, **params}, command, code)


@pytest.mark.parametrize("state, expected", sorted(STATES.items()) + [("brand-new", TrialStatus.WAITING)])
def test_status_table(state, expected):
    assert job_status({"jobStatus": state}) is expected
    assert job_status({"jobStatus": state.upper()}) is expected


def test_the_job_body_is_nnis_and_holds_no_password(tmp_path):
    spec = _spec(tmp_path, 1)
    spec.gpu_number = 2
    body = build_job(_config(tmp_path), spec, EMAIL, "platform", "P40", "run it")
    assert body["jobName"] == "trialflow_edlts001_0001" and body["cmd"] == "run it"
    assert (body["team"], body["vcName"], body["userName"]) == ("platform", "platform", EMAIL)
    assert (body["resourcegpu"], body["gpuType"], body["image"]) == (2, "P40", "msranni/nni:latest")
    assert body["jobtrainingtype"] == "RegularJob" and body["preemptionAllowed"] == "False"
    assert PASSWORD not in str(body)
    assert gpu_type_of({"gpu_capacity": {"V100": 4, "P40": 2}}) == "V100"
    with pytest.raises(DltsError, match="gpu_capacity"):
        gpu_type_of({})


def test_credentials_come_from_dlts_job_variables_as_in_nni(tmp_path, monkeypatch):
    monkeypatch.setenv("DLWS_USER_EMAIL", "env@example.com")
    monkeypatch.setenv("DLTS_JOB_TOKEN", "env-token")
    monkeypatch.setenv("DLWS_VC_NAME", "env-team")
    bare = DltsConfig.model_validate({"platform": "dlts", "dashboard": "http://d/", "trialCommand": "x"})
    assert credentials(bare) == ("env@example.com", "env-token", "env-team")
    assert credentials(_config(tmp_path)) == (EMAIL, PASSWORD, "platform")
    for name in ("DLWS_USER_EMAIL", "DLTS_JOB_TOKEN", "DLWS_VC_NAME"):
        monkeypatch.delenv(name)
    problems = dict(DltsPlatform(bare, tmp_path / "exp").preflight(tmp_path / "missing"))
    assert "DLTS_JOB_TOKEN" in problems[("password",)] and "DLWS_VC_NAME" in problems[("team",)]
    assert "does not exist" in problems[("trialCodeDirectory",)]


@pytest.fixture
def dlts(tmp_path):
    (tmp_path / "work").mkdir(exist_ok=True)
    with DltsEmulator(EMAIL, PASSWORD, "platform", (tmp_path / "work", str(tmp_path / "job-work"))) as emulator:
        yield emulator


def test_refused_credentials_name_the_keys_and_never_show_the_password(dlts, tmp_path, caplog):
    wrong = DltsPlatform(_config(tmp_path, dlts.dashboard, password="x" + PASSWORD), tmp_path / "exp")
    caplog.set_level(logging.DEBUG, logger="httpx")  # Airflow's logging config may have quieted it
    caplog.set_level(logging.DEBUG, logger="trialflow")
    with caplog.at_level(logging.DEBUG), pytest.raises(DltsError) as info:
        wrong.prepare_sync("edlts001")
    assert "trainingService.email / password were refused" in str(info.value)
    dlts.faults.append(("GET", "clusters", (503, {"Retry-After": "0"}, {"error": "busy"})))
    with caplog.at_level(logging.DEBUG), pytest.raises(DltsError, match="team 'nope'"):
        DltsPlatform(_config(tmp_path, dlts.dashboard, team="nope"), tmp_path / "exp").prepare_sync("edlts001")
    assert "retrying" in caplog.text and "GET api/teams/nope/clusters/.default" in caplog.text
    # The password travels in every query string: never in a message or a log line.
    assert "HTTP Request: GET http://127.0.0.1" in caplog.text, "httpx logs each request (its URL, not its query)"
    assert PASSWORD not in str(info.value) and PASSWORD not in caplog.text and "password=" not in caplog.text
    DltsPlatform(_config(tmp_path, dlts.dashboard), tmp_path / "exp").prepare_sync("edlts001")


needs_jobs = pytest.mark.skipif(can_run_jobs() is not None, reason=can_run_jobs() or "")


@pytest.fixture
def code(tmp_path):
    return code_folder(tmp_path, {"t.py": TRIAL})


@needs_jobs
def test_trials_run_report_fail_and_reattach(dlts, code, tmp_path, caplog):
    platform = DltsPlatform(_config(tmp_path, dlts.dashboard), tmp_path / "exp")
    platform.prepare_sync("edlts001")
    good = _spec(code, 1, command=f"{sys.executable} t.py")
    bad = _spec(code, 2, command=f"{sys.executable} t.py", rc=4)

    async def both():
        handles = [await platform.submit(good), await platform.submit(bad)]
        return handles, await asyncio.gather(*(poll_until_done(platform, h) for h in handles))

    with caplog.at_level(logging.DEBUG):
        handles, ((s1, m1, i1), (s2, m2, i2)) = asyncio.run(both())
    assert s1 is TrialStatus.SUCCEEDED and [m.value for m in m1] == [1, 2, 3, 10] and i1.exit_code == 0
    assert s2 is TrialStatus.FAILED and i2.exit_code == 4 and [m.value for m in m2] == [2, 3, 4, 20]
    assert handles[0]["web_url"] == f"{dlts.dashboard}job/platform/.default/{handles[0]['job_id']}"
    assert PASSWORD not in str(handles) and PASSWORD not in caplog.text
    assert list((tmp_path / "job-work").iterdir()) == [], "the job's paths exist only in its namespace"
    # A retried task: the job id beside the trial, the same job, no second one.
    assert platform.submit_sync(good) == handles[0] and len(dlts.jobs) == 2


@needs_jobs
def test_kill_polls_as_the_cancel_status(dlts, code, tmp_path):
    platform = DltsPlatform(_config(tmp_path, dlts.dashboard), tmp_path / "exp")
    handle = platform.submit_sync(_spec(code, 3, command=f"STEP=5 {sys.executable} t.py"))
    deadline = time.monotonic() + 30
    while not platform.poll_sync(handle, {}).metrics and time.monotonic() < deadline:
        time.sleep(0.1)
    platform.cancel_sync(handle, TrialStatus.USER_CANCELED, "stopped from the UI")
    status, metrics, info = asyncio.run(poll_until_done(platform, handle, 20))
    assert status is TrialStatus.USER_CANCELED and info.message == "stopped from the UI"
    assert [m.value for m in metrics] == [3]
    assert dlts.jobs[handle["job_id"]].state == "stopped"


@needs_jobs
def test_max_trial_duration_kills_the_job_early(dlts, code, tmp_path):
    platform = DltsPlatform(_config(tmp_path, dlts.dashboard), tmp_path / "exp")
    handle = platform.submit_sync(_spec(code, 5, command=f"STEP=30 {sys.executable} t.py"))
    outcome, recorder = follow(platform, handle, deadline=time.time() + 2)
    assert (outcome.status, outcome.message) == (TrialStatus.EARLY_STOPPED, TIMEOUT_REASON)
    job = dlts.jobs[handle["job_id"]]
    assert job.done.wait(10) and job.state == "stopped"
    assert [m.value for m in recorder.metrics] == [5]


def test_a_dropped_submit_is_not_sent_twice_and_odd_answers_are_clear_errors(dlts, code, tmp_path):
    """DLTS cannot recognise a job sent again, so a submit whose connection dropped after it went
    out is not retried (the job may exist); an answer that is not JSON names the call."""
    platform = DltsPlatform(_config(tmp_path, dlts.dashboard), tmp_path / "exp")
    dlts.faults.append(("POST", r"/jobs$", "drop"))
    with pytest.raises(DltsError, match=r"disconnected without sending a response\. \(attempts: 1\)"):
        platform.submit_sync(_spec(code, 6))
    assert [r.method for r in dlts.requests].count("POST") == 1
    dlts.faults.append(("GET", r"/v2/clusters/", (200, {}, None)))
    with pytest.raises(DltsError, match="expected JSON"):
        platform.poll_sync({"job_id": "j1", "trial_dir": str(tmp_path)}, {})


@needs_jobs
def test_an_oom_killed_trial_restarts_as_a_job_of_its_own_from_its_last_checkpoint(dlts, tmp_path, store):
    from tests.helpers.checkpoint_trials import TRIAL as CHECKPOINTING
    from tests.helpers.checkpoint_trials import assert_resumed_from_step_3, one_trial_experiment
    from trialflow.lifecycle import trial_lifecycle

    code = code_folder(tmp_path, {"t.py": CHECKPOINTING})
    config = _config(tmp_path, dlts.dashboard)
    service = {
        "platform": "dlts",
        "dashboard": dlts.dashboard,
        "team": "platform",
        "email": EMAIL,
        "password": PASSWORD,
        "localStorageMountPoint": str(config.local_storage_mount_point),
        "containerStorageMountPoint": str(config.container_storage_mount_point),
    }
    command = f"env MODE=killself {sys.executable} t.py"  # the OOM killer's SIGKILL, after checkpoint 3
    experiment = one_trial_experiment(tmp_path, store, code, command, service, "edltsckpt", "exp")
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    outcome = trial_lifecycle.wait_in_worker(started, store, 90, 0.2)

    assert outcome.status is TrialStatus.SUCCEEDED, outcome.message
    assert_resumed_from_step_3(store, started.record.storage_id, "killed by signal 9 (exit code 137)")
    record = store.trial(started.record.storage_id)
    assert record.handle["attempt"] == 1 and record.handle["job_id"] != started.handle["job_id"]
    assert len(dlts.jobs) == 2
