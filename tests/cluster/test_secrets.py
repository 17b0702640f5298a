"""The hardening suite's secret scan on the multi-host deployment (issue 16, part 3).

A remote experiment with a password and an encrypted key's passphrase runs through Celery,
its trials deferred to the triggerer. Redis (broker: every Celery message passes through it)
is snapshotted while it runs; afterwards the deployment's files (component, worker and
trigger logs), both PostgreSQL databases (Airflow's metadata with XComs and rendered fields,
the experiment store) as pg_dump writes them, the Redis snapshots and the API's XComs and
rendered fields are searched for the secret values. And nothing the deployment started
listens on an address other than loopback.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import subprocess
import threading
import time

import psutil
import pytest

from tests.helpers.deployment import Deployment
from tests.security.test_secrets import _scan

pytestmark = pytest.mark.integration

TRIAL = """\
import time
from trialflow import trial
x = trial.get_next_parameter()["x"]
trial.report_intermediate_result(x)
time.sleep(4)
trial.report_final_result(x)
"""


def redis_snapshot(port: int) -> str:
    """Every key of every database with its value, whatever its type (Celery's queues are
    lists, its unacked messages a hash), as text."""
    import redis

    out = []
    for db in range(16):
        client = redis.Redis(host="127.0.0.1", port=port, db=db, socket_timeout=5)
        for key in client.scan_iter(count=1000):
            kind = client.type(key).decode()
            if kind == "string":
                value = client.get(key)
            elif kind == "list":
                value = client.lrange(key, 0, -1)
            elif kind == "hash":
                value = client.hgetall(key)
            elif kind == "set":
                value = client.smembers(key)
            elif kind == "zset":
                value = client.zrange(key, 0, -1)
            else:
                value = kind
            out.append(f"{db} {key!r} {value!r}")
    return "\n".join(out)


def dump_database(postgres_server, name: str) -> str:
    done = subprocess.run(
        [
            str(postgres_server.bin_dir / "pg_dump"),
            "--data-only",
            "-h",
            "127.0.0.1",
            "-p",
            str(postgres_server.port),
            "-U",
            "trialflow",
            name,
        ],
        env={"PGPASSWORD": postgres_server.password, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "COPY public." in done.stdout  # a dump with its tables, not an empty one
    return done.stdout


def test_no_secret_anywhere_in_the_deployment(cluster: Deployment, postgres_server, ssh_machine, tmp_path):
    server = ssh_machine
    values = {"password": f"password-{secrets.token_hex(6)}", "passphrase": f"passphrase-{secrets.token_hex(6)}"}
    key = tmp_path / "encrypted_key"
    key.write_bytes(server.client_key.read_bytes())
    key.chmod(0o600)
    subprocess.run(
        ["ssh-keygen", "-q", "-p", "-P", "", "-N", values["passphrase"], "-f", str(key)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    folder = cluster.root / "experiments" / "secrets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "t.py").write_text(TRIAL)
    (folder / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\ntrialCodeDirectory: .\n"
        "trialConcurrency: 2\nmaxTrialNumber: 4\ntuner: {name: Random}\n"
        "trainingService:\n  platform: remote\n  machineList:\n"
        f"    - {{host: 127.0.0.1, port: {server.port}, user: {server.user}, sshKeyFile: {key}, "
        f'password: "{values["password"]}", sshPassphrase: "{values["passphrase"]}", '
        f"hostKey: '{server.host_key_line}', pythonPath: /usr/bin}}\n"
    )
    dag_id = "cluster_secrets"
    dag_file = cluster.airflow.dags_folder / "secrets.py"
    dag_file.write_text(
        "# airflow DAG\nfrom trialflow.dag import experiment_dag\n"
        f"dag = experiment_dag({str(folder / 'config.yml')!r}, dag_id={dag_id!r}, defer_after=1, poll_interval=0.3)\n"
    )
    cluster.airflow.wait_for_dag(dag_id, dag_file, timeout=120)

    snapshots: list[str] = []
    done = threading.Event()

    def watch_redis() -> None:
        while not done.is_set():
            snapshots.append(redis_snapshot(cluster.redis_port))
            done.wait(0.3)

    watcher = threading.Thread(target=watch_redis, daemon=True)
    watcher.start()
    try:
        run_id = cluster.airflow.trigger(dag_id)
        deadline = time.monotonic() + 300
        while (state := cluster.airflow.dag_run_state(dag_id, run_id)) not in ("success", "failed"):
            assert time.monotonic() < deadline, "the run did not end"
            time.sleep(0.5)
    finally:
        done.set()
        watcher.join(timeout=30)
    assert state == "success"
    deferred = [ti for ti in cluster.airflow.task_instances(dag_id, run_id) if ti["task_id"] == "trial"]
    assert len(deferred) == 4 and all(ti["state"] == "success" for ti in deferred)
    assert any("celery" in s for s in snapshots), "no Celery message was seen in Redis"

    api = [
        cluster.airflow.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/trial/{i}",
        ).json()
        for i in range(4)
    ]
    api += [
        cluster.airflow.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/trial/xcomEntries/return_value",
            params={"map_index": i},
        ).json()
        for i in range(4)
    ]
    texts = {
        "API (task instances, rendered fields, XComs)": json.dumps(api),
        "Redis (Celery messages), snapshots during the run": "\n".join(snapshots),
        "PostgreSQL: Airflow's metadata database": dump_database(postgres_server, "airflow_cluster"),
        "PostgreSQL: the experiment store": dump_database(postgres_server, "experiments_cluster"),
    }
    hits = [f"{where}: {name}" for where, text in texts.items() for name, value in values.items() if value in text]
    hits += _scan(cluster.root, values, skip={folder / "config.yml"})
    assert not hits, hits
    logs = list((cluster.airflow.home / "logs").rglob("*"))
    assert any("trigger" in p.name for p in logs), "no trigger log was written: nothing was deferred"
    assert any(p.name.startswith("worker-") for p in logs)


def test_nothing_listens_beyond_loopback(cluster: Deployment):
    """Every listening socket of every process the deployment started (Airflow's components,
    both workers and what they started, Redis) is bound to a loopback address."""
    roots = [*cluster.airflow.processes.values(), *(w.process for w in cluster.workers.values())]
    assert cluster.redis is not None
    roots.append(cluster.redis)
    pids: set[int] = set()
    for process in roots:
        try:
            parent = psutil.Process(process.pid)
            pids |= {parent.pid, *(child.pid for child in parent.children(recursive=True))}
        except psutil.NoSuchProcess:
            continue
    listening = [
        (conn.pid, conn.laddr)
        for conn in psutil.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids
    ]
    assert listening, "found no listening socket at all (the api-server and Redis listen)"
    exposed = [(pid, addr) for pid, addr in listening if not ipaddress.ip_address(addr.ip).is_loopback]
    assert not exposed, exposed
