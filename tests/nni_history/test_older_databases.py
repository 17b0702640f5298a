"""Databases of NNI versions before 3.0 (issue 40, 1): the tables as NNI's own DDL made them
(nni_manager/core/sqlDatabase.ts), read by the same reader."""

from __future__ import annotations

import json

import pytest

from trialflow.nni_history import NniHistoryError, read_experiment


def older_database(tmp_path, event_columns: str, event_row: tuple):
    """An experiment folder whose database has the tables as an earlier NNI's DDL made them
    (nni_manager/core/sqlDatabase.ts of NNI 1.x: TrialJobEvent without message or environmentId)."""
    import sqlite3

    folder = tmp_path / "old12345"
    (folder / "db").mkdir(parents=True)
    conn = sqlite3.connect(folder / "db" / "nni.sqlite")
    conn.execute(
        "CREATE TABLE ExperimentProfile (params text, id text, execDuration integer, startTime integer, "
        "endTime integer, logDir text, nextSequenceId integer, revision integer)"
    )
    conn.execute(f"CREATE TABLE TrialJobEvent ({event_columns})")
    conn.execute(
        "CREATE TABLE MetricData (timestamp integer, trialJobId text, parameterId text, type text, "
        "sequence integer, data text)"
    )
    config = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "tuner": {"builtinTunerName": "TPE"}}
    conn.execute(
        "INSERT INTO ExperimentProfile VALUES (?, 'old12345', 5, 1000, 9000, '/x', 1, 1)", (json.dumps(config),)
    )
    conn.execute(f"INSERT INTO TrialJobEvent VALUES ({', '.join('?' * len(event_row))})", event_row)
    conn.execute("INSERT INTO MetricData VALUES (2500, 'T1', '0', 'FINAL', 0, ?)", (json.dumps(json.dumps(0.7)),))
    conn.commit()
    conn.close()
    return folder


def test_an_earlier_nnis_database_without_event_messages_reads(tmp_path):
    running = json.dumps({"parameter_id": 0, "parameter_source": "algorithm", "parameters": {"x": 0.7}})
    folder = older_database(
        tmp_path,
        "timestamp integer, trialJobId text, event text, data text, logPath text, sequenceId integer",
        (2000, "T1", "RUNNING", running, "/l", 0),
    )
    (trial,) = read_experiment(folder).trials
    assert (trial.parameters, trial.final, trial.status, trial.message) == ({"x": 0.7}, 0.7, "RUNNING", None)


def test_a_database_without_a_column_every_nni_wrote_is_named(tmp_path):
    folder = older_database(tmp_path, "timestamp integer, trialJobId text, event text", (2000, "T1", "RUNNING"))
    with pytest.raises(NniHistoryError, match="table TrialJobEvent has no column data"):
        read_experiment(folder)


def test_an_nni_1x_config_imports_in_v2s_shape(tmp_path, store):
    from trialflow import queries
    from trialflow.seeding.nni_import import import_experiment

    running = json.dumps({"parameter_id": 0, "parameters": {"x": 0.7}})
    folder = older_database(
        tmp_path,
        "timestamp integer, trialJobId text, event text, data text, logPath text, sequenceId integer",
        (2000, "T1", "SUCCEEDED", running, "/l", 0),
    )
    import sqlite3

    conn = sqlite3.connect(folder / "db" / "nni.sqlite")  # NNI 1.x: the space as JSON text, v1 names
    config = {
        "searchSpace": json.dumps({"x": {"_type": "uniform", "_value": [0, 1]}}),
        "tuner": {"builtinTunerName": "TPE", "classArgs": {"optimize_mode": "minimize"}},
    }
    conn.execute("UPDATE ExperimentProfile SET params = ?", (json.dumps(config),))
    conn.commit()
    conn.close()
    done = import_experiment(store, read_experiment(folder), "dag_a")
    summary = queries.experiment_summary(store.engine, done.experiment_id)
    assert summary["optimize_mode"] == "minimize" and summary["config"]["tuner"]["name"] == "TPE"
    assert summary["config"]["searchSpace"] == {"x": {"_type": "uniform", "_value": [0, 1]}}
    assert summary["counts"] == {"SUCCEEDED": 1}
