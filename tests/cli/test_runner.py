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
