"""The private Airflow the benchmarks run DAGs on: its own home, DAG folder and experiment store."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trialflow.cli.embedded import EmbeddedAirflow


def private_airflow(root: Path, parallelism: int, store_url: str, **extra_env: str) -> EmbeddedAirflow:
    """An EmbeddedAirflow under ``root`` (LocalExecutor, SQLite) whose trialflow connection is
    ``store_url`` and whose experiments work under ``root/runs``; the DAG folder exists."""
    airflow = EmbeddedAirflow(
        home=root / "airflow",
        dags_folder=root / "dags",
        parallelism=parallelism,
        extra_env={
            "AIRFLOW_CONN_TRIALFLOW_DEFAULT": json.dumps(
                {"conn_type": "trialflow", "extra": {"storage_url": store_url}}
            ),
            "TRIALFLOW_WORKDIR": str(root / "runs"),
            **extra_env,
        },
    )
    airflow.dags_folder.mkdir(parents=True, exist_ok=True)
    return airflow


def experiment_folder(root: Path, trial: str, config: str) -> Path:
    """``root/experiment`` holding the trial script (trial.py) and the config; the config's path."""
    work = root / "experiment"
    work.mkdir(parents=True)
    (work / "trial.py").write_text(trial)
    (work / "config.yml").write_text(config)
    return work / "config.yml"


def write_dag(dags_folder: Path, dag_id: str, config: Path, **arguments: object) -> Path:
    """A DAG file of one experiment_dag(config, dag_id=..., **arguments); its path."""
    extra = "".join(f", {name}={value!r}" for name, value in arguments.items())
    dag_file = dags_folder / f"{dag_id}.py"
    dag_file.write_text(
        "# airflow DAG\nfrom trialflow.dag import experiment_dag\n"
        f"dag = experiment_dag({str(config)!r}, dag_id={dag_id!r}{extra})\n"
    )
    return dag_file


@dataclass
class DeferredRun:
    """One run of a DAG whose trials are deferred, as the benches measure it."""

    run_id: str
    state: str
    wall: float
    trials: list[dict[str, Any]]  # the trial task instances
    triggerer: TreeSampler


def run_to_end(airflow: EmbeddedAirflow, dag_id: str, dag_file: Path, timeout: float) -> DeferredRun:
    """Trigger the DAG and wait for its run to end, sampling the triggerer's CPU and memory."""
    airflow.wait_for_dag(dag_id, dag_file, timeout=180)
    triggerer = TreeSampler(airflow.processes["triggerer"].pid)
    started = time.monotonic()
    run_id = airflow.trigger(dag_id)
    while airflow.dag_run_state(dag_id, run_id) not in ("success", "failed"):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"the benchmark DAG {dag_id} did not finish in {timeout:.0f} s")
        triggerer.sample()
        time.sleep(2)
    wall = time.monotonic() - started
    triggerer.sample()
    state = airflow.dag_run_state(dag_id, run_id)
    tis = [ti for ti in airflow.task_instances(dag_id, run_id) if ti["task_id"] == "trial"]
    return DeferredRun(run_id, state, wall, tis, triggerer)


class TreeSampler:
    """CPU seconds and resident memory of a process and its children (Airflow 3's triggerer runs
    its triggers in a child process), sampled by the caller."""

    def __init__(self, pid: int):
        import psutil

        self._root = psutil.Process(pid)
        self.first_cpu = self.cpu = 0.0
        self.first_rss = self.peak_rss = 0
        self.sample()
        self.first_cpu, self.first_rss = self.cpu, self.peak_rss

    def sample(self) -> None:
        import psutil

        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        cpu, rss = 0.0, 0
        for proc in procs:
            try:
                times = proc.cpu_times()
                cpu += times.user + times.system
                rss += proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        self.cpu = max(self.cpu, cpu)
        self.peak_rss = max(self.peak_rss, rss)
