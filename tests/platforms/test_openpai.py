"""OpenPAI: the pure builders row by row, then the real platform code against the REST emulator,
whose jobs really run (the storage bind-mounted over the container's mount point)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.emulators.openpai import OpenpaiEmulator, can_run_jobs
from tests.helpers.experiment_setup import code_folder
from tests.helpers.following import follow, poll_until_done
from trialflow.config.platforms import OpenpaiConfig
from trialflow.experiment.follow import TIMEOUT_REASON
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.mounted import job_script
from trialflow.platforms.openpai import (
    STATES,
    OpenpaiError,
    OpenpaiPlatform,
    build_job,
    job_name,
    job_page,
    job_status,
    paths,
)
from trialflow.platforms.rest import RestClient, RestError

TOKEN = "pai-token-7f3e9a"
TRIAL = """\
import os, sys, time
import trialflow.trial as t
p = t.get_next_parameter()
open(os.path.join(os.environ["NNI_SYS_DIR"], "where.txt"), "w").write(os.getcwd())
for i in range(3):
    t.report_intermediate_result(p["x"] + i)
    time.sleep(float(os.environ.get("STEP", "0.05")))
if p.get("fail"):
    sys.exit(3)
t.report_final_result(p["x"] * 10)
"""


def _config(tmp_path: Path, host: str = "http://pai.example:9186", **extra) -> OpenpaiConfig:
    local = tmp_path / "nfs"
    local.mkdir(exist_ok=True)
    values = {
        "platform": "openpai",
        "host": host,
        "username": "alice",
        "token": TOKEN,
        "trialCpuNumber": 2,
        "trialMemorySize": "4gb",
        "storageConfigName": "confignfs",
        "localStorageMountPoint": str(local),
        "containerStorageMountPoint": str(tmp_path / "container-view"),
        "trialCommand": "python3 trial.py",
        **extra,
    }
    return OpenpaiConfig.model_validate(values)


def _spec(
    code: Path, index: int, experiment: str = "epai0001", command: str = "python3 trial.py", **params
) -> TrialSpec:
    return TrialSpec(experiment, f"{experiment}-{index:04d}", index, index, {"x": index, **params}, command, code)


# -- pure builders ---------------------------------------------------------------------------


def test_job_names_are_deterministic_and_valid_for_openpai():
    assert job_name("eab12cd3-0007") == "trialflow_eab12cd3_0007"
    assert job_name("eab12cd3-0007") == job_name("eab12cd3-0007")
    assert job_page("10.0.0.1", "a b", "n&x") == "http://10.0.0.1/job-detail.html?username=a+b&jobName=n%26x"


@pytest.mark.parametrize(
    "state, expected",
    [
        ("WAITING", TrialStatus.WAITING),
        ("RUNNING", TrialStatus.RUNNING),
        ("STOPPING", TrialStatus.RUNNING),
        ("SUCCEEDED", TrialStatus.SUCCEEDED),
        ("FAILED", TrialStatus.FAILED),
        ("STOPPED", TrialStatus.SYS_CANCELED),
        ("UNKNOWN", TrialStatus.WAITING),
        ("SOMETHING_NEW", TrialStatus.WAITING),
        (None, TrialStatus.WAITING),
    ],
)
def test_status_table(state, expected):
    status, code, message = job_status({"jobStatus": {"state": state, "appExitCode": 3, "appExitDiagnostics": "oom"}})
    assert status is expected and code == 3 and message == "oom"
    assert set(STATES) == {"WAITING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "STOPPED", "UNKNOWN"}


def test_the_default_job_protocol_is_nnis(tmp_path):
    config = _config(tmp_path, virtualCluster="research")
    spec = _spec(tmp_path, 1)
    spec.gpu_number = 2
    job = build_job(config, spec, "n1", ["echo hi"])
    role = job["taskRoles"]["taskrole"]
    assert job["protocolVersion"] == 2 and job["name"] == "n1" and job["type"] == "job"
    assert job["prerequisites"] == [{"type": "dockerimage", "name": "image", "uri": "msranni/nni:latest"}]
    assert role["resourcePerInstance"] == {"cpu": 2, "memoryMB": 4096, "gpu": 2}
    assert role["instances"] == 1 and role["commands"] == ["echo hi"] and role["dockerImage"] == "image"
    assert job["defaults"] == {"virtualCluster": "research"}
    assert job["extras"] == {"storages": [{"name": "confignfs"}]}
    assert TOKEN not in yaml.safe_dump(job)


def test_openpai_config_is_kept_whole_except_name_and_commands(tmp_path):
    own = {
        "protocolVersion": 2,
        "name": "theirs",
        "type": "job",
        "taskRoles": {"a": {"instances": 2, "commands": ["x"]}, "b": {"instances": 1, "commands": ["y"]}},
        "extras": {"storages": [{"name": "other"}], "hivedScheduler": {"jobPriorityClass": "prod"}},
    }
    job = build_job(_config(tmp_path, openpaiConfig=own), _spec(tmp_path, 0), "mine", ["run"])
    assert job["name"] == "mine"
    assert {k: r["commands"] for k, r in job["taskRoles"].items()} == {"a": ["run"], "b": ["run"]}
    assert job["taskRoles"]["a"]["instances"] == 2
    assert job["extras"]["hivedScheduler"] == {"jobPriorityClass": "prod"}
    assert job["extras"]["storages"] == [{"name": "other"}, {"name": "confignfs"}]
    assert own["name"] == "theirs", "the config's own dict is not changed"
    bad = {**own, "taskRoles": {"a": "python3 x.py"}}
    with pytest.raises(OpenpaiError, match="taskRoles.a: expected a mapping"):
        build_job(_config(tmp_path, openpaiConfig=bad), _spec(tmp_path, 0), "mine", ["run"])
    file = tmp_path / "pai.yaml"
    file.write_text(yaml.safe_dump({**own, "taskRoles": {}}))
    with pytest.raises(OpenpaiError, match="taskRoles"):
        build_job(_config(tmp_path, openpaiConfigFile=str(file)), _spec(tmp_path, 0), "mine", ["run"])


def test_the_job_script_quotes_every_value(tmp_path):
    """The script runs as the job would (sh, the container's paths, here a folder with a quote
    in its name): the hostile command, its environment and the exit code come through whole."""
    hostile = 'printf \'%s|\' "$WEIRD" "$NNI_TRIAL_JOB_ID" `echo \'a b\'` "$(pwd)"; exit 7'
    config = _config(tmp_path, containerStorageMountPoint=str(tmp_path / "it's $here"))
    spec = _spec(tmp_path, 0, command=hostile)
    spec.env["WEIRD"] = "a'b $(c) `d`"
    p = paths(config, spec.experiment_id, spec.trial_id)
    (Path(p.root) / "code").mkdir(parents=True)
    env = spec.environment("openpai", p.trial, p.code, base={}, marked=False)
    script = "\n".join(job_script(spec.command, p, env))
    assert "export NNI_PLATFORM=openpai" in script and "CUDA_VISIBLE_DEVICES" not in script
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 7, done.stderr
    log = (Path(p.trial) / "trial.log").read_text()
    assert log == f"a'b $(c) `d`|epai0001-0000|a|b|{p.code}|"  # the unquoted `echo` splits, as in sh


def test_preflight_names_the_keys(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    platform = OpenpaiPlatform(_config(tmp_path, host="ftp://x"), tmp_path / "exp")
    problems = dict(platform.preflight(code))
    assert "http(s)" in problems[("host",)]
    config = _config(tmp_path, localStorageMountPoint=str(tmp_path / "not-mounted"))
    problems = dict(OpenpaiPlatform(config, tmp_path / "exp").preflight(tmp_path / "missing"))
    assert "mount the storage 'confignfs'" in problems[("localStorageMountPoint",)]
    assert "does not exist" in problems[("trialCodeDirectory",)]


# -- the REST path, against the emulator -------------------------------------------------------


def _rest_emulator(tmp_path: Path) -> OpenpaiEmulator:
    return OpenpaiEmulator(TOKEN, "alice", {"confignfs": (tmp_path / "nfs", str(tmp_path / "container-view"))})


@pytest.mark.slow
def test_busy_answers_are_retried_with_retry_after_and_bounded(tmp_path):
    with _rest_emulator(tmp_path) as pai:
        client = RestClient(pai.host + "/rest-server/api/v2", headers={"Authorization": f"Bearer {TOKEN}"})
        pai.faults += [
            ("GET", "/jobs$", (503, {"Retry-After": "1"}, {"message": "busy"})),
            ("GET", "/jobs$", (429, {"Retry-After": "0"}, {"message": "slow down"})),
            ("GET", "/jobs$", "drop"),
        ]
        started = time.monotonic()
        response = asyncio.run(client.request("GET", "/jobs"))
        assert response.status_code == 200 and 1.0 <= time.monotonic() - started < 10
        assert len([r for r in pai.requests if r.path.endswith("/jobs")]) == 4
        pai.faults += [("GET", "/jobs$", (503, {"Retry-After": "0"}, {"message": f"busy {i}"})) for i in range(6)]
        with pytest.raises(RestError, match="answered 503: busy 5"):
            asyncio.run(client.request("GET", "/jobs"))


def test_a_service_echoing_the_token_across_the_message_bound_shows_none_of_it(tmp_path):
    # The service's message is cut to 300 characters; cut before scrubbing, a token standing
    # across the cut kept its start ("pai-tok...").
    with _rest_emulator(tmp_path) as pai:
        client = RestClient(pai.host + "/rest-server/api/v2", secrets=[TOKEN])
        echoed = "x" * 295 + " " + TOKEN + " was refused"
        pai.faults.append(("GET", "/jobs$", (401, {}, {"message": echoed})))
        with pytest.raises(RestError) as info:
            asyncio.run(client.request("GET", "/jobs"))
        assert info.value.service_message == ("x" * 295 + " *** was refused")[:300]
        assert TOKEN[:3] not in str(info.value)


def test_a_body_that_is_no_json_is_scrubbed_before_it_is_cut():
    import httpx

    from trialflow.platforms.rest import service_message

    response = httpx.Response(502, text="<html>" + "x" * 290 + " " + TOKEN + "</html>")
    said = service_message(response, lambda text: text.replace(TOKEN, "***"))
    assert said == ("<html>" + "x" * 290 + " ***</html>")[:300] and TOKEN[:3] not in said


def test_a_refused_token_names_the_key_and_never_shows_it(tmp_path, caplog):
    with _rest_emulator(tmp_path) as pai:
        wrong = OpenpaiPlatform(_config(tmp_path, host=pai.host, token="not-it-" + TOKEN), tmp_path / "exp")
        with caplog.at_level(logging.DEBUG), pytest.raises(OpenpaiError) as info:
            wrong.prepare_sync("epai0001")
        assert "trainingService.token was refused" in str(info.value)
        assert TOKEN not in str(info.value) and TOKEN not in caplog.text
        missing_vc = OpenpaiPlatform(_config(tmp_path, host=pai.host, virtualCluster="nope"), tmp_path / "exp")
        with pytest.raises(OpenpaiError, match="virtualCluster 'nope' does not exist"):
            missing_vc.prepare_sync("epai0001")
        missing_storage = OpenpaiPlatform(
            _config(tmp_path, host=pai.host, storageConfigName="nostore"), tmp_path / "exp"
        )
        with pytest.raises(OpenpaiError, match="storageConfigName 'nostore' does not exist"):
            missing_storage.prepare_sync("epai0001")
        OpenpaiPlatform(_config(tmp_path, host=pai.host), tmp_path / "exp").prepare_sync("epai0001")
    port = pai.host.rsplit(":", 1)[1]
    gone = OpenpaiPlatform(_config(tmp_path, host=f"http://127.0.0.1:{port}"), tmp_path / "exp")
    gone.api.attempts = 2
    with pytest.raises(OpenpaiError, match="trainingService.host: cannot reach"):
        gone.prepare_sync("epai0001")


# -- jobs that really run -----------------------------------------------------------------------

needs_jobs = pytest.mark.skipif(can_run_jobs() is not None, reason=can_run_jobs() or "")


@pytest.fixture
def pai(tmp_path):
    with _rest_emulator(tmp_path) as emulator:
        yield emulator


@pytest.fixture
def code(tmp_path):
    return code_folder(tmp_path, {"trial.py": TRIAL, "config.yml": f"token: {TOKEN}\n"})


@needs_jobs
def test_trials_run_report_and_fail_through_the_storage(pai, code, tmp_path):
    platform = OpenpaiPlatform(_config(tmp_path, host=pai.host), tmp_path / "exp")
    platform.prepare_sync("epai0001")
    good = _spec(code, 1, command=f"{sys.executable} trial.py")
    bad = _spec(code, 2, command=f"{sys.executable} trial.py", fail=True)
    config_file = code / "config.yml"
    good.code_excludes = bad.code_excludes = (config_file,)

    async def both():
        handles = [await platform.submit(good), await platform.submit(bad)]
        return handles, await asyncio.gather(*(poll_until_done(platform, h) for h in handles))

    handles, ((s1, m1, _), (s2, m2, info2)) = asyncio.run(both())
    assert s1 is TrialStatus.SUCCEEDED and [m.value for m in m1] == [1, 2, 3, 10]
    assert s2 is TrialStatus.FAILED and info2.exit_code == 3 and [m.value for m in m2] == [2, 3, 4]
    trial_dir = Path(handles[0]["trial_dir"])
    # The job ran in the container's paths, which exist only inside its mount namespace.
    assert (trial_dir / "where.txt").read_text() == str(tmp_path / "container-view/trialflow/epai0001/trials") + (
        "/epai0001-0001/code"
    )
    assert list((tmp_path / "container-view").iterdir()) == []
    assert not (trial_dir / "code" / "config.yml").exists(), "the experiment's config is never shipped"
    assert handles[0]["web_url"] == f"{pai.host}/job-detail.html?username=alice&jobName=trialflow_epai0001_0001"
    # A retried task submits again: 409, the same job, no second process.
    again = platform.submit_sync(good)
    assert again == handles[0] and pai.submissions.count("trialflow_epai0001_0001") == 2
    assert len(pai.jobs) == 2


@needs_jobs
def test_cancel_stops_the_job_and_polls_as_the_cancel_status(pai, code, tmp_path):
    platform = OpenpaiPlatform(_config(tmp_path, host=pai.host), tmp_path / "exp")
    spec = _spec(code, 3, command=f"STEP=5 {sys.executable} trial.py")
    handle = platform.submit_sync(spec)
    deadline = time.monotonic() + 30
    while not platform.poll_sync(handle, {}).metrics and time.monotonic() < deadline:
        time.sleep(0.1)
    platform.cancel_sync(handle, TrialStatus.EARLY_STOPPED, "maxTrialDuration 1s")
    status, metrics, info = asyncio.run(poll_until_done(platform, handle, 20))
    assert status is TrialStatus.EARLY_STOPPED and info.message == "maxTrialDuration 1s"
    assert [m.value for m in metrics] == [3]
    job = pai.jobs["alice~trialflow_epai0001_0003"]
    assert job.state == "stopped" and job.process is not None and job.process.poll() is not None
    # Stopped from OpenPAI's own page (no request of ours beside it): SYS_CANCELED, as in NNI.
    other = platform.submit_sync(_spec(code, 4, command=f"STEP=5 {sys.executable} trial.py"))
    asyncio.run(
        platform.api.request("PUT", "/jobs/alice~trialflow_epai0001_0004/executionType", json={"value": "STOP"})
    )
    assert asyncio.run(poll_until_done(platform, other, 20))[0] is TrialStatus.SYS_CANCELED


@needs_jobs
def test_max_trial_duration_stops_the_job_early(pai, code, tmp_path):
    platform = OpenpaiPlatform(_config(tmp_path, host=pai.host), tmp_path / "exp")
    handle = platform.submit_sync(_spec(code, 5, command=f"STEP=30 {sys.executable} trial.py"))
    outcome, recorder = follow(platform, handle, deadline=time.time() + 2)
    assert (outcome.status, outcome.message) == (TrialStatus.EARLY_STOPPED, TIMEOUT_REASON)
    job = pai.jobs["alice~trialflow_epai0001_0005"]
    assert job.done.wait(10) and job.state == "stopped"
    assert [m.value for m in recorder.metrics] == [5]


def test_the_token_or_its_airflow_connection_one_of_them(tmp_path):
    with pytest.raises(ValueError, match="token, or tokenConnId"):
        _config(tmp_path, tokenConnId="pai")
    config = _config(tmp_path, token=None, tokenConnId="pai")
    platform = OpenpaiPlatform(config, tmp_path / "exp")
    with pytest.raises(OpenpaiError, match="tokenConnId 'pai' is an Airflow connection"):
        platform.prepare_sync("epai0001")


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"status": "EARLY_STOPPED", "reason": "assessor"}', (TrialStatus.EARLY_STOPPED, "assessor")),
        ('{"status": "USER_CANCELED"}', (TrialStatus.USER_CANCELED, "")),
        ('{"status": "SUCCEEDED", "reason": "edited by hand"}', None),  # not a cancel status
        ('{"status": "NOPE"}', None),
        ('["EARLY_STOPPED"]', None),
        ('{"status": ', None),
        ("", None),
        (None, None),
    ],
)
def test_cancel_records_never_raise(text, expected):
    """A torn cancel file or a hand-edited job tag reads as "not ours", not as a traceback."""
    from trialflow.platforms.mounted import parse_cancel

    assert parse_cancel(text) == expected


@needs_jobs
def test_a_job_killed_mid_run_restarts_as_a_job_of_its_own_from_its_last_checkpoint(pai, tmp_path, store):
    from tests.helpers.checkpoint_trials import TRIAL as CHECKPOINTING
    from tests.helpers.checkpoint_trials import assert_resumed_from_step_3, one_trial_experiment
    from trialflow.lifecycle import trial_lifecycle

    code = code_folder(tmp_path, {"trial.py": CHECKPOINTING})
    config = _config(tmp_path, host=pai.host)
    service = {
        "platform": "openpai",
        "host": pai.host,
        "username": "alice",
        "token": TOKEN,
        "trialCpuNumber": 1,
        "trialMemorySize": "1gb",
        "storageConfigName": "confignfs",
        "localStorageMountPoint": str(config.local_storage_mount_point),
        "containerStorageMountPoint": str(config.container_storage_mount_point),
    }
    command = f"env MODE=pause {sys.executable} trial.py"
    experiment = one_trial_experiment(tmp_path, store, code, command, service, "epaickpt")
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    trial_id = started.spec.trial_id
    paused = Path(started.handle["trial_dir"]) / "paused"
    deadline = time.monotonic() + 60
    while not paused.exists():
        assert time.monotonic() < deadline, "the trial never reached its third epoch"
        time.sleep(0.05)
    first = pai.jobs[f"alice~{job_name(trial_id)}"]
    os.killpg(first.process.pid, signal.SIGKILL)  # the whole job, as a node lost would
    outcome = trial_lifecycle.wait_in_worker(started, store, 90, 0.2)

    assert outcome.status is TrialStatus.SUCCEEDED, outcome.message
    assert_resumed_from_step_3(store, started.record.storage_id, "killed by signal 9 (exit code 137)")
    record = store.trial(started.record.storage_id)
    assert record.handle["job"] == job_name(trial_id, 1) and f"alice~{job_name(trial_id, 1)}" in pai.jobs
