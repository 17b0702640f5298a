"""One trial for the checkpoint and restart tests of every platform: six epochs of a one-number
model, a checkpoint after each, loading the last one when restarted. ``MODE`` (its environment)
plays what ends its first launch after the third checkpoint: ``pause`` (it writes ``paused`` in
its output folder and waits for the test to kill it from outside), ``killself`` (SIGKILL, as
the kernel's OOM killer would), ``exit1`` at once (its own failure, never restarted)."""

from __future__ import annotations

import pytest

TRIAL = """\
import json, os, signal, sys, time
from trialflow import trial
p = trial.get_next_parameter()
mode = os.environ.get("MODE", "")
start, weight = 0, 0.0
resume = trial.last_checkpoint()
if resume:
    state = json.load(open(os.path.join(resume, "state.json")))
    start, weight = state["epoch"], state["weight"]
if mode == "exit1":
    sys.exit(1)
for epoch in range(start, 6):
    weight += p["x"]
    trial.report_intermediate_result(weight)
    with trial.checkpoint() as folder:
        json.dump({"epoch": epoch + 1, "weight": weight}, open(os.path.join(folder, "state.json"), "w"))
    if epoch == 2 and not resume and mode == "pause":
        open(os.path.join(os.environ["NNI_OUTPUT_DIR"], "paused"), "w").close()
        time.sleep(120)
    if epoch == 2 and not resume and mode == "killself":
        os.kill(os.getpid(), signal.SIGKILL)
trial.report_final_result(weight)
"""


def assert_resumed_from_step_3(store, storage_id: int, fault: str) -> None:
    """Restarted once, from checkpoint 3, after ``fault``; every step reported once; the weight
    went on from the checkpoint (six epochs' worth, not three)."""
    record = store.trial(storage_id)
    assert [(r.attempt, r.step) for r in record.restarts] == [(1, 3)]
    assert fault in record.restarts[0].reason, record.restarts[0].reason
    assert sorted(store.intermediate_values(storage_id)) == [0, 1, 2, 3, 4, 5]
    assert record.final == pytest.approx(6 * record.parameters["x"])


def one_trial_experiment(tmp_path, store, code, command: str, service: dict, experiment_id: str, workdir="work"):
    """An experiment of one TRIAL (in ``code``) on ``service`` keeping its last checkpoint, its
    run started (its working directory ``tmp_path / workdir``)."""
    import json

    from trialflow.config import load_config
    from trialflow.experiment import Experiment
    from trialflow.runs import start_run

    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
        f"trialCommand: {command}\ntrialCodeDirectory: {code}\n"
        "trialConcurrency: 1\nmaxTrialNumber: 1\ntuner: {name: Random}\ncheckpoints: {keepLast: 1, keepBest: 0}\n"
        f"trainingService: {json.dumps(service)}\n"
    )
    experiment = Experiment(load_config(tmp_path / "config.yml"), experiment_id, tmp_path / workdir)
    start_run(experiment, store, f"dag_{experiment_id}", "r1", {})
    return experiment
