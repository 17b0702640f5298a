"""A real Airflow (scheduler, triggerer, dag-processor, api-server; LocalExecutor on SQLite) for
the tests: started once per test session on 127.0.0.1 and stopped by it (the ``harness`` fixture
in tests/conftest.py, shared by tests/integration, tests/security and tests/ui)."""

from __future__ import annotations

import json
import secrets
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.mlflow_server import connection_env as mlflow_connection_env
from trialflow.cli.embedded import EmbeddedAirflow
from trialflow.platforms.base import experiment_id_for
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.store.results import TrialRow

PY = sys.executable
#: Secrets the session's Airflow knows (a connection's password, a sensitive Variable), for the
#: tests of secrets that reach a run as inputs (random per session: found nowhere by chance).
INPUT_DB_PASSWORD = f"db-pw-{secrets.token_hex(6)}"
INPUT_TOKEN = f"tok-{secrets.token_hex(6)}"


@dataclass
class Harness:
    root: Path
    airflow: EmbeddedAirflow
    store_url: str
    dag_files: dict[str, Path] = field(default_factory=dict)

    @property
    def store(self) -> ExperimentStore:
        return ExperimentStore(self.store_url)

    def experiment(
        self,
        name: str,
        config: str,
        files: dict[str, str] | None = None,
        dag_source: str | None = None,
        dag_args: str = "",
    ) -> tuple[str, Path]:
        """Write an experiment folder and its DAG file; return (dag_id, folder). ``dag_args``:
        more arguments for the default DAG file's experiment_dag call (e.g. "defer_after=1")."""
        folder = self.root / "experiments" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.yml").write_text(config)
        for rel, text in (files or {}).items():
            (folder / rel).write_text(text)
        dag_id = f"it_{name}"
        source = dag_source or (
            "# airflow DAG\nfrom trialflow.dag import experiment_dag\n"
            f"dag = experiment_dag({str(folder / 'config.yml')!r}, dag_id={dag_id!r}, "
            f"poll_interval=0.3{', ' + dag_args if dag_args else ''})\n"
        )
        (self.airflow.dags_folder / f"{name}.py").write_text(
            source.replace("{DAG_ID}", dag_id).replace("{CONFIG}", str(folder / "config.yml"))
        )
        self.dag_files[dag_id] = self.airflow.dags_folder / f"{name}.py"
        return dag_id, folder

    def start(self, name: str, config: str, files: dict[str, str] | None = None, dag_args: str = "") -> tuple[str, str]:
        """Write the experiment, wait for Airflow to parse its DAG, trigger a run without waiting
        for it; return (dag_id, run_id)."""
        dag_id, _ = self.experiment(name, config, files, dag_args=dag_args)
        self.airflow.wait_for_dag(dag_id, self.dag_files[dag_id], timeout=90)
        return dag_id, self.airflow.trigger(dag_id)

    def run(self, dag_id: str, timeout: float = 300, on_tick: Any = None) -> tuple[str, str]:
        """Trigger a run and wait for it to end; return (run_id, state)."""
        self.airflow.wait_for_dag(dag_id, self.dag_files[dag_id], timeout=90)
        return self.wait(dag_id, self.airflow.trigger(dag_id), timeout, on_tick)

    def wait(self, dag_id: str, run_id: str, timeout: float = 300, on_tick: Any = None) -> tuple[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.airflow.dag_run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return run_id, state
            if on_tick:
                on_tick(run_id)
            time.sleep(0.3)
        raise TimeoutError(f"{dag_id} did not finish in {timeout} s")

    def reparse(self, dag_id: str) -> None:
        """Ask the dag-processor to parse the DAG's file now (Airflow's reparse button): the
        session's Airflow parses an unchanged file only every 10 minutes."""
        details = self.airflow.api("GET", f"/dags/{dag_id}/details")
        details.raise_for_status()
        self.airflow.api("PUT", f"/parseDagFile/{details.json()['file_token']}").raise_for_status()

    def tis(self, dag_id: str, run_id: str, task_id: str = "trial") -> list[dict[str, Any]]:
        return sorted(
            (ti for ti in self.airflow.task_instances(dag_id, run_id) if ti["task_id"] == task_id),
            key=lambda ti: ti["map_index"],
        )

    def xcom(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Any:
        response = self.airflow.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value",
            params={"map_index": map_index, "deserialize": True},
        )
        response.raise_for_status()
        value = response.json()["value"]
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except ValueError:  # a task that returned plain text
            return value

    def rows(self, dag_id: str, run_id: str) -> list[TrialRow]:
        return self.store.trial_rows(experiment_id_for(dag_id, run_id))


@contextmanager
def running_airflow(
    root: Path, parallelism: int = 8, extra_env: dict[str, str] | None = None
) -> Iterator[EmbeddedAirflow]:
    """A real Airflow (scheduler, triggerer, dag-processor, api-server) under ``root``: its DAGs
    folder, its experiment store (``root/experiments.db`` as ``trialflow_default``) and trial
    folders; healthy when yielded, every component stopped after."""
    airflow = EmbeddedAirflow(
        home=root / "home",
        dags_folder=root / "dags",
        parallelism=parallelism,
        extra_env={
            "AIRFLOW_CONN_TRIALFLOW_DEFAULT": json.dumps(
                {"conn_type": "trialflow", "extra": {"storage_url": sqlite_url(root / "experiments.db")}}
            ),
            "TRIALFLOW_WORKDIR": str(root / "work"),
            **(extra_env or {}),
        },
    )
    airflow.dags_folder.mkdir(parents=True)
    airflow.migrate()
    airflow.start()
    try:
        airflow.wait_healthy()
        yield airflow
    finally:
        airflow.stop()
        for proc in airflow.processes.values():
            assert proc.poll() is not None
        for restart in airflow.restarts:  # survived, and said in the summary, not hidden
            warnings.warn(
                f"the tests' Airflow under {root}: {restart.component} "
                + (
                    "was hung, killed"
                    if restart.last_error.startswith("hung:")
                    else f"exited with code {restart.exit_code}"
                )
                + " and was started again"
                + (f"; its last error: {restart.last_error}" if restart.last_error else ""),
                stacklevel=1,
            )


def start_harness(tmp_path_factory) -> Iterator[Harness]:
    """The session's Airflow (the ``harness`` fixture in tests/conftest.py, shared by
    tests/integration and tests/security)."""
    root = tmp_path_factory.mktemp("airflow")
    env = {
        "PYTHONPATH": str(Path(__file__).parents[1] / "integration" / "plugins"),
        # Per-DAG permissions for the experiment pages' tests; the admin user is unchanged.
        "AIRFLOW__CORE__AUTH_MANAGER": "trialflow_test_auth.OneDagAuthManager",
        # limited may read (not edit) every DAG but the private ones; editor may edit them.
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "trialflow:admin,limited:viewer,editor:user",
        "AIRFLOW_CONN_TF_INPUT_DB": json.dumps(
            {"conn_type": "generic", "host": "127.0.0.1", "login": "u", "password": INPUT_DB_PASSWORD}
        ),
        "AIRFLOW_VAR_SECRET_TOKEN": INPUT_TOKEN,
        **mlflow_connection_env(),  # the session's MLflow server (tests/helpers/mlflow_server.py)
        # Every test adds DAG files here (about 100 by the end): parsed every 5 s, as a
        # `trialflow run` home's few are, they kept the dag-processor at a quarter of a core
        # (measured 2026-12-02); every 30 s (Airflow's default), still at 40 % of a core by the
        # pages' tests, half of it in the parses' own processes (measured 2026-12-03). A new or
        # changed file is still parsed at once (Airflow's modified_time order), a changed limit
        # asks for its parse and a changed config is waited for with wait_for_fresh_dag (which
        # asks too): nothing of a test waits for the periodic parse.
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
    }
    with running_airflow(root, 8, env) as airflow:
        yield Harness(root, airflow, sqlite_url(root / "experiments.db"))
