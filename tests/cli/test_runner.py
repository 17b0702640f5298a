"""`trialflow run`'s home, without starting Airflow."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trialflow.cli.runner import keep_out_of_dag_folders


@pytest.mark.parametrize("syntax", ["glob", "regexp"])
def test_a_run_home_never_breaks_an_airflow_that_scans_the_folder_it_sits_in(tmp_path: Path, syntax: str):
    """Issue 36 (3): after `make demo`, an Airflow pointed at dags/ crashed its dag-processor:
    "Detected recursive loop" on the home's log folder's `latest` symlink. The home's
    .airflowignore keeps every file of it out of the scan, in both ignore syntaxes."""
    from airflow._shared.module_loading.file_discovery import find_path_from_directory

    dags = tmp_path / "dags"
    home = dags / "experiments" / "digits" / ".trialflow"
    logs = home / "airflow" / "logs" / "dag_processor" / "2026-11-26"
    logs.mkdir(parents=True)
    os.symlink(logs.parent, logs.parent / "latest")  # Airflow's own link: a loop when followed
    (home / "dags").mkdir()
    (home / "dags" / "experiment.py").write_text("# airflow DAG\nfrom trialflow.dag import experiment_dag\n")
    (dags / "digits.py").write_text("# airflow DAG\nfrom trialflow.dag import experiment_dag\n")
    with pytest.raises(RuntimeError, match="recursive loop"):
        list(find_path_from_directory(dags, ".airflowignore", syntax))
    keep_out_of_dag_folders(home)
    found = list(find_path_from_directory(dags, ".airflowignore", syntax))
    assert found == [str(dags / "digits.py")]


def test_a_run_held_by_its_mlflow_step_says_it_waits_and_for_how_long():
    """issue 64, 2: after "12/12 done" `trialflow run` printed nothing while log_to_mlflow waited."""
    from trialflow.cli.runner import tracking_wait_line
    from trialflow.limits import TRACKING_GIVE_UP_SECONDS

    tis = [{"task_id": "trial", "map_index": 0, "state": "success"}, {"task_id": "log_to_mlflow", "state": "deferred"}]
    line = tracking_wait_line(tis, "e03394bb")
    assert line is not None and "Waiting for MLflow" in line
    assert f"at most {TRACKING_GIVE_UP_SECONDS / 60:.0f} min" in line and "trialflow sync-mlflow e03394bb" in line
    assert tracking_wait_line([{"task_id": "tune.log_to_mlflow", "state": "deferred"}], "e") is not None  # in a group
    for state in ("running", "success", "skipped", None):
        assert tracking_wait_line([{"task_id": "log_to_mlflow", "state": state}], "e") is None
