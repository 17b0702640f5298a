"""A tuner and an assessor of the user's own, written only against NNI's documented API, under
the real scheduler and triggerer: their memory survives the triggerer's death mid-run, and a
class that raises fails its trials' asks with its own words while Airflow carries on."""

from __future__ import annotations

import base64
import pickle
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.airflow import PY, Harness
from trialflow import queries
from trialflow.platforms.base import experiment_id_for
from trialflow.tuning.custom.runner import SHIM, Saved

pytestmark = pytest.mark.integration
CLASSES = Path(__file__).resolve().parents[1] / "tuning" / "custom" / "classes"

# Unmodified NNI trial code: `import nni` (trialflow's stand-in answers it). Even trials climb;
# odd ones fall, slowly enough to outlive a triggerer restart, unless the assessor stops them.
TRIAL = """\
import time
import nni
p = nni.get_next_parameter()
falling = nni.get_sequence_id() % 2 == 1
time.sleep(1.5)  # past defer_after: the triggerer follows from here
curve = [0.8 - 0.01 * s for s in range(90)] if falling else [0.5, 0.6, 0.7, 0.8]
for value in curve:
    nni.report_intermediate_result(value)
    time.sleep(1.0 if falling else 0.3)
nni.report_final_result(curve[-1])
"""


def _config(tuner: str, assessor: str = "") -> str:
    return (
        "searchSpace:\n  x: {_type: uniform, _value: [0, 1]}\n  seen: {_type: randint, _value: [0, 100]}\n"
        f"trialCommand: {PY} trial.py\ntrialConcurrency: 2\nmaxTrialNumber: 4\n"
        f"tuner: {{className: {tuner}, codeDirectory: ., classArgs: {{optimize_mode: maximize}}}}\n"
        + (f"assessor: {{className: {assessor}, codeDirectory: .}}\n" if assessor else "")
        + "trainingService: {platform: local}\n"
    )


def _files() -> dict[str, str]:
    return {"trial.py": TRIAL, **{p.name: p.read_text() for p in CLASSES.glob("*.py")}}


def _kept(harness: Harness, experiment_id: str, role: str, folder: Path):
    for path in (str(SHIM), str(folder)):
        if path not in sys.path:
            sys.path.insert(0, path)
    saved = Saved.read(harness.store.experiment_attr(experiment_id, f"custom_{role}"))
    assert saved.state, f"the {role}'s object was not kept: {saved.note}"
    return pickle.loads(base64.b64decode(saved.state))


def test_custom_tuner_and_assessor_keep_their_memory_across_a_triggerer_restart(harness: Harness):
    dag_id, folder = harness.experiment(
        "custom_classes",
        _config("counting_tuner.CountingTuner", "drop_assessor.DropAssessor"),
        _files(),
        dag_args="defer_after=1.0",
    )
    killed: list[float] = []

    def kill_the_triggerer_once_a_falling_trial_is_followed(run_id: str) -> None:
        harness.airflow.check_alive()  # a component that died is started again here
        if killed:
            return
        states = {ti["map_index"]: ti["state"] for ti in harness.tis(dag_id, run_id)}
        if states.get(1) == "deferred":
            harness.airflow.processes["triggerer"].kill()  # restarted by the harness's check
            killed.append(time.monotonic())

    run_id, state = harness.run(dag_id, timeout=400, on_tick=kill_the_triggerer_once_a_falling_trial_is_followed)
    assert killed, "the triggerer was never killed while a trial was deferred"
    assert any(r.component == "triggerer" for r in harness.airflow.restarts)
    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED", "EARLY_STOPPED", "SUCCEEDED", "EARLY_STOPPED"], rows
    for falling in (rows[1], rows[3]):
        assert falling.message == "stopped early by drop_assessor.DropAssessor at step 2", falling.message
        assert falling.intermediate_count < 60  # stopped, not run out
    assert state == "success"
    experiment_id = experiment_id_for(dag_id, run_id)
    tuner = _kept(harness, experiment_id, "tuner", folder)
    assert sorted(tuner.generated) == [0, 1, 2, 3]  # one call per trial, none lost, none twice
    told = [trial for trial, _ in tuner.results]
    assert len(told) == len(set(told))  # each result once
    assert all(rows[t].status in ("SUCCEEDED", "EARLY_STOPPED") for t in told)
    # each ask knew at least as much as the asks before it (in the order the trials started: in
    # the triggerer, trial 2 can start before trial 1)
    started = {
        t["trial_index"]: t["started"]
        for t in queries.trials_page(harness.store.storage.engine, experiment_id_for(dag_id, run_id))["rows"]
    }
    seen = [row.parameters["seen"] for row in sorted(rows, key=lambda r: started[r.trial_index])]
    assert seen[0] == 0 and seen == sorted(seen), seen
    assessor = _kept(harness, experiment_id, "assessor", folder)
    assert {trial_id for trial_id, _ in assessor.ended} <= {r.trial_id for r in rows}


def test_a_tuner_class_that_raises_fails_the_run_with_its_words_and_airflow_carries_on(harness: Harness):
    dag_id, _ = harness.experiment(
        "custom_raising", _config("lossy_tuners.Raising").replace("maxTrialNumber: 4", "maxTrialNumber: 2"), _files()
    )
    run_id, state = harness.run(dag_id, timeout=300)
    assert state == "failed"  # nothing trained: a failed run
    assert harness.rows(dag_id, run_id) == []  # no trial was claimed
    ti = harness.tis(dag_id, run_id)[0]
    assert ti["state"] == "failed"
    assert ti["try_number"] == 1  # issue 64, 7: its own code failed, so Airflow's retries do not run it again
    log = " ".join(map(str, harness.airflow.task_log(dag_id, run_id, "trial", ti["try_number"], 0)))
    assert "Raising.generate_parameters failed: ValueError: no idea for trial 0 (lossy_tuners.py:" in log, log[-3000:]
    # the scheduler and triggerer live on: the next DAG runs
    assert harness.airflow.processes["scheduler"].poll() is None


def test_a_custom_advisor_runs_rounds_kills_a_falling_trial_and_ends_when_it_has_no_more(harness: Harness):
    """An advisor of the user's own (NNI 3.0's MsgDispatcherBase) chooses every trial's
    parameters: the second round's trials wait (no slot held) until the first round has ended,
    a trial it sends KillTrialJob for is stopped early, and the trial it has none for once
    nothing runs is skipped, never failed: the run succeeds."""
    config = (
        _config("x.X")
        .replace(
            "tuner: {className: x.X, codeDirectory: ., classArgs: {optimize_mode: maximize}}\n",
            "advisor: {className: rounds_advisor.RoundsAdvisor, codeDirectory: ., "
            "classArgs: {round_size: 2, drops: 2, total: 4}}\n",
        )
        .replace("maxTrialNumber: 4", "maxTrialNumber: 5")
    )
    dag_id, folder = harness.experiment("custom_advisor", config, _files(), dag_args="defer_after=1.0")
    run_id, state = harness.run(dag_id, timeout=400)
    rows = harness.rows(dag_id, run_id)
    seen = [(r.trial_index, r.status, r.message, r.intermediate_count, r.parameters) for r in rows]
    # four of the five trial tasks ran, two rounds of two: the advisor hands parameters to the
    # trials that ask, as NNI's free slots took them, and the tasks that start first ask first
    # (in the triggerer, trial 2's start can come before trial 1's: Airflow starts them together)
    assert len(rows) == 4 and {r.trial_index for r in rows} < set(range(5)), seen
    for row in rows:  # odd trials fall (TRIAL), and the advisor kills them at their second drop
        falling = (row.trial_index or 0) % 2 == 1
        assert row.status == ("EARLY_STOPPED" if falling else "SUCCEEDED"), seen
        assert row.message == ("stopped early by rounds_advisor.RoundsAdvisor at step 2" if falling else None), seen
    # the second round started only once the first had ended
    times = sorted(
        queries.trials_page(harness.store.storage.engine, experiment_id_for(dag_id, run_id))["rows"],
        key=lambda t: t["started"],
    )
    assert min(t["started"] for t in times[2:]) >= max(t["ended"] for t in times[:2]), times
    by_start = [next(r for r in rows if r.trial_index == t["trial_index"]) for t in times]
    xs = [round(r.parameters["x"], 2) for r in by_start]
    assert sorted(xs[:2]) == [0.0, 0.37] and sorted(xs[2:]) == [0.11, 0.74], xs  # in a round, either asks first
    tis = {ti["map_index"]: ti["state"] for ti in harness.tis(dag_id, run_id)}
    # the trial left without parameters never started (no row): skipped, as early-stopped trials are
    expected = {i: "skipped" for i in range(5)} | {r.trial_index: "success" for r in rows if r.status == "SUCCEEDED"}
    assert tis == expected, (tis, seen)
    assert state == "success"
    advisor = _kept(harness, experiment_id_for(dag_id, run_id), "tuner", folder)
    assert advisor.sent == 4 and sorted(advisor.results) == ["p0", "p1", "p2", "p3"]
    # each trial's end told once, with the advisor's own id for the parameters it sent (p<k>: x = 0.37 k mod 1)
    sent_as = {round((k * 0.37) % 1, 2): f"p{k}" for k in range(4)}
    told = sorted(c for c in advisor.calls if c.startswith("end"))
    assert told == sorted(f"end {sent_as[round(r.parameters['x'], 2)]} {r.status}" for r in rows), told
