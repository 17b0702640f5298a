"""Local trials run with the worker's environment minus Airflow's secrets (database URL,
keys, connections, variables), adjustable with TRIALFLOW_TRIAL_ENV_DROP / _KEEP."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from trialflow.config.platforms import LocalConfig
from trialflow.platforms.base import TrialSpec
from trialflow.platforms.local import LocalPlatform
from trialflow.trial.env import inherited_env

SECRETS = {
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:db-pass-1@db/airflow",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": "cat /run/secret",
    "AIRFLOW__CORE__FERNET_KEY": "fernet-key-2",
    "AIRFLOW__API_AUTH__JWT_SECRET": "jwt-secret-3",
    "AIRFLOW__CELERY__BROKER_URL": "redis://:redis-pass-4@redis/0",
    "AIRFLOW_CONN_WAREHOUSE": "postgres://u:conn-pass-5@h/db",
    "AIRFLOW_VAR_API_TOKEN": "var-token-6",
}


def test_airflow_secrets_are_not_inherited_and_the_rest_is():
    base = {**SECRETS, "PATH": "/usr/bin", "HOME": "/root", "AIRFLOW_CTX_DAG_ID": "d", "AWS_REGION": "eu"}
    env = inherited_env(base)
    assert set(env) == {"PATH", "HOME", "AIRFLOW_CTX_DAG_ID", "AWS_REGION"}


def test_drop_and_keep_are_configurable():
    base = {
        **SECRETS,
        "AWS_SECRET_ACCESS_KEY": "aws",
        "MY_TOKEN": "t",
        "PATH": "/usr/bin",
        "TRIALFLOW_TRIAL_ENV_DROP": "AWS_*, MY_TOKEN",
        "TRIALFLOW_TRIAL_ENV_KEEP": "AIRFLOW_VAR_API_TOKEN",
    }
    env = inherited_env(base)
    assert "AWS_SECRET_ACCESS_KEY" not in env and "MY_TOKEN" not in env
    assert env["AIRFLOW_VAR_API_TOKEN"] == "var-token-6" and "AIRFLOW_CONN_WAREHOUSE" not in env


def test_a_real_local_trial_sees_none_of_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "a_dag")
    code = tmp_path / "code"
    code.mkdir()
    (code / "env.py").write_text("import json, os\njson.dump(dict(os.environ), open('../env.json', 'w'))\n")
    platform = LocalPlatform(LocalConfig(), tmp_path / "exp")
    platform.prepare_sync("eenv")
    spec = TrialSpec("eenv", "eenv-0000", 0, 0, {}, f"{sys.executable} env.py", code, env={"EXPLICIT": "yes"})
    platform.submit_sync(spec)
    dump = tmp_path / "env.json"
    for _ in range(200):
        if dump.exists() and dump.stat().st_size:
            break
        time.sleep(0.05)
    seen = json.loads(dump.read_text())
    assert not set(SECRETS) & set(seen)
    assert not [v for v in SECRETS.values() if any(v in x for x in seen.values())]
    assert (
        seen["AIRFLOW_CTX_DAG_ID"] == "a_dag" and seen["EXPLICIT"] == "yes" and seen["NNI_TRIAL_JOB_ID"] == "eenv-0000"
    )
