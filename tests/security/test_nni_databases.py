"""Hostile NNI databases for the import (issue 40, 1): each is refused whole with the file, the
table and the row named, never a traceback and never a partial experiment."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from trialflow.nni_history import NniHistoryError, read_experiment
from trialflow.nni_history.database import MAX_FIELD_CHARS

SCHEMA = (
    "CREATE TABLE ExperimentProfile (params text, id text, execDuration integer, startTime integer, "
    "endTime integer, logDir text, nextSequenceId integer, revision integer)",
    "CREATE TABLE TrialJobEvent (timestamp integer, trialJobId text, event text, data text, logPath text, "
    "sequenceId integer, message text, environmentId text)",
    "CREATE TABLE MetricData (timestamp integer, trialJobId text, parameterId text, type text, sequence integer, "
    "data text)",
)
CONFIG = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialConcurrency": 1}


def database(tmp_path: Path, *, skip: str | None = None, rows: dict[str, list[tuple]] | None = None) -> Path:
    """An NNI experiment folder whose database holds one good trial, then ``rows`` more."""
    folder = tmp_path / "abcd1234"
    (folder / "db").mkdir(parents=True)
    conn = sqlite3.connect(folder / "db" / "nni.sqlite")
    for statement in SCHEMA:
        if skip is None or skip not in statement:
            conn.execute(statement)
    good = {
        "ExperimentProfile": [(json.dumps(CONFIG), "abcd1234", 5, 1000, 9000, "/x", 1, 1)],
        "TrialJobEvent": [
            (2000, "T1", "RUNNING", json.dumps({"parameter_id": 0, "parameters": {"x": 0.5}}), "/l", 0, None, "e"),
            (3000, "T1", "SUCCEEDED", None, "/l", 0, None, "e"),
        ],
        "MetricData": [(2500, "T1", "0", "FINAL", 0, json.dumps(json.dumps(5.0)))],
    }
    for table, extra in {**{k: [] for k in good}, **(rows or {})}.items():
        if skip == table:
            continue
        for row in good[table] + extra:
            conn.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)
    conn.commit()
    conn.close()
    return folder


def test_the_good_one_reads(tmp_path):
    experiment = read_experiment(database(tmp_path))
    (trial,) = experiment.trials
    assert (trial.parameters, trial.final, trial.status) == ({"x": 0.5}, 5.0, "SUCCEEDED")


@pytest.mark.parametrize("table", ["ExperimentProfile", "TrialJobEvent", "MetricData"])
def test_a_missing_table_is_named(tmp_path, table):
    with pytest.raises(NniHistoryError, match=f"table {table} is missing"):
        read_experiment(database(tmp_path, skip=table))


def profile(params: str) -> dict[str, list[tuple]]:
    return {"ExperimentProfile": [(params, "abcd1234", 5, 1, 2, "/x", 1, 9)]}


def event(job, data=None) -> dict[str, list[tuple]]:
    return {"TrialJobEvent": [(1, job, "RUNNING", data, "/l", 1, None, "e")]}


def metric(data: str, job: str = "T1", parameter: str = "0") -> dict[str, list[tuple]]:
    return {"MetricData": [(9999, job, parameter, "FINAL", 0, data)]}


@pytest.mark.parametrize(
    "rows, words",
    [
        (profile("{not json"), "ExperimentProfile.params: not valid JSON"),
        (profile("[1, 2]"), "expected the config as a JSON object"),
        (event("T2", "{broken"), "TrialJobEvent rowid 3.data: not valid JSON"),
        (event(None), "TrialJobEvent rowid 3.trialJobId: expected text"),
        (event("T" * 100), "expected text of 1..64 characters"),
        (metric("[[["), "MetricData rowid 2.data: not valid JSON"),
        (metric(json.dumps("{bad")), "MetricData rowid 2.data (inner): not valid JSON"),
        (metric("1", job="ghost"), "trial job 'ghost' has no event"),
        (metric("1", parameter="9" * 40), "parameterId: expected a whole number"),
        (metric("1" * 5000), "not valid JSON"),  # a 5000-digit number
        (metric("[" * 100_000), "not valid JSON"),
        (metric("x" * (MAX_FIELD_CHARS + 1)), "more than"),
        (event("T3", json.dumps({"parameter_id": True, "parameters": {}})), "expected a whole number, got a boolean"),
    ],
)
def test_hostile_rows_are_refused_by_table_and_row(tmp_path, rows, words):
    started = time.perf_counter()
    with pytest.raises(NniHistoryError) as refused:
        read_experiment(database(tmp_path, rows=rows))
    assert words in str(refused.value), str(refused.value)
    assert str(tmp_path) in str(refused.value)
    assert len(str(refused.value)) < 600  # says where, never quotes the field
    assert time.perf_counter() - started < 2


def test_numbers_that_are_not_finite_are_kept_as_they_were_reported(tmp_path):
    rows = {
        "MetricData": [
            (2600, "T1", "0", "PERIODICAL", 1, json.dumps("NaN")),
            (2700, "T1", "0", "PERIODICAL", 2, json.dumps("Infinity")),
        ]
    }
    (trial,) = read_experiment(database(tmp_path, rows=rows)).trials
    assert trial.final == 5.0 and len(trial.intermediate) == 2 and trial.intermediate[1] == float("inf")


def test_not_a_database_a_symlink_and_an_empty_profile(tmp_path):
    folder = tmp_path / "e1"
    (folder / "db").mkdir(parents=True)
    (folder / "db" / "nni.sqlite").write_bytes(b"not sqlite at all" * 10)
    with pytest.raises(NniHistoryError, match="not a readable NNI database"):
        read_experiment(folder)
    other = tmp_path / "e2"
    (other / "db").mkdir(parents=True)
    os.symlink(database(tmp_path / "real") / "db" / "nni.sqlite", other / "db" / "nni.sqlite")
    with pytest.raises(NniHistoryError, match="no NNI database here"):
        read_experiment(other)  # a link to a database elsewhere is not followed
    with pytest.raises(NniHistoryError, match="no NNI database here"):
        read_experiment(tmp_path / "nothing")
    empty = database(tmp_path / "empty")
    conn = sqlite3.connect(empty / "db" / "nni.sqlite")
    conn.execute("DELETE FROM ExperimentProfile")
    conn.commit()
    conn.close()
    with pytest.raises(NniHistoryError, match="ExperimentProfile is empty"):
        read_experiment(empty)
