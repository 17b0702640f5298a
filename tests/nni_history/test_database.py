"""Reading what the real NNI 3.0 left on disk (issue 40, 1): an experiment run here by nnictl."""

from __future__ import annotations

import json

import pytest

from trialflow.nni_history import read_experiment

pytestmark = pytest.mark.nni


def test_every_trial_comes_with_its_parameters_and_results(nni_folder):
    experiment = read_experiment(nni_folder)
    assert experiment.experiment_id == nni_folder.name
    assert experiment.config["searchSpace"]["k"] == {"_type": "choice", "_value": ["a", "b"]}
    assert experiment.config["tuner"]["name"] == "TPE"
    assert experiment.started and experiment.ended and experiment.started <= experiment.ended
    assert len(experiment.trials) == 4
    assert [t.sequence_id for t in experiment.trials] == [0, 1, 2, 3]
    assert {t.parameter_id for t in experiment.trials} == {0, 1, 2, 3}
    for trial in experiment.trials:
        x = trial.parameters["x"]
        assert trial.status == "SUCCEEDED" and trial.started <= trial.ended
        # the trial reports x * i and 10 * x: its results are paired with the parameters that
        # made them (NNI's local mode has handed the first two trials each other's parameter ids)
        assert trial.intermediate == pytest.approx([0.0, x, 2 * x])
        assert trial.final == pytest.approx({"default": 10 * x, "loss": 1 - x})
        assert trial.parameter_source == "algorithm"


def test_the_database_is_read_without_changing_it(nni_folder):
    database = nni_folder / "db" / "nni.sqlite"
    before = database.read_bytes()
    read_experiment(nni_folder)
    assert database.read_bytes() == before


def test_results_belong_to_the_parameter_set_the_trial_reported_for(tmp_path):
    """What NNI 3.0's local mode did here: job T1's event says parameter 0, its results say 1
    (and T2 the other way round). The pairs are the ones the trials reported; the jobs whose
    event said otherwise are counted. Without NNI: its tables as NNI writes them."""
    from tests.security.test_nni_databases import database

    def running(at: int, job: str, pid: int, x: float) -> tuple:
        return (at, job, "RUNNING", json.dumps({"parameter_id": pid, "parameters": {"x": x}}), "/l", pid, None, "e")

    def final(at: int, job: str, pid: int, value: float) -> tuple:
        return (at, job, str(pid), "FINAL", 0, json.dumps(json.dumps(value)))

    rows = {
        "TrialJobEvent": [running(4000, "T2", 1, 0.25), (5000, "T2", "SUCCEEDED", None, "/l", 1, None, "e")],
        # the good trial T1 (parameter 0, x=0.5) reports under parameter 1; T2 under parameter 0
        "MetricData": [final(4500, "T2", 0, 5.0)],
    }
    folder = database(tmp_path, rows=rows)
    import sqlite3

    conn = sqlite3.connect(folder / "db" / "nni.sqlite")
    conn.execute("UPDATE MetricData SET parameterId = '1', data = ? WHERE trialJobId = 'T1'", (json.dumps("2.5"),))
    conn.commit()
    conn.close()
    experiment = read_experiment(folder)
    by_job = {t.trial_job_id: t for t in experiment.trials}
    assert (by_job["T1"].parameters, by_job["T1"].final, by_job["T1"].event_parameter_id) == ({"x": 0.25}, 2.5, 0)
    assert (by_job["T2"].parameters, by_job["T2"].final, by_job["T2"].event_parameter_id) == ({"x": 0.5}, 5.0, 1)
    assert experiment.swapped == 2
