"""Azure ML: the pure builders, then the real azure-ai-ml / azure-identity / azure-storage-blob
clients against the workspace emulator over HTTPS, with Azurite as its blob storage and
jobs that really run."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.experiment_setup import code_folder
from tests.helpers.following import follow, poll_until_done
from trialflow.config.platforms import AmlConfig
from trialflow.experiment.follow import TIMEOUT_REASON
from trialflow.platforms.aml import (
    PARAMETER_VAR,
    STATES,
    AmlError,
    AmlPlatform,
    job_command,
    job_environment,
    job_name,
    job_status,
)
from trialflow.platforms.base import TrialSpec, TrialStatus

TOKEN = "aad-token-5e7c1d"
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


def _spec(code: Path, index: int, command: str = "python3 t.py", **params) -> TrialSpec:
    return TrialSpec("eaml0001", f"eaml0001-{index:04d}", index, index, {"x": index, **params}, command, code)


@pytest.mark.parametrize("status, expected", sorted(STATES.items()) + [("SomethingNew", TrialStatus.WAITING)])
def test_status_table(status, expected):
    assert job_status(status) is expected


def test_the_job_command_writes_parameters_and_quotes_the_trial_command(tmp_path):
    hostile = "printf '%s|' \"$(cat /tmp/trialflow/eaml0001-0007/parameter.cfg)\" \"$NNI_TRIAL_JOB_ID\" 'a b'; exit 5"
    spec = _spec(tmp_path, 7, command=hostile, text="it's $(not run)")
    env = job_environment(spec)
    assert json.loads(env[PARAMETER_VAR])["parameters"] == {"x": 7, "text": "it's $(not run)"}
    assert env["NNI_PLATFORM"] == "aml" and "CUDA_VISIBLE_DEVICES" not in env
    done = subprocess.run(["bash", "-c", job_command(spec)], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 5, done.stderr
    assert done.stdout == f"{env[PARAMETER_VAR]}|eaml0001-0007|a b|"
    assert job_name("eaml0001-0007") == "trialflow_eaml0001_0007"


# -- against the emulated workspace ------------------------------------------------------------


@pytest.fixture
def azure(tmp_path, monkeypatch):
    from tests.helpers.emulators.azure import azure_workspace, missing_reason

    why = missing_reason()
    if why:
        pytest.skip(why)
    monkeypatch.delenv("AZUREML_CURRENT_CLOUD", raising=False)  # the SDK sets it per process
    with azure_workspace(tmp_path / "azure", TOKEN) as workspace:
        for key, value in workspace.env.items():
            monkeypatch.setenv(key, value)
        yield workspace


@pytest.fixture
def code(tmp_path):
    return code_folder(tmp_path, {"t.py": TRIAL, "config.yml": f"token: {TOKEN}\n"})


def _platform(azure, tmp_path: Path, **extra) -> AmlPlatform:
    config = AmlConfig.model_validate({"platform": "aml", **azure.config, "trialCommand": "python3 t.py", **extra})
    return AmlPlatform(config, tmp_path / "exp")


#: What azure-ai-ml asks to start one command job with local code (the SDK's own sequence; a
#: change here is a change in the SDK worth reading about).
SUBMIT_SEQUENCE = [
    ("GET", "/jobs/{job}"),
    ("GET", "/codes/*/versions"),
    ("POST", "/codes/*/versions/1/startPendingUpload"),
    ("PUT", "/codes/*/versions/1"),
    ("PUT", "/environments/CliV2AnonymousEnvironment/versions/*"),
    ("PUT", "/jobs/{job}"),
]


def _arm_calls(azure, since: int = 0) -> list[tuple[str, str]]:
    import re

    out = []
    for r in azure.emulator.requests[since:]:
        if r.path.startswith(azure.emulator.root):
            rest = r.path[len(azure.emulator.root) :]
            out.append((r.method, re.sub(r"/(codes|versions)/[0-9a-f-]{32,}", r"/\1/*", rest)))
    return out


@pytest.mark.slow  # real processes for seconds: make test runs it, the inner loops do not
def test_trials_run_report_fail_and_reattach(azure, code, tmp_path, caplog):
    platform = _platform(azure, tmp_path)
    platform.prepare_sync("eaml0001")
    good = _spec(code, 1, command=f"{sys.executable} t.py")
    bad = _spec(code, 2, command=f"{sys.executable} t.py", rc=4)
    good.code_excludes = bad.code_excludes = (code / "config.yml",)
    start = len(azure.emulator.requests)
    with caplog.at_level(logging.DEBUG):
        first = platform.submit_sync(good)
    assert _arm_calls(azure, start) == [(m, p.format(job=first["job"])) for m, p in SUBMIT_SEQUENCE]
    second = platform.submit_sync(bad)

    async def both():
        return await asyncio.gather(poll_until_done(platform, first), poll_until_done(platform, second))

    (s1, m1, _), (s2, m2, _) = asyncio.run(both())
    assert s1 is TrialStatus.SUCCEEDED and [m.value for m in m1] == [1, 2, 3, 10]
    assert s2 is TrialStatus.FAILED and [m.value for m in m2] == [2, 3, 4, 20]
    assert first["web_url"].startswith("https://") and first["job"] in first["web_url"]
    # The code went through Azurite; the experiment's config (it may hold secrets) did not.
    uploaded = azure.emulator.work / first["job"] / "code"
    assert (uploaded / "t.py").exists() and not (uploaded / "config.yml").exists()
    assert (uploaded / ".trialflow-sdk" / "trialflow" / "trial" / "__init__.py").exists()
    # A retried task finds its job by name: no second job.
    start = len(azure.emulator.requests)
    assert platform.submit_sync(good) == first and _arm_calls(azure, start) == [("GET", f"/jobs/{first['job']}")]
    assert len(azure.emulator.jobs) == 2
    assert TOKEN not in caplog.text


@pytest.mark.slow
def test_cancel_and_max_trial_duration_end_the_job_with_the_reason(azure, code, tmp_path):
    platform = _platform(azure, tmp_path)
    handle = platform.submit_sync(_spec(code, 3, command=f"STEP=30 {sys.executable} t.py"))
    outcome, recorder = follow(platform, handle, deadline=time.time() + 3)
    assert (outcome.status, outcome.message) == (TrialStatus.EARLY_STOPPED, TIMEOUT_REASON)
    assert [m.value for m in recorder.metrics] == [3]
    job = azure.emulator.jobs[handle["job"]]
    assert job.done.wait(10) and job.state == "stopped"
    # Another process polls: the reason is on the job itself.
    status, _, info = asyncio.run(poll_until_done(_platform(azure, tmp_path), handle, 20))
    assert status is TrialStatus.EARLY_STOPPED and info.message == TIMEOUT_REASON


def test_refusals_name_the_config_key(azure, tmp_path, monkeypatch):
    with pytest.raises(AmlError, match="workspaceName 'nope' does not exist"):
        _platform(azure, tmp_path, workspaceName="nope").prepare_sync("eaml0001")
    with pytest.raises(AmlError, match="computeTarget 'gpu-big' does not exist"):
        _platform(azure, tmp_path, computeTarget="gpu-big").prepare_sync("eaml0001")
    monkeypatch.setenv("TRIALFLOW_TEST_AZ_TOKEN", "expired-" + TOKEN)
    with pytest.raises(AmlError, match="credential was refused") as info:
        _platform(azure, tmp_path).prepare_sync("eaml0001")
    assert TOKEN not in str(info.value)


@pytest.mark.slow
def test_busy_answers_and_dropped_connections_are_retried_by_the_sdk(azure, code, tmp_path):
    """azure-core's retry policy (Retry-After honoured, bounded) under the platform's calls."""
    platform = _platform(azure, tmp_path)
    handle = platform.submit_sync(_spec(code, 4, command=f"{sys.executable} t.py"))
    azure.emulator.faults += [
        ("GET", r"/jobs/trialflow_eaml0001_0004$", (503, {"Retry-After": "1"}, {"error": {"code": "Busy"}})),
        ("GET", r"/jobs/trialflow_eaml0001_0004$", (429, {"Retry-After": "0"}, {"error": {"code": "TooMany"}})),
        ("GET", r"/jobs/trialflow_eaml0001_0004$", "drop"),
    ]
    status, metrics, _ = asyncio.run(poll_until_done(platform, handle))
    assert status is TrialStatus.SUCCEEDED and [m.value for m in metrics] == [4, 5, 6, 40]
    assert azure.emulator.faults == []


def test_render_shows_the_job_as_the_sdk_would_send_it(tmp_path):
    """No workspace needed: the job the SDK would create, with the code folder, image, compute."""
    config = AmlConfig.model_validate(
        {"platform": "aml", "subscriptionId": "s", "resourceGroup": "r", "workspaceName": "w", "computeTarget": "c"}
        | {"trialCommand": "python3 t.py", "dockerImage": "msranni/nni:v3"}
    )
    job = AmlPlatform(config, tmp_path / "exp").render(_spec(tmp_path, 2, text="x"))
    assert job["type"] == "command" and job["compute"] == "azureml:c"
    assert job["component"]["name"] == "trialflow_eaml0001_0002" and job["component"]["code"] == str(tmp_path)
    assert job["environment"]["image"] == "msranni/nni:v3"
    assert json.loads(job["environment_variables"][PARAMETER_VAR])["parameters"] == {"x": 2, "text": "x"}
    assert job["component"]["tags"] == {"trialflow.experiment": "eaml0001", "trialflow.trial": "eaml0001-0002"}
