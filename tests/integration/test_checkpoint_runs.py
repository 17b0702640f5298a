"""Checkpoints under the real scheduler and triggerer: trials keep them in an object store over
HTTP (Azurite, through the Microsoft Azure provider's abfs:// and an Airflow connection made
with Airflow's REST API), and a trial SIGKILLed while the triggerer follows it restarts from
its last checkpoint and finishes with one result per step; its task succeeds."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.airflow import PY, Harness
from tests.helpers.object_store import ObjectStore, blob_names
from trialflow.platforms.base import experiment_id_for

pytestmark = pytest.mark.integration

TRIAL = """\
import json, os, sys, time
from trialflow import trial
p = trial.get_next_parameter()
marks = sys.argv[1]
me = os.environ["NNI_TRIAL_JOB_ID"]
start, weight = 0, 0.0
resume = trial.last_checkpoint()
if resume:
    state = json.load(open(os.path.join(resume, "state.json")))
    start, weight = state["epoch"], state["weight"]
open(os.path.join(marks, me + ".launches"), "a").write(f"{start}\\n")
for epoch in range(start, 5):
    weight += p["x"]
    trial.report_intermediate_result(weight)
    with trial.checkpoint() as folder:
        json.dump({"epoch": epoch + 1, "weight": weight}, open(os.path.join(folder, "state.json"), "w"))
    if epoch == 2 and not resume and trial.get_sequence_id() == 0:
        open(os.path.join(marks, me + ".pid"), "w").write(str(os.getpid()))
        time.sleep(300)
trial.report_final_result(weight)
"""


def _connection(harness: Harness, store: ObjectStore) -> None:
    response = harness.airflow.api(
        "POST",
        "/connections",
        json={
            "connection_id": store.conn_id,
            "conn_type": "wasb",
            "extra": json.dumps({"connection_string": store.connection_string}),
        },
    )
    assert response.status_code in (200, 201, 409), response.text


def test_a_trial_killed_while_the_triggerer_follows_it_restarts_from_its_checkpoint(
    harness: Harness, tmp_path: Path, object_store: ObjectStore
):
    _connection(harness, object_store)
    marks = tmp_path / "marks"
    marks.mkdir()
    config = (
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
        f"trialCommand: {PY} trial.py {marks}\ntrialConcurrency: 2\nmaxTrialNumber: 2\n"
        "tuner: {name: Random}\ntrainingService: {platform: local}\n"
        f"checkpoints: {{store: '{object_store.url}/airflow', connId: {object_store.conn_id}, "
        "keepLast: 1, keepBest: 0}\n"
    )
    dag_id, run_id = harness.start("ckpt_restart", config, {"trial.py": TRIAL}, dag_args="defer_after=0")
    deadline = time.monotonic() + 120
    while not list(marks.glob("*.pid")):
        assert time.monotonic() < deadline, "trial 0 never reached its third epoch"
        time.sleep(0.2)
    (pid_file,) = marks.glob("*.pid")
    states: list[str] = []
    while "deferred" not in states:  # the triggerer follows it (trial 1 may have ended already)
        assert time.monotonic() < deadline, f"trial 0's task never deferred: {states}"
        states = [ti["state"] for ti in harness.tis(dag_id, run_id) if ti["map_index"] == 0]
        time.sleep(0.2)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    _, state = harness.wait(dag_id, run_id, timeout=240)
    assert state == "success"

    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED", "SUCCEEDED"]
    assert [r.intermediate_count for r in rows] == [5, 5]  # one result per step, none twice
    killed = pid_file.name.removesuffix(".pid")
    assert (marks / f"{killed}.launches").read_text().split() == ["0", "3"]
    experiment_id = experiment_id_for(dag_id, run_id)
    for row in rows:
        assert row.final_metric == pytest.approx(5 * row.parameters["x"])
        blobs = blob_names(object_store, f"airflow/{experiment_id}/{row.trial_id}/checkpoints/")
        assert [b.rsplit("/", 1)[1] for b in blobs if b.endswith(".manifest.json")] == ["000000005.manifest.json"]
    store = harness.store
    index = next(r.trial_index for r in rows if r.trial_id == killed)
    record = store.trial(store.find_trial_id(experiment_id, index))
    assert [(r.attempt, r.step) for r in record.restarts] == [(1, 3)]
    xcom = harness.xcom(dag_id, run_id, "trial", rows[0].trial_index)
    assert xcom["status"] == "SUCCEEDED" and xcom["intermediate_count"] == 5
