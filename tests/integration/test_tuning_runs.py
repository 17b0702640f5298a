"""Tuners, assessors, resume and budgets under the real scheduler and triggerer."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.airflow import PY, Harness
from tests.helpers.mlflow_server import CONN_ID as MLFLOW_CONN
from tests.helpers.mlflow_server import steps, tracked_runs
from trialflow.platforms.base import experiment_id_for
from trialflow.platforms.local import process_alive

pytestmark = pytest.mark.integration


def dag_source(**kwargs: object) -> str:
    args = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    return (
        "# airflow DAG\nfrom trialflow.dag import experiment_dag\n"
        f"dag = experiment_dag('{{CONFIG}}', dag_id='{{DAG_ID}}', poll_interval=0.3{args})\n"
    )


CURVE_TRIAL = """\
import sys, time
from trialflow import trial
p = trial.get_next_parameter()
if trial.get_sequence_id() < 2:          # two good trials finish first
    for _ in range(6):
        trial.report_intermediate_result(0.9)
        time.sleep(0.05)
    trial.report_final_result(0.9)
    sys.exit(0)
time.sleep(2)                            # past defer_after: the triggerer follows from here
for _ in range(100):                     # a bad curve; 20 s if nobody stops it
    trial.report_intermediate_result(0.1)
    time.sleep(0.2)
trial.report_final_result(0.1)
"""


def test_medianstop_stops_a_trial_below_the_median_from_the_triggerer(harness: Harness):
    config = (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {PY} trial.py\n"
        "trialConcurrency: 1\nmaxTrialNumber: 3\ntuner: {name: Random, classArgs: {seed: 2}}\n"
        "assessor: {name: Medianstop, classArgs: {optimize_mode: maximize, start_step: 3}}\n"
        "trainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment(
        "medianstop", config, {"trial.py": CURVE_TRIAL}, dag_source=dag_source(defer_after=1.0)
    )
    deferred: set[int] = set()

    def watch(run_id: str) -> None:
        deferred.update(ti["map_index"] for ti in harness.tis(dag_id, run_id) if ti["state"] == "deferred")

    started = time.monotonic()
    run_id, state = harness.run(dag_id, on_tick=watch)
    assert state == "success"
    assert [ti["state"] for ti in harness.tis(dag_id, run_id)] == ["success", "success", "skipped"]
    assert 2 in deferred, "the stopped trial was followed by the triggerer"
    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED", "SUCCEEDED", "EARLY_STOPPED"]
    assert rows[2].message.startswith("stopped early by Medianstop at step ")
    assert 3 <= rows[2].intermediate_count < 100
    assert time.monotonic() - started < 60
    summary = harness.xcom(dag_id, run_id, "end_experiment")
    assert summary["status_counts"] == {"SUCCEEDED": 2, "EARLY_STOPPED": 1}


LAUNCH_TRIAL = """\
import os, sys, time
from trialflow import trial
p = trial.get_next_parameter()
open(sys.argv[1], "a").write(os.environ["NNI_TRIAL_JOB_ID"] + "\\n")
time.sleep(float(sys.argv[2]))
trial.report_final_result(p["x"])
"""


def test_a_cleared_dag_run_resumes_without_running_finished_trials_again(harness: Harness, tmp_path: Path):
    """Clearing the whole run midway: finished trials report from the store, the ones running
    are stopped (a person's clear, since issue 28: USER_CANCELED, "its task was cleared"), the
    rest start; no trial is launched twice."""
    launches = tmp_path / "launches"
    config = (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\n"
        f"trialCommand: {PY} trial.py {launches} 3\ntrialConcurrency: 2\nmaxTrialNumber: 6\n"
        "tuner: {name: TPE, classArgs: {seed: 4}}\ntrainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment("resume", config, {"trial.py": LAUNCH_TRIAL})
    cleared: list[int] = []

    def clear_midway(run_id: str) -> None:
        if cleared:
            return
        rows = (
            harness.rows(dag_id, run_id) if harness.store.experiment_exists(experiment_id_for(dag_id, run_id)) else []
        )
        done = sum(r.status == "SUCCEEDED" for r in rows)
        running = sum(r.status in ("WAITING", "RUNNING") for r in rows)
        if done >= 2 and running:
            response = harness.airflow.api("POST", f"/dags/{dag_id}/dagRuns/{run_id}/clear", json={"dry_run": False})
            assert response.status_code == 200, response.text
            cleared.append(done)

    run_id, state = harness.run(dag_id, on_tick=clear_midway)
    assert cleared and state == "success"
    (start,) = harness.tis(dag_id, run_id, "start_experiment")
    assert start["try_number"] >= 2, "the whole run was cleared and started again"
    rows = harness.rows(dag_id, run_id)
    assert len(rows) == 6 and {r.status for r in rows} <= {"SUCCEEDED", "USER_CANCELED"}, rows
    assert sum(r.status == "SUCCEEDED" for r in rows) >= cleared[0] + 1  # those done, and more after
    stopped = [r for r in rows if r.status == "USER_CANCELED"]
    assert all(r.message == "stopped from Airflow: its task was cleared" for r in stopped), stopped
    ids = launches.read_text().split()
    assert sorted(ids) == [r.trial_id for r in rows], "every trial launched exactly once"


def test_max_experiment_duration_cancels_stops_launching_and_still_reports(harness: Harness, tmp_path: Path):
    slow = (
        "import sys, time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        "time.sleep(0.3 if trial.get_sequence_id() == 0 else 60)\ntrial.report_final_result(p['x'])\n"
    )
    config = (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {PY} slow.py\n"
        "trialConcurrency: 1\nmaxTrialNumber: 4\nmaxExperimentDuration: 8s\n"
        "tuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment("duration", config, {"slow.py": slow})
    started = time.monotonic()
    run_id, state = harness.run(dag_id)
    assert state == "success"
    assert time.monotonic() - started < 45
    assert [ti["state"] for ti in harness.tis(dag_id, run_id)] == ["success", "skipped", "skipped", "skipped"]
    rows = harness.rows(dag_id, run_id)
    assert [(r.trial_index, r.status) for r in rows] == [(0, "SUCCEEDED"), (1, "SYS_CANCELED")]
    assert rows[1].message == "maxExperimentDuration reached"
    handle = harness.store.find_trial(experiment_id_for(dag_id, run_id), 1).handle
    assert not process_alive(handle["pid"])
    summary = harness.xcom(dag_id, run_id, "end_experiment")
    assert summary["status_counts"] == {"SUCCEEDED": 1, "SYS_CANCELED": 1}  # trials 2, 3 never started


def test_scheduled_runs_can_continue_one_study(harness: Harness):
    quick = "from trialflow import trial\np = trial.get_next_parameter()\ntrial.report_final_result(p['x'])\n"
    config = (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {PY} q.py\n"
        "trialConcurrency: 2\nmaxTrialNumber: 2\ntuner: {name: TPE, classArgs: {seed: 1}}\n"
        "scheduledRuns: continue\ntrainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment("continue", config, {"q.py": quick})
    first, state1 = harness.run(dag_id)
    second, state2 = harness.run(dag_id)
    assert state1 == state2 == "success"
    study_rows = harness.store.trial_rows(experiment_id_for(dag_id, ""))
    assert [r.trial_index for r in study_rows] == [0, 1, 2, 3]
    summary = harness.xcom(dag_id, second, "end_experiment")
    assert [t["trial_index"] for t in summary["trials"]] == [2, 3]
    assert summary["study_best"]["final_metric"] == max(r.final_metric for r in study_rows)
    assert harness.xcom(dag_id, second, "trial", 0)["trial_index"] == 2


def test_batch_tuner_and_hyperband_run_as_nni_configures_them(harness: Harness):
    echo = (
        "import json\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        "trial.report_final_result(float(p.get('lr', p.get('TRIAL_BUDGET', 0))))\n"
    )
    batch = (
        f"searchSpace: {{combine_params: {{_type: choice, _value: [{{lr: 0.1}}, {{lr: 0.2}}, {{lr: 0.3}}]}}}}\n"
        f"trialCommand: {PY} echo.py\ntrialConcurrency: 3\ntuner: {{name: BatchTuner}}\n"
        "trainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment("batch", batch, {"echo.py": echo})
    run_id, state = harness.run(dag_id)
    assert state == "success"
    assert [r.parameters for r in harness.rows(dag_id, run_id)] == [{"lr": 0.1}, {"lr": 0.2}, {"lr": 0.3}]
    hyperband = (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {PY} echo.py\n"
        "trialConcurrency: 2\nmaxTrialNumber: 2\nadvisor: {name: Hyperband, classArgs: {R: 9, eta: 3}}\n"
        "trainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment("hyperband", hyperband, {"echo.py": echo})
    run_id, state = harness.run(dag_id)
    assert state == "success"
    rows = harness.rows(dag_id, run_id)
    assert all(r.parameters["TRIAL_BUDGET"] == 9 and r.final_metric == 9.0 for r in rows)


def test_a_remote_experiment_on_two_ssh_machines(harness: Harness, ssh_servers, mlflow_server):
    """Trials on two real OpenSSH servers, followed by the triggerer, spread by load, and logged
    to MLflow from the Airflow side (the machines never reach the tracking server)."""
    a, b = ssh_servers
    tracked = f"remote-{uuid.uuid4().hex[:8]}"
    trial = (
        "import time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        "trial.report_intermediate_result(p['x'])\ntime.sleep(12)\ntrial.report_final_result(p['x'])\n"
    )
    machines = "".join(
        f"    - {{host: 127.0.0.1, port: {s.port}, user: {s.user}, sshKeyFile: {s.client_key}, "
        f"hostKey: '{s.host_key_line}', pythonPath: /usr/bin}}\n"
        for s in (a, b)
    )
    config = (
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\n"
        "trialConcurrency: 2\nmaxTrialNumber: 4\ntuner: {name: Random}\n"
        f"mlflow: {{connId: {MLFLOW_CONN}, experimentName: {tracked}}}\n"
        f"trainingService:\n  platform: remote\n  machineList:\n{machines}"
    )
    dag_id, _ = harness.experiment(
        "remote", config, {"t.py": trial}, dag_source=dag_source(defer_after=2.0, cleanup=True)
    )
    run_id, state = harness.run(dag_id)
    assert state == "success"
    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED"] * 4
    assert all(r.intermediate_count == 1 for r in rows)
    hosts = [harness.xcom(dag_id, run_id, "trial", i)["host"] for i in range(4)]
    assert set(hosts) == {f"{a.user}@127.0.0.1:{a.port}", f"{b.user}@127.0.0.1:{b.port}"}
    experiment_id = experiment_id_for(dag_id, run_id)
    for server in (a, b):  # cleanup=True: the end step removed the experiment's files
        assert not (server.home / "trialflow-experiments" / experiment_id).exists()
    parent, runs = tracked_runs(mlflow_server, tracked)
    assert parent.info.status == "FINISHED" and len(runs) == 4
    for row, run in zip(rows, runs):
        assert run.data.tags["trialflow.platform"] == "remote" and run.info.status == "FINISHED"
        assert steps(mlflow_server, run) == [(0, pytest.approx(row.parameters["x"]))]
        assert run.data.metrics["final"] == pytest.approx(row.final_metric)


def test_hybrid_spreads_trials_over_local_and_a_remote_machine(harness: Harness, ssh_servers):
    """NNI's hybrid mode: trainingService is a list; each trial runs on one of the platforms."""
    a, _ = ssh_servers
    trial = (
        "import time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        "time.sleep(6)\ntrial.report_final_result(p['x'])\n"
    )
    config = (
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
        "trialConcurrency: 2\nmaxTrialNumber: 4\ntuner: {name: Random}\n"
        "trainingService:\n"
        f"  - {{platform: local, trialCommand: {PY} t.py}}\n"
        f"  - {{platform: remote, trialCommand: python3 t.py, machineList: [{{host: 127.0.0.1, port: {a.port}, "
        f"user: {a.user}, sshKeyFile: {a.client_key}, hostKey: '{a.host_key_line}', pythonPath: /usr/bin}}]}}\n"
    )
    dag_id, _ = harness.experiment("hybrid", config, {"t.py": trial}, dag_source=dag_source(defer_after=2.0))
    run_id, state = harness.run(dag_id)
    assert state == "success"
    assert [r.status for r in harness.rows(dag_id, run_id)] == ["SUCCEEDED"] * 4
    platforms = [harness.xcom(dag_id, run_id, "trial", i)["platform"] for i in range(4)]
    assert sorted(platforms) == ["local", "local", "remote", "remote"]
    # started in the triggerer (the default), the task has no worker to render its fields: the
    # trial's platform is in its XCom (above), its log and its page (docs/topics/airflow-ui.md)


def test_an_experiment_without_max_trial_number_goes_on_until_its_duration_ends(harness: Harness):
    """NNI runs such an experiment until maxExperimentDuration: here run after run of the same DAG,
    each started by the one before, one study, consecutive trial indexes, never a silent cap."""
    from trialflow.experiment.run_windows import RunWindow
    from trialflow.runs import continuation_run_id

    trial = "import time\nfrom trialflow import trial\np = trial.get_next_parameter()\ntime.sleep(1)\n"
    trial += "trial.report_final_result(p['x'])\n"
    config = (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {PY} t.py\n"
        "trialConcurrency: 2\nmaxExperimentDuration: 25s\n"
        "tuner: {name: TPE, classArgs: {seed: 3}}\ntrainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment("unbounded", config, {"t.py": trial}, dag_source=dag_source(trials_per_run=4))
    started = time.monotonic()
    first, state = harness.run(dag_id, timeout=180)
    assert state == "success"
    experiment = experiment_id_for(dag_id, first)
    runs = [first]
    while True:
        window = RunWindow.of(harness.store.experiment_attrs(experiment), runs[-1])
        following = continuation_run_id(experiment, window.first_index + window.count)
        conf = harness.airflow.run_conf(dag_id, following)
        if conf is None:
            break
        # (OpenLineage, where configured, adds its parent-job key to a triggered run's conf)
        assert {k: conf.get(k) for k in ("experiment_id", "continues")} == {
            "experiment_id": experiment,
            "continues": runs[-1],
        }
        _, state = harness.wait(dag_id, following, timeout=180)
        assert state == "success", f"run {following} {state}"
        runs.append(following)
        assert len(runs) < 20, "the duration should have ended the experiment"
    assert len(runs) >= 2, "the experiment went on in a follow-on run"
    assert time.monotonic() - started >= 25  # it ran until its duration, not until a trial count
    states = [harness.tis(dag_id, run, "continue_experiment")[0]["state"] for run in runs]
    assert states == ["success"] * (len(runs) - 1) + ["skipped"]
    attrs = harness.store.experiment_attrs(experiment)
    windows = [RunWindow.of(attrs, run) for run in runs]
    assert [w.first_index for w in windows] == [4 * i for i in range(len(runs))]
    assert len({w.deadline for w in windows}) == 1  # every run kept the first run's deadline
    rows = harness.store.trial_rows(experiment)
    indexes = [r.trial_index for r in rows]
    assert len(set(indexes)) == len(indexes)  # each trial recorded once, in the window of its run
    assert all(any(w.first_index <= i < w.first_index + w.count for w in windows) for i in indexes)
    assert len({r.trial_id for r in rows}) == len(rows)
    assert len(rows) > 4 and all(r.status in ("SUCCEEDED", "SYS_CANCELED") for r in rows)
