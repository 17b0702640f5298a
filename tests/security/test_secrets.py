"""Known secret values in every secret field of every platform config: none of them may show
in what trialflow prints (validate, convert, render), nor, after a real run, in Airflow's logs,
XComs, rendered fields and database, the experiment store or the trials' folders."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, SecretStr

from trialflow.config.model import ExperimentConfig, SharedStorageConfig
from trialflow.config.platforms import BUILTIN_PLATFORM_CONFIGS

TRIALFLOW = [sys.executable, "-m", "trialflow.cli"]


def secret_fields() -> set[str]:
    """Model.field for every SecretStr field in the config models, found by walking them (a new
    secret field with no case below fails this test)."""
    found: set[str] = set()
    stack: list[type[BaseModel]] = [ExperimentConfig, SharedStorageConfig, *BUILTIN_PLATFORM_CONFIGS.values()]
    seen: set[type] = set()
    while stack:
        model = stack.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            types = [field.annotation, *getattr(field.annotation, "__args__", ())]
            for kind in types:
                for inner in [kind, *getattr(kind, "__args__", ())]:
                    if inner is SecretStr:
                        found.add(f"{model.__name__}.{name}")
                    elif isinstance(inner, type) and issubclass(inner, BaseModel):
                        stack.append(inner)
    return found


def _value(label: str) -> str:
    return f"{label}-{secrets.token_hex(6)}"


def platform_cases(tmp_path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """One v2 config per platform with secrets, and {Model.field: its secret value}."""
    s = {key: _value(key.split(".")[1]) for key in secret_fields()}
    mount = tmp_path / "mount"
    mount.mkdir(exist_ok=True)
    services = {
        "remote": {
            "platform": "remote",
            "machineList": [
                {
                    "host": "127.0.0.1",
                    "user": "u",
                    "sshKeyFile": str(tmp_path / "key"),
                    "password": s["RemoteMachineConfig.password"],
                    "sshPassphrase": s["RemoteMachineConfig.ssh_passphrase"],
                }
            ],
        },
        "openpai": {
            "platform": "openpai",
            "host": "https://pai.example",
            "username": "u",
            "token": s["OpenpaiConfig.token"],
            "trialCpuNumber": 1,
            "trialMemorySize": "1gb",
            "storageConfigName": "confignfs",
            "localStorageMountPoint": str(mount),
            "containerStorageMountPoint": "/mnt/data",
        },
        "dlts": {
            "platform": "dlts",
            "dashboard": "https://dlts.example",
            "email": "a@b.c",
            "password": s["DltsConfig.password"],
        },
        "dlc": {
            "platform": "dlc",
            "type": "Worker",
            "image": "i",
            "ecsSpec": "e",
            "region": "r",
            "nasDataSourceId": "n",
            "accessKeyId": s["DlcConfig.access_key_id"],
            "accessKeySecret": s["DlcConfig.access_key_secret"],
            "localStorageMountPoint": str(mount),
            "containerStorageMountPoint": "/mnt",
        },
    }
    configs = {}
    for name, service in services.items():
        configs[name] = {
            "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
            "trialCommand": "python3 t.py",
            "trialCodeDirectory": str(tmp_path),
            "trialConcurrency": 1,
            "maxTrialNumber": 1,
            "tuner": {"name": "Random"},
            "trainingService": service,
            "sharedStorage": {
                "storageType": "AzureBlob",
                "localMountPoint": str(mount),
                "remoteMountPoint": "/mnt/blob",
                "localMounted": "nomount",
                "storageAccountName": "acct",
                "containerName": "c",
                "storageAccountKey": s["SharedStorageConfig.storage_account_key"],
            },
        }
    return configs, s


def test_every_secret_field_has_a_case(tmp_path):
    _, values = platform_cases(tmp_path)
    assert set(values) == secret_fields() and len(values) >= 7


def _cli(*args: str) -> str:
    result = subprocess.run(TRIALFLOW + list(args), capture_output=True, text=True, timeout=120)
    return result.stdout + result.stderr


@pytest.mark.slow
def test_validate_convert_and_render_never_print_a_secret(tmp_path):
    configs, values = platform_cases(tmp_path)
    (tmp_path / "t.py").write_text("print(1)\n")
    outputs = {}
    for name, config in configs.items():
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump(config))
        for command in ("validate", "convert", "render"):
            outputs[f"{name} {command}"] = _cli(command, str(path))
    v1 = tmp_path / "v1.yml"
    v1.write_text(
        yaml.safe_dump(
            {
                "authorName": "a",
                "experimentName": "v1",
                "trialConcurrency": 1,
                "maxTrialNum": 1,
                "trainingServicePlatform": "remote",
                "searchSpacePath": "space.json",
                "useAnnotation": False,
                "tuner": {"builtinTunerName": "Random"},
                "trial": {"command": "python3 t.py", "codeDir": "."},
                "machineList": [
                    {
                        "ip": "127.0.0.1",
                        "username": "u",
                        "passwd": values["RemoteMachineConfig.password"],
                        "passphrase": values["RemoteMachineConfig.ssh_passphrase"],
                    }
                ],
            }
        )
    )
    (tmp_path / "space.json").write_text(json.dumps({"x": {"_type": "uniform", "_value": [0, 1]}}))
    for command in ("validate", "convert", "render"):
        outputs[f"v1 {command}"] = _cli(command, str(v1))
    assert "***" in outputs["remote convert"] and "***" in outputs["v1 convert"]  # masked, still shown to be set
    for where, text in outputs.items():
        leaked = [key for key, value in values.items() if value in text]
        assert not leaked, f"{where} printed {leaked}:\n{text[-2000:]}"


# -- a real run ------------------------------------------------------------------------------

TRIAL = """\
import json, os
from trialflow import trial
p = trial.get_next_parameter()
json.dump(dict(os.environ), open(os.path.join(os.environ["NNI_SYS_DIR"], "env.json"), "w"))
print("parameters", p)
trial.report_intermediate_result(p["x"])
trial.report_final_result(p["x"])
"""


def _scan(root: Path, values: dict[str, str], skip: set[Path]) -> list[str]:
    hits = []
    needles = {key: value.encode() for key, value in values.items()}
    for path in root.rglob("*"):
        if path in skip or not path.is_file() or path.is_symlink():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        hits += [f"{path}: {key}" for key, needle in needles.items() if needle in data]
    return hits


@pytest.mark.integration
def test_after_a_run_no_secret_is_anywhere(harness, ssh_servers, tmp_path):
    """Local + remote (hybrid) with a password, an encrypted key's passphrase and a shared
    storage key: scan Airflow's home (task and component logs, the metadata database with its
    XComs and rendered fields), the experiment store, the trials' folders and the API's XComs and
    rendered fields for every secret value."""
    from tests.helpers.airflow import PY, Harness
    from trialflow.platforms.base import experiment_id_for

    assert isinstance(harness, Harness)
    a, _ = ssh_servers
    values = {"password": _value("password"), "passphrase": _value("passphrase"), "account_key": _value("key")}
    key = tmp_path / "encrypted_key"
    key.write_bytes(a.client_key.read_bytes())
    key.chmod(0o600)
    subprocess.run(
        ["ssh-keygen", "-q", "-p", "-P", "", "-N", values["passphrase"], "-f", str(key)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    mount = tmp_path / "blob"
    mount.mkdir()
    config = f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialConcurrency: 2
maxTrialNumber: 4
tuner: {{name: Random}}
sharedStorage: {{storageType: AzureBlob, localMountPoint: {mount}, remoteMountPoint: /mnt/blob,
                localMounted: nomount, storageAccountName: acct, containerName: c,
                storageAccountKey: "{values["account_key"]}"}}
trainingService:
  - {{platform: local, trialCommand: {PY} t.py}}
  - platform: remote
    trialCommand: python3 t.py
    machineList:
      - {{host: 127.0.0.1, port: {a.port}, user: {a.user}, sshKeyFile: {key}, password: "{values["password"]}",
          sshPassphrase: "{values["passphrase"]}", hostKey: '{a.host_key_line}', pythonPath: /usr/bin}}
"""
    dag_id, folder = harness.experiment("secrets", config, {"t.py": TRIAL})
    run_id, state = harness.run(dag_id)
    assert state == "success"
    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED"] * 4
    # both platforms ran with the secrets (how many each is hybrid placement's choice: the one
    # with the fewest active trials, so local trials, which end sooner, may take three)
    platforms = {harness.xcom(dag_id, run_id, "trial", i)["platform"] for i in range(4)}
    assert platforms == {"local", "remote"}
    api = [harness.xcom(dag_id, run_id, "trial", i) for i in range(4)]
    api += [harness.xcom(dag_id, run_id, "end_experiment"), harness.xcom(dag_id, run_id, "start_experiment")]
    api += [
        harness.airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/trial/{i}").json() for i in range(4)
    ]
    # the experiment pages' data, as the browser gets it
    import httpx

    passwords = json.loads((harness.airflow.home / "passwords.json").read_text())
    token = httpx.post(
        f"{harness.airflow.base_url}/auth/token",
        timeout=10,
        json={"username": "trialflow", "password": passwords["trialflow"]},
    ).json()["access_token"]
    experiment = experiment_id_for(dag_id, run_id)
    for path in (
        "experiments",
        f"experiments/{experiment}",
        f"experiments/{experiment}/trials",
        f"experiments/{experiment}/chart",
        f"experiments/{experiment}/trials/0",
        f"experiments/{experiment}/trials/2",
        f"experiments/{experiment}/export.csv",
        f"experiments/{experiment}/export.json",
    ):
        response = httpx.get(
            f"{harness.airflow.base_url}/trialflow/api/{path}", timeout=30, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 200, path
        api.append(response.text)
    api_text = json.dumps(api)
    assert not [k for k, v in values.items() if v in api_text], "a secret in XComs, rendered fields or pages"
    experiment_id = experiment_id_for(dag_id, run_id)
    hits = _scan(harness.root, values, skip={folder / "config.yml"})
    hits += _scan(a.home / "trialflow-experiments" / experiment_id, values, set())
    assert not hits, hits
    assert (harness.root / "experiments.db").exists() and any((harness.root / "home" / "logs").rglob("*.log"))


INPUT_TRIAL = """\
import json, os
import trialflow.trial as trial

p = trial.get_next_parameter()
given = {k: v for k, v in os.environ.items() if k.startswith("TRIALFLOW_INPUT_")}
json.dump(given, open(os.path.join(os.environ["NNI_SYS_DIR"], "given.json"), "w"))
print("connecting with", os.environ["TRIALFLOW_INPUT_PW"], "and", os.environ["TRIALFLOW_INPUT_TOK"])
trial.report_final_result(p["x"])
"""


@pytest.mark.integration
def test_secrets_given_as_inputs_reach_the_trial_and_no_reader(harness):
    """Issue 46, 4 and 5: a connection's password and a sensitive Variable rendered into a run's
    inputs: Airflow's Rendered Template masks them, and so must trialflow's REST API and pages
    (the run's inputs, the trial's log tail); the trial gets the real values."""
    import httpx

    from tests.helpers.airflow import INPUT_DB_PASSWORD, INPUT_TOKEN, PY
    from trialflow.platforms.base import experiment_id_for

    config = f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {PY} t.py
trialConcurrency: 1
maxTrialNumber: 1
tuner: {{name: Random}}
trainingService: {{platform: local}}
"""
    inputs = '{"pw": "{{ conn.tf_input_db.password }}", "tok": "{{ var.value.secret_token }}", "data": "/d"}'
    dag_id, _ = harness.experiment("secret_inputs", config, {"t.py": INPUT_TRIAL}, dag_args=f"inputs={inputs}")
    run_id, state = harness.run(dag_id)
    assert state == "success"
    experiment = experiment_id_for(dag_id, run_id)
    [trial] = harness.store.trial_rows(experiment)
    folder = Path(harness.store.trial(harness.store.find_trial_id(experiment, 0)).handle["trial_dir"])
    given = json.loads((folder / "given.json").read_text())
    assert given["TRIALFLOW_INPUT_PW"] == INPUT_DB_PASSWORD and given["TRIALFLOW_INPUT_TOK"] == INPUT_TOKEN
    passwords = json.loads((harness.airflow.home / "passwords.json").read_text())
    said = []
    for user in ("trialflow", "limited"):
        token = httpx.post(
            f"{harness.airflow.base_url}/auth/token",
            timeout=10,
            json={"username": user, "password": passwords[user]},
        ).json()["access_token"]
        for path in (f"experiments/{experiment}", f"experiments/{experiment}/trials/0", "experiments"):
            response = httpx.get(
                f"{harness.airflow.base_url}/trialflow/api/{path}",
                timeout=30,
                headers={"Authorization": f"Bearer {token}"},
            )
            assert response.status_code == 200, (user, path, response.text[:300])
            said.append(response.text)
        summary = json.loads(said[-3])
        assert summary["runs"][0]["inputs"] == {"pw": "***", "tok": "***", "data": "/d"}
        assert sorted(summary["runs"][0]["secret_inputs"]) == ["pw", "tok"]
        log = "".join(part["text"] for part in json.loads(said[-2])["log"])
        assert "connecting with *** and ***" in log, log
    text = "\n".join(said)
    assert INPUT_DB_PASSWORD not in text and INPUT_TOKEN not in text
    rendered = harness.airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/start_experiment").json()[
        "rendered_fields"
    ]
    assert INPUT_DB_PASSWORD not in json.dumps(rendered)  # Airflow's own view, as before
