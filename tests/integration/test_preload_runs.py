"""Under the real scheduler (LocalExecutor, as `trialflow run` configures it), a task process
starts with trialflow's core already imported: it was forked from a process that loaded the
plugin (trialflow.ui.plugin.preload_core)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

DAG = """\
# airflow DAG: imports nothing of trialflow itself
import sys
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator

PRELOADED = ("optuna", "trialflow.lifecycle.trial_lifecycle", "trialflow.store.experiment_store")

def modules():
    return {name: name in sys.modules for name in PRELOADED}

with DAG("{DAG_ID}", schedule=None):
    PythonOperator(task_id="probe", python_callable=modules)
"""


def test_a_task_process_inherits_the_preloaded_core(harness):
    dag_id, _ = harness.experiment("preload", "unused: true\n", dag_source=DAG)
    run_id, state = harness.run(dag_id, timeout=120)
    assert state == "success"
    assert harness.xcom(dag_id, run_id, "probe") == {
        "optuna": True,
        "trialflow.lifecycle.trial_lifecycle": True,
        "trialflow.store.experiment_store": True,
    }
