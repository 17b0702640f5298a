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


def test_the_triggerer_built_its_execution_api_as_it_started(harness):
    """trialflow.from_airflow.triggerer_api, under the real triggerer: its supervisor built the
    in-process execution API in the plugin's thread, before any trigger asked (at a trigger's
    first request it would stop every trigger for seconds)."""
    log = (harness.airflow.home / "logs" / "triggerer.log").read_text(errors="replace")
    assert "the triggerer's execution API was built ahead in" in log, log[-3000:]
    assert "was not built ahead" not in log
