"""A real MLflow tracking server for the tracking tests: ``mlflow server`` (the dev group's
MLflow) with a SQLite backend and its artifacts served from a local folder, on 127.0.0.1. The
tests read what arrived through MLflow's own client, and stop and start the server to play an
outage; the session's fixture stops it at the end."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Seconds the server may take to answer its health check (about 10 here).
START_TIMEOUT = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The session server's port, chosen when the tests start, so the session's Airflow (started
#: apart, tests/helpers/airflow.py) knows its connection from the first: ``trialflow_mlflow``,
#: with a login and a password (MLflow without auth ignores them; they must never reach it as
#: data: a tag, a parameter, a page).
SESSION_PORT = _free_port()
CONN_ID = "trialflow_mlflow"
PASSWORD = f"mlflow-pw-{secrets.token_hex(6)}"


def connection_env(port: int = SESSION_PORT) -> dict[str, str]:
    """The Airflow connection of the session's server, as an environment variable."""
    conn = {"conn_type": "http", "host": "127.0.0.1", "port": port, "login": "tracker-login", "password": PASSWORD}
    return {f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(conn)}


class MlflowServer:
    """One server; stop() and start() again keep its database and port (an outage)."""

    def __init__(self, root: Path, port: int | None = None):
        self.root = root
        self.port = port or _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "server.log", "ab") as log:  # the server keeps its own copy of the descriptor
            self.process = self._spawn(log)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer in {START_TIMEOUT:.0f} s")

    def _spawn(self, log) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                f"sqlite:///{self.root / 'mlflow.db'}",
                "--artifacts-destination",
                str(self.root / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # Job execution (MLflow's GenAI evaluation jobs, nothing trialflow sends) starts eight
            # huey consumers beside the server: 0.4 % of a core each, idle, for the session, on
            # every xdist worker (measured 2026-12-06). The tracking server itself is unchanged.
            env={**os.environ, "MLFLOW_TRACKING_URI": "", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def client(self):  # -> mlflow.MlflowClient
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.url, registry_uri=self.url)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory) -> Iterator[MlflowServer]:
    """The session's MLflow server (each test uses an MLflow experiment of its own)."""
    pytest.importorskip("mlflow", reason="the dev group's mlflow runs the tracking server")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"), SESSION_PORT)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def tracked_runs(server: MlflowServer, name: str) -> tuple[Any, list[Any]]:
    """MLflow experiment ``name``'s parent run and its nested runs (by trial index), read
    through MLflow's own client."""
    client = server.client()
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None, f"no MLflow experiment {name!r}"
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [r.data.tags for r in parents]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} <= {parents[0].info.run_id}
    return parents[0], sorted(children, key=lambda r: int(r.data.tags["trialflow.trial_index"]))


def steps(server: MlflowServer, run: Any, key: str = "intermediate") -> list[tuple[int, float]]:
    """A run's metric ``key``, every step, in step order."""
    history = server.client().get_metric_history(run.info.run_id, key)
    return sorted((m.step, m.value) for m in history)
