"""The private Airflow the benchmarks run DAGs on: its own home, DAG folder and experiment store."""

from __future__ import annotations

import json
from pathlib import Path

from trialflow.embedded import EmbeddedAirflow


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
