"""Trial tasks that start in the triggerer (start_trials_in='triggerer'), under the real
scheduler and triggerer: no worker process is made for a trial that succeeds, and
trialConcurrency holds (the store keeps it: Airflow defers every such task at once)."""

from __future__ import annotations

import pytest

from tests.helpers.airflow import PY, Harness
from tests.helpers.airflow_controls import SLEEPER, patch_ti, stop_across_the_hand_off, wait_for

pytestmark = pytest.mark.integration

TIMED_TRIAL = """\
import os, time
from trialflow import trial
p = trial.get_next_parameter()
began = time.time()
time.sleep(1.5)
open(os.environ["TIMES"], "a").write(f"{os.environ['NNI_TRIAL_JOB_ID']} {began} {time.time()}\\n")
trial.report_final_result(p["x"])
"""


def most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def test_trials_start_in_the_triggerer_within_trial_concurrency(harness: Harness, tmp_path):
    times = tmp_path / "times.txt"
    config = (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: TIMES={times} {PY} trial.py\n"
        "trialConcurrency: 2\nmaxTrialNumber: 6\ntuner: {name: Random, classArgs: {seed: 5}}\n"
        "trainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment(
        "triggered", config, {"trial.py": TIMED_TRIAL}, dag_args="start_trials_in='triggerer'"
    )
    run_id, state = harness.run(dag_id, timeout=240)
    assert state == "success"
    tis = harness.tis(dag_id, run_id)
    assert [(ti["state"], ti["try_number"]) for ti in tis] == [("success", 1)] * 6
    assert all(ti["queued_when"] is None for ti in tis), "a trial task went through a worker"
    rows = harness.rows(dag_id, run_id)
    assert sorted(r.trial_index for r in rows) == list(range(6)) and {r.status for r in rows} == {"SUCCEEDED"}
    spans = [(float(a), float(b)) for _, a, b in (line.split() for line in times.read_text().splitlines())]
    assert len(spans) == 6 and most_at_once(spans) == 2, sorted(spans)  # used, and never passed


def test_marking_trials_failed_around_their_start_in_the_triggerer_leaves_none_running(harness: Harness):
    """Each trial task is marked failed at another instant after its trial's job was launched
    from the trigger: while the start in its thread still checks for a stop, as the trigger
    hands over to following it, after. The start is let end and what it launched is stopped:
    every trial (SIGTERM trapped, a setsid child) gone, closed as the person's, its task failed."""
    offsets = [0.0, 0.02, 0.05, 0.1, 0.3, 1.0]
    seen = stop_across_the_hand_off(
        harness, "triggered_marks", offsets, "failed", defer_after=2.0, gone_within=60, start_trials_in="triggerer"
    )
    assert {r.status for r in seen.rows} == {"USER_CANCELED"}, seen.rows
    assert {ti["state"] for ti in harness.tis(seen.dag_id, seen.run_id)} == {"failed"}


def test_a_trial_marked_failed_while_it_waits_for_its_turn_is_never_asked(harness: Harness, tmp_path):
    launches = tmp_path / "launches"
    config = (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: LAUNCHES={launches} {PY} t.py\n"
        "trialConcurrency: 1\nmaxTrialNumber: 2\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment("triggered_wait", config, {"t.py": SLEEPER}, dag_args="start_trials_in='triggerer'")
    harness.airflow.wait_for_dag(dag_id, harness.dag_files[dag_id], timeout=90)
    run_id = harness.airflow.trigger(dag_id)
    wait_for("the first trial to run", lambda: launches.exists() and launches.read_text().strip(), 120)
    waiting = 1 if launches.read_text().split()[0].endswith("0") else 0
    patch_ti(harness, dag_id, run_id, waiting, "failed")  # it waits for the one slot
    # The triggerer cancels the trigger on its next loop: a slot freed before that would still
    # start the trial (and its stop end it at once); this test is of what follows the cancel.
    folder = harness.airflow.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=trial"

    def cancelled() -> bool:
        logs = (folder / f"map_index={waiting}").glob("attempt=1.log.trigger.*.log")
        return any("cancelled by user action" in log.read_text(errors="replace") for log in logs)

    wait_for("the waiting start's trigger to be cancelled", cancelled, 60)
    patch_ti(harness, dag_id, run_id, 1 - waiting, "failed")  # frees the slot: nothing may take it
    _, state = harness.wait(dag_id, run_id, 120)
    assert state == "failed"
    rows = harness.rows(dag_id, run_id)
    assert [(r.trial_index, r.status) for r in rows] == [(1 - waiting, "USER_CANCELED")], rows
    assert len(launches.read_text().split()) == 1


LAUNCHING_TRIAL = """\
import os, time
from trialflow import trial
p = trial.get_next_parameter()
open(os.environ["LAUNCHES"], "a").write(os.environ["NNI_TRIAL_JOB_ID"] + "\\n")
time.sleep(2)
trial.report_final_result(p["x"])
"""


def test_a_triggerer_killed_while_trials_start_and_wait_loses_and_repeats_none(harness: Harness, tmp_path):
    """SIGKILL the triggerer while trials run, wait for their turn and start (its threads die
    with it): the restarted one takes every trigger up again. Each trial launched once, each
    SUCCEEDED, each task in its first try."""
    launches = tmp_path / "launches"
    config = (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: LAUNCHES={launches} {PY} t.py\n"
        "trialConcurrency: 2\nmaxTrialNumber: 6\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment(
        "triggered_kill", config, {"t.py": LAUNCHING_TRIAL}, dag_args="start_trials_in='triggerer'"
    )
    killed: list[int] = []

    def kill_once_trials_run_and_wait(run_id: str) -> None:
        harness.airflow.check_alive()  # a component that died is started again here
        if killed or not launches.exists():
            return
        launched = len(launches.read_text().split())
        if 1 <= launched < 6:
            harness.airflow.processes["triggerer"].kill()
            killed.append(launched)

    run_id, state = harness.run(dag_id, timeout=300, on_tick=kill_once_trials_run_and_wait)
    assert killed, "the triggerer was never killed while trials started"
    assert state == "success"
    assert any(r.component == "triggerer" for r in harness.airflow.restarts)
    ids = launches.read_text().split()
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 6, ids  # every trial launched once
    rows = harness.rows(dag_id, run_id)
    assert sorted(r.trial_index for r in rows) == list(range(6)) and {r.status for r in rows} == {"SUCCEEDED"}
    assert [(ti["state"], ti["try_number"]) for ti in harness.tis(dag_id, run_id)] == [("success", 1)] * 6
