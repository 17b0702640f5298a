"""The seeds' own OpenPAI (v2 and v1) and DLTS (v1) configs, placeholders filled, through
`trialflow run` against the services' emulators: real Airflow, the real REST clients, jobs that
really run unmodified `import nni` trial code (the nni==3.0 virtualenv stands in for the
msranni/nni image)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NNI_EXAMPLES
from tests.helpers.emulators.base import Emulator, can_run_jobs
from tests.helpers.emulators.dlts import DltsEmulator
from tests.helpers.emulators.openpai import OpenpaiEmulator

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(can_run_jobs() is not None, reason=can_run_jobs() or ""),
    pytest.mark.skipif(not NNI_EXAMPLES.is_dir(), reason=f"NNI's example configs are not at {NNI_EXAMPLES}"),
]

TOKEN = "pai-seed-token-41c2"
#: Stands in for the seeds' mnist.py (which needs PyTorch and a dataset download): the same nni calls.
MNIST = """\
import nni
params = nni.get_next_parameter()
score = sum(v for v in params.values() if isinstance(v, (int, float)))
for epoch in range(2):
    nni.report_intermediate_result(score + epoch)
nni.report_final_result(score)
"""


def _run(config: Path, env: dict[str, str] | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "trialflow.cli", "run", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert TOKEN not in done.stdout + done.stderr
    return json.loads(done.stdout)


def _experiment_folder(tmp_path: Path, seed: str) -> Path:
    folder = tmp_path / "experiment"
    folder.mkdir()
    shutil.copy(NNI_EXAMPLES / seed / "search_space.json", folder / "search_space.json")
    (folder / "mnist.py").write_text(MNIST)
    return folder


@pytest.fixture
def pai(tmp_path, nni_python):
    nfs = tmp_path / "nfs"
    nfs.mkdir()
    storages = {"confignfs": (nfs, str(tmp_path / "container-mount"))}
    images = {image: str(Path(nni_python).parent) for image in ("msranni/nni", "msranni/nni:latest")}
    with OpenpaiEmulator(TOKEN, "alice", storages, images=images) as emulator:
        yield emulator


def _no_token_under(folder: Path, token: str = TOKEN) -> None:
    """Airflow's logs and database, the experiment store, the trials' files: the token is in
    none of them (the config file itself is the user's)."""
    for path in folder.rglob("*"):
        if path.is_file() and path.name != "config.yml":
            assert token.encode() not in path.read_bytes(), f"the secret leaked into {path}"


def _check(summary: dict, service: Emulator, trials: int) -> None:
    assert summary["state"] == "success"
    assert [t["status"] for t in summary["trials"]] == ["SUCCEEDED"] * trials
    for t in summary["trials"]:
        score = sum(v for v in t["parameters"].values() if isinstance(v, (int, float)))
        assert t["final_metric"] == pytest.approx(score)
        assert t["intermediate_count"] == 2
    assert len(service.jobs) == trials, "one job per trial, none twice"
    assert all(j.state == "succeeded" for j in service.jobs.values())


def test_the_v2_seed_config_runs_end_to_end(pai, tmp_path):
    folder = _experiment_folder(tmp_path, "mnist-pytorch")
    text = (NNI_EXAMPLES / "mnist-pytorch" / "config_openpai.yml").read_text()
    for placeholder, value in {
        "http://123.123.123.123": pai.host,
        "${your user name}": "alice",
        "${your token}": TOKEN,
        "${your storage config name}": "confignfs",
        "${NFS mount point on local machine}": str(tmp_path / "nfs"),
        "${NFS mount point inside Docker container}": str(tmp_path / "container-mount"),
        "maxTrialNumber: 10": "maxTrialNumber: 3",
    }.items():
        assert placeholder in text
        text = text.replace(placeholder, value)
    (folder / "config.yml").write_text(text)
    _check(_run(folder / "config.yml"), pai, 3)
    _no_token_under(folder)
    _no_token_under(tmp_path / "nfs")


# make test-extended (47 s here): the same OpenPAI platform and emulator as the v2 seed's run above;
# what v1 adds, its conversion, is checked for this very file by tests/config/test_nni_examples.py
# (mnist-tfv1/config_pai.yml) and tests/config/test_v1.py.
@pytest.mark.extended
def test_the_v1_seed_config_runs_end_to_end(pai, tmp_path):
    folder = _experiment_folder(tmp_path, "mnist-tfv1")
    text = (NNI_EXAMPLES / "mnist-tfv1" / "config_pai.yml").read_text()
    for placeholder, value in {
        "{replace_to_your_nfs_mount_path}": str(tmp_path / "nfs"),
        "{replace_to_your_container_mount_path}": str(tmp_path / "container-mount"),
        "{replace_to_your_storage_config_name}": "confignfs",
        "userName: username": "userName: alice",
        "token: token": f"token: {TOKEN}",
        "host: 10.10.10.10": f"host: {pai.host}",
        "maxTrialNum: 10": "maxTrialNum: 3",
    }.items():
        assert placeholder in text
        text = text.replace(placeholder, value)
    (folder / "config.yml").write_text(text)
    _check(_run(folder / "config.yml"), pai, 3)
    _no_token_under(folder)


def test_the_v1_dlts_seed_config_runs_end_to_end(tmp_path, nni_python):
    """The seed names only the dashboard: team, email and password come from DLTS's job
    variables, as in NNI, and the experiment's folder is on the work storage at the same path."""
    folder = _experiment_folder(tmp_path, "mnist-tfv1")
    text = (NNI_EXAMPLES / "mnist-tfv1" / "config_dlts.yml").read_text()
    image = {"msranni/nni:latest": str(Path(nni_python).parent)}
    with DltsEmulator("alice@example.com", TOKEN, "platform", (tmp_path, str(tmp_path)), images=image) as dlts:
        for placeholder, value in {
            "http://azure-eastus-p40-dev1-infra01.eastus.cloudapp.azure.com/": dlts.dashboard,
            "maxTrialNum: 10": "maxTrialNum: 3",
        }.items():
            assert placeholder in text
            text = text.replace(placeholder, value)
        (folder / "config.yml").write_text(text)
        credentials = {"DLWS_USER_EMAIL": "alice@example.com", "DLTS_JOB_TOKEN": TOKEN, "DLWS_VC_NAME": "platform"}
        _check(_run(folder / "config.yml", credentials), dlts, 3)
        assert all(job.spec["resourcegpu"] == 1 and job.spec["gpuType"] == "P40" for job in dlts.jobs.values())
    _no_token_under(folder)


SLOW_TRIAL = """\
import time
import trialflow.trial as t
p = t.get_next_parameter()
for i in range(3):
    t.report_intermediate_result(i)
    time.sleep(2)
t.report_final_result(1.0)
"""


def test_a_killed_worker_reattaches_to_its_openpai_job(harness, tmp_path):
    """SIGKILL the task's worker while its job runs: the retry gets 409 and follows the same job.
    The token is an Airflow connection's password (tokenConnId), never in the config."""
    response = harness.airflow.api(
        "POST", "/connections", json={"connection_id": "pai_token", "conn_type": "generic", "password": TOKEN}
    )
    assert response.status_code in (200, 201, 409), response.text
    nfs = tmp_path / "nfs"
    nfs.mkdir()
    mount = str(tmp_path / "container-mount")
    dag_source = (
        "# airflow DAG\nfrom datetime import timedelta\nfrom trialflow.dag import experiment_dag\n"
        "dag = experiment_dag('{CONFIG}', dag_id='{DAG_ID}', poll_interval=0.3, defer_after=120,\n"
        "                     start_trials_in='worker',  # a worker to kill while it follows\n"
        "                     default_args={'retries': 2, 'retry_delay': timedelta(seconds=1)})\n"
    )
    with OpenpaiEmulator(TOKEN, "alice", {"confignfs": (nfs, mount)}) as pai:
        config = (
            "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialConcurrency: 1\nmaxTrialNumber: 1\n"
            f"tuner: {{name: Random}}\ntrialCommand: {sys.executable} trial.py\ntrialCodeDirectory: .\n"
            f"trainingService: {{platform: openpai, host: '{pai.host}', username: alice, tokenConnId: pai_token,\n"
            f"  trialCpuNumber: 1, trialMemorySize: 1gb, storageConfigName: confignfs,\n"
            f"  localStorageMountPoint: '{nfs}', containerStorageMountPoint: '{mount}'}}\n"
        )
        dag_id, _ = harness.experiment("paikill", config, {"trial.py": SLOW_TRIAL}, dag_source=dag_source)
        killed: list[int] = []

        def kill_trial_worker(run_id: str) -> None:
            (ti,) = harness.tis(dag_id, run_id) or [None]
            if not killed and ti and ti["state"] == "running" and ti.get("pid") and pai.jobs:
                os.kill(ti["pid"], signal.SIGKILL)
                killed.append(ti["pid"])

        run_id, state = harness.run(dag_id, timeout=300, on_tick=kill_trial_worker)
        assert killed, "the trial's worker was never seen running"
        assert state == "success"
        (ti,) = harness.tis(dag_id, run_id)
        assert ti["try_number"] >= 2
        assert len(pai.jobs) == 1 and len(pai.submissions) >= 2, "the retry re-attached (409), no second job"
        (row,) = harness.rows(dag_id, run_id)
        assert row.status == "SUCCEEDED" and row.intermediate_count == 3
        assert TOKEN not in json.dumps(harness.xcom(dag_id, run_id, "trial", 0))


@pytest.mark.parametrize(
    "seed",
    ["mnist-pytorch/config_aml.yml", pytest.param("mnist-tfv1/config_aml.yml", marks=pytest.mark.extended)],
)
def test_the_aml_seed_configs_run_end_to_end(seed, tmp_path, nni_python, monkeypatch):
    """azure-ai-ml against the workspace emulator (HTTPS, Azurite for the code), credentials
    through azure-identity's chain, the cloud through the SDK's ARM_CLOUD_METADATA_URL."""
    from tests.helpers.emulators.azure import azure_workspace, missing_reason

    if missing_reason():
        pytest.skip(missing_reason() or "")
    monkeypatch.delenv("AZUREML_CURRENT_CLOUD", raising=False)
    example = seed.split("/")[0]
    folder = _experiment_folder(tmp_path, example)
    text = (NNI_EXAMPLES / seed).read_text()
    image = {name: str(Path(nni_python).parent) for name in ("msranni/nni", "msranni/nni:latest")}
    with azure_workspace(tmp_path / "azure", TOKEN, images=image) as azure:
        values = {
            "subscriptionId": azure.config["subscriptionId"],
            "resourceGroup": azure.config["resourceGroup"],
            "workspaceName": azure.config["workspaceName"],
            "computeTarget": azure.config["computeTarget"],
        }
        for key, value in values.items():
            text, count = re.subn(rf"({key}: )\$\{{[^}}]+\}}", rf"\g<1>{value}", text)
            assert count == 1, key
        text = re.sub(r"(maxTrialNumber|maxTrialNum): 10", r"\1: 3", text)
        (folder / "config.yml").write_text(text)
        _check(_run(folder / "config.yml", azure.env), azure.emulator, 3)
    _no_token_under(folder)
