"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

DISTRIBUTION = "airflow-provider-trialflow"


def get_provider_info() -> dict[str, Any]:
    try:
        versions = [version(DISTRIBUTION)]
    except PackageNotFoundError:  # running from a source tree
        versions = []
    return {
        "package-name": DISTRIBUTION,
        "name": "trialflow",
        "description": "Run NNI hyperparameter-tuning experiments (v1/v2 configs, NNI trial code) as Airflow DAGs.",
        "versions": versions,
        "integrations": [
            {
                "integration-name": "trialflow",
                "external-doc-url": "https://pypi.org/project/airflow-provider-trialflow/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "trialflow",
                "python-modules": ["trialflow.operators.trial", "trialflow.operators.experiment"],
            }
        ],
        "sensors": [{"integration-name": "trialflow", "python-modules": ["trialflow.sensors.trial"]}],
        "hooks": [{"integration-name": "trialflow", "python-modules": ["trialflow.hooks.experiment_store"]}],
        "triggers": [
            {
                "integration-name": "trialflow",
                "python-modules": [
                    "trialflow.triggers.trial",
                    "trialflow.triggers.watch",
                    "trialflow.triggers.tracking",
                ],
            }
        ],
        "config": {
            "trialflow": {
                "description": "trialflow's settings.",
                "options": {
                    "preload_core": {
                        "description": (
                            "Import trialflow's core (Optuna, the experiment store, the config models) in every "
                            "Airflow component as it starts, so the task processes forked from them inherit it "
                            "instead of importing it per trial task. Needs [core] lazy_load_plugins = False. "
                            "`trialflow run` turns it on."
                        ),
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                    "preload_tuners": {
                        "description": (
                            "With preload_core: tuners whose libraries every Airflow component imports as "
                            "it starts, comma-separated. GP: scikit-learn's Gaussian process (0.6-0.9 s and "
                            "+75 MB resident per component; otherwise paid by each GP trial task's ask)."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "GP",
                        "default": "",
                    },
                    "local_queue": {
                        "description": (
                            "The queue, served by one host, that experiments on the local platform (or any "
                            "platform whose entry says host_bound) send every task to under a multi-host "
                            "executor (CeleryExecutor, KubernetesExecutor, EdgeExecutor): their trials are "
                            "processes of that host. experiment_dag(..., local_queue=...) or a DAG's "
                            "default_args queue take precedence; without any, such an experiment is refused "
                            "when its DAG is parsed. Not needed under the LocalExecutor."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "trialflow-host-a",
                        "default": None,
                    },
                },
            }
        },
        "connection-types": [
            {
                "connection-type": "trialflow",
                "hook-class-name": "trialflow.hooks.experiment_store.ExperimentStoreHook",
                "hook-name": "trialflow experiment store",
                "conn-fields": {
                    "storage_url": {"label": "Storage URL (no password)", "schema": {"type": ["string", "null"]}},
                    "dialect": {
                        "label": "SQLAlchemy dialect (with host/login/password)",
                        "schema": {"type": ["string", "null"]},
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["extra"],
                    "relabeling": {"schema": "Database"},
                    "placeholders": {
                        "storage_url": "sqlite:////var/lib/trialflow/experiments.db",
                        "dialect": "postgresql",
                    },
                },
            }
        ],
    }
