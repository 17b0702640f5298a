"""A remote trial's checkpoints kept in an object store over HTTP (Azurite) and its restart
from the last one, on a real sshd: its process SIGKILLed while the machine's sshd and every SSH
session die, it runs again in a folder of its own on the machine, loads the checkpoint uploaded
from the store, and finishes with exactly one result per step."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.remote import machine_entry
from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import Connections, TrialStatus
from trialflow.runs import start_run

TRIAL = """\
import json, os, time
from trialflow import trial
p = trial.get_next_parameter()
start, weight = 0, 0.0
resume = trial.last_checkpoint()
if resume:
    state = json.load(open(os.path.join(resume, "state.json")))
    start, weight = state["epoch"], state["weight"]
    open(os.path.join(os.environ["NNI_OUTPUT_DIR"], "resumed"), "w").write(resume)
for epoch in range(start, 5):
    weight += p["x"]
    trial.report_intermediate_result(weight)
    with trial.checkpoint() as folder:
        json.dump({"epoch": epoch + 1, "weight": weight}, open(os.path.join(folder, "state.json"), "w"))
        open(os.path.join(folder, "model.bin"), "wb").write(os.urandom(300_000))
    if epoch == 1 and not resume:
        open(os.path.join(os.environ["NNI_OUTPUT_DIR"], "pid.txt"), "w").write(str(os.getpid()))
        time.sleep(300)
trial.report_final_result(weight)
"""


def _remote_experiment(machine, tmp_path, store, object_store, trial: str, middle: str, prefix: str, eid: str):
    """An experiment of ``trial`` on the machine, keeping checkpoints in Azurite under ``prefix``
    (``middle``: its concurrency, trials and tuner keys), its run started."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(trial)
    service = json.dumps({"platform": "remote", "machineList": [machine_entry(machine, "key")]})
    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 train.py\n"
        f"trialCodeDirectory: code\n{middle}trainingService: {service}\n"
        f"checkpoints: {{store: '{object_store.url}/{prefix}', connId: {object_store.conn_id}, keepLast: 2}}\n"
    )
    experiment = Experiment(load_config(tmp_path / "config.yml"), eid, tmp_path / "work")
    start_run(experiment, store, f"dag_{eid}", "r1", {})
    return experiment


@pytest.mark.slow  # real processes for seconds: make test runs it, the inner loops do not
def test_a_remote_trial_whose_process_and_sshd_die_restarts_from_its_checkpoint(
    ssh_servers, tmp_path, store, object_store
):
    from tests.helpers.object_store import blob_names
    from trialflow.hooks.artifact_store import checkpoint_root

    a, _ = ssh_servers
    middle = "trialConcurrency: 1\nmaxTrialNumber: 1\ntuner: {name: Random}\n"
    experiment = _remote_experiment(a, tmp_path, store, object_store, TRIAL, middle, "remote", "eremckpt")
    started = trial_lifecycle.start_trial(
        experiment, store, "r1", 0, connections=Connections(artifacts=checkpoint_root)
    )
    first_dir = Path(started.handle["trial_dir"])
    deadline = time.monotonic() + 60
    while not (first_dir / "pid.txt").exists() or not (first_dir / "pid.txt").read_text():
        assert time.monotonic() < deadline, "the trial never reached its second epoch"
        time.sleep(0.1)
    outcome_box: list = []

    import threading

    def follow() -> None:
        outcome_box.append(trial_lifecycle.wait_in_worker(started, store, 120, 0.2))

    follower = threading.Thread(target=follow)
    follower.start()
    time.sleep(1.0)  # followed, and checkpoint 2 kept
    a.stop()  # every SSH session dies, as with a crashed host
    os.kill(int((first_dir / "pid.txt").read_text()), signal.SIGKILL)
    time.sleep(1.0)
    a.start()
    follower.join(timeout=150)
    assert outcome_box, "following never ended"
    outcome = outcome_box[0]

    assert outcome.status == TrialStatus.SUCCEEDED, outcome.message
    storage_id = started.record.storage_id
    record = store.trial(storage_id)
    assert [(r.attempt, r.step) for r in record.restarts] == [(1, 2)]
    assert sorted(store.intermediate_values(storage_id)) == [0, 1, 2, 3, 4]  # one result per step
    assert record.final == pytest.approx(5 * started.record.parameters["x"])
    second_dir = Path(record.handle["trial_dir"])
    assert second_dir.name == f"{started.spec.trial_id}.attempt-1" and second_dir.parent == first_dir.parent
    assert (second_dir / "resumed").read_text() == str(second_dir / "resume")
    assert json.loads((second_dir / "resume" / "state.json").read_text())["epoch"] == 2
    blobs = blob_names(object_store, f"remote/eremckpt/{started.spec.trial_id}/checkpoints/")
    assert [b.rsplit("/", 1)[1] for b in blobs if b.endswith(".manifest.json")][-2:] == [
        "000000004.manifest.json",
        "000000005.manifest.json",
    ]


#: Written like NNI's mnist-pbt trial: load the checkpoint PBT names, train a step, report, save.
PBT_TRIAL = """\
import json, os
import nni
p = nni.get_next_parameter()
load = os.path.join(p["load_checkpoint_dir"], "w.json")
w = json.load(open(load))["w"] if os.path.isfile(load) else 0.0
if os.path.isfile(load):
    open(os.path.join(os.environ["NNI_OUTPUT_DIR"], "loaded"), "w").write(json.dumps(w))
w += p["x"]
nni.report_final_result(w)
os.makedirs(p["save_checkpoint_dir"], exist_ok=True)
json.dump({"w": w}, open(os.path.join(p["save_checkpoint_dir"], "w.json"), "w"))
"""


def test_pbt_on_remote_machines_hands_each_child_its_parents_checkpoint_through_the_store(
    ssh_servers, tmp_path, store, object_store
):
    from tests.helpers.object_store import blob_names
    from trialflow.hooks.artifact_store import checkpoint_root

    a, _ = ssh_servers
    pbt = "tuner: {name: PBTTuner, classArgs: {population_size: 2, fraction: 0.5}}\n"
    middle = f"trialConcurrency: 2\nmaxTrialNumber: 4\n{pbt}"
    experiment = _remote_experiment(a, tmp_path, store, object_store, PBT_TRIAL, middle, "pbt", "erempbt")
    connections = Connections(artifacts=checkpoint_root)
    finals = {}
    for generation in (range(2), range(2, 4)):
        started = [trial_lifecycle.start_trial(experiment, store, "r1", i, connections=connections) for i in generation]
        for trial in started:
            outcome = trial_lifecycle.wait_in_worker(trial, store, 60, 0.2)
            assert outcome.status == TrialStatus.SUCCEEDED, outcome.message
            trial_lifecycle.finish_trial(store, trial.record.storage_id, outcome.status, outcome.message)
            record = store.trial(trial.record.storage_id)
            finals[record.trial_index] = (record, Path(trial.handle["trial_dir"]))
    for index in (2, 3):
        record, folder = finals[index]
        lineage = record.lineage
        assert lineage is not None and lineage.loaded_step == 0 and lineage.parent_index in (0, 1)
        parent, _ = finals[lineage.parent_index]
        # the child on the machine read its parent's weight, uploaded there from the store
        assert json.loads((folder / "loaded").read_text()) == pytest.approx(parent.final)
        assert record.final == pytest.approx(parent.final + record.parameters["x"])
    for index in range(4):
        trial_id = finals[index][0].trial_id
        names = blob_names(object_store, f"pbt/erempbt/{trial_id}/checkpoints/")
        assert sorted(n.split("/checkpoints/", 1)[1] for n in names) == ["000000000.manifest.json", "000000000/w.json"]
