"""Experiments under the real scheduler: concurrency, failures, timeouts, retries, both SDKs."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.airflow import PY, Harness
from trialflow.platforms.base import experiment_id_for
from trialflow.platforms.local import process_alive

pytestmark = pytest.mark.integration

STAMP_TRIAL = """\
import os, sys, time
from trialflow import trial
stamps = sys.argv[1]
me = os.environ["NNI_TRIAL_JOB_ID"]
open(os.path.join(stamps, me + ".start"), "w").write(repr(time.time()))
p = trial.get_next_parameter()
seq = trial.get_sequence_id()
trial.report_intermediate_result(p["x"] / 2)
time.sleep(float(sys.argv[2]))
if seq in [int(s) for s in sys.argv[3].split(",") if s]:
    sys.exit(1)
trial.report_final_result(p["x"])
open(os.path.join(stamps, me + ".end"), "w").write(repr(time.time()))
"""


def simple_config(
    script: str, concurrency: int, trials: int, extra: str = "", service: str = "{platform: local}"
) -> str:
    """One uniform parameter x, a Random tuner, the trial script run with this interpreter."""
    return (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {PY} {script}\n"
        f"trialConcurrency: {concurrency}\nmaxTrialNumber: {trials}\ntuner: {{name: Random}}\n"
        f"trainingService: {service}\n{extra}"
    )


def stamp_config(stamps: Path, n: int, c: int, sleep: float, fail: str = "", extra: str = "") -> str:
    return f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {PY} trial.py {stamps} {sleep} "{fail}"
trialConcurrency: {c}
maxTrialNumber: {n}
tuner: {{name: TPE, classArgs: {{optimize_mode: maximize, seed: 1}}}}
trainingService: {{platform: local}}
{extra}"""


def max_overlap(stamps: Path) -> int:
    events = []
    for start in stamps.glob("*.start"):
        end = start.with_suffix(".end")
        events.append((float(start.read_text()), 1))
        events.append((float(end.read_text()) if end.exists() else float("inf"), -1))
    running = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        running += delta
        peak = max(peak, running)
    return peak


def test_concurrency_is_exact_and_results_reach_store_and_xcom(harness: Harness, tmp_path: Path):
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    dag_id, _ = harness.experiment("concurrency", stamp_config(stamps, n=8, c=3, sleep=2), {"trial.py": STAMP_TRIAL})
    sampled: list[int] = []

    def sample(run_id: str) -> None:
        # the trials launched and not ended (trial tasks started in the triggerer, the default
        # here, are all deferred from the run's start while they wait for a slot)
        started = harness.store.experiment_exists(experiment_id_for(dag_id, run_id))
        rows = harness.rows(dag_id, run_id) if started else []
        sampled.append(sum(r.status == "RUNNING" for r in rows))

    run_id, state = harness.run(dag_id, on_tick=sample)
    assert state == "success"
    assert max(sampled) <= 3, sampled
    assert max_overlap(stamps) == 3  # the limit is reached, never passed
    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED"] * 8
    assert all(r.intermediate_count == 1 and r.final_metric == r.parameters["x"] for r in rows)
    assert len({r.parameters["x"] for r in rows}) == 8
    xcom = harness.xcom(dag_id, run_id, "trial", 5)
    assert xcom["trial_index"] == 5 and xcom["status"] == "SUCCEEDED"
    assert xcom["final_metric"] == rows[5].final_metric and xcom["intermediate_count"] == 1
    summary = harness.xcom(dag_id, run_id, "end_experiment")
    assert summary["best"]["final_metric"] == max(r.final_metric for r in rows)
    assert summary["status_counts"] == {"SUCCEEDED": 8}


def test_a_failing_trial_fails_only_its_own_task(harness: Harness, tmp_path: Path):
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    dag_id, _ = harness.experiment(
        "failing", stamp_config(stamps, n=4, c=2, sleep=0.5, fail="1"), {"trial.py": STAMP_TRIAL}
    )
    run_id, state = harness.run(dag_id)
    assert state == "success"  # the end step reports: three trials succeeded
    tis = harness.tis(dag_id, run_id)
    assert [ti["state"] for ti in tis] == ["success", "failed", "success", "success"]
    assert tis[1]["try_number"] == 1  # a trial's own failure is not retried
    failed = harness.xcom(dag_id, run_id, "trial", 1)
    assert failed["status"] == "FAILED" and "exited with code 1" in failed["message"]
    summary = harness.xcom(dag_id, run_id, "end_experiment")
    assert summary["status_counts"] == {"SUCCEEDED": 3, "FAILED": 1}


def test_max_trial_duration_stops_the_whole_process_tree(harness: Harness, tmp_path: Path):
    pids = tmp_path / "pids"
    hang = (
        "import os, subprocess, sys, time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        "if trial.get_sequence_id() == 0:\n    trial.report_final_result(1.0)\n    sys.exit(0)\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        "grandchild = subprocess.Popen(['setsid', 'sleep', '301'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}} {{grandchild.pid}}')\n"
        "time.sleep(300)\n"
    )
    config = simple_config("hang.py", 2, 2, extra="maxTrialDuration: 4s\n")
    dag_id, _ = harness.experiment("timeout", config, {"hang.py": hang})
    run_id, state = harness.run(dag_id)
    assert state == "success"
    tis = harness.tis(dag_id, run_id)
    assert [ti["state"] for ti in tis] == ["success", "skipped"]
    assert harness.rows(dag_id, run_id)[1].status == "EARLY_STOPPED"
    assert not any(process_alive(pid) for pid in map(int, pids.read_text().split()))


def test_a_worker_killed_mid_trial_is_retried_and_reattaches(harness: Harness, tmp_path: Path):
    launches = tmp_path / "launches"
    trial = (
        "import os, time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        f"open({str(launches)!r}, 'a').write(os.environ['NNI_TRIAL_JOB_ID'] + '\\n')\n"
        "time.sleep(10)\ntrial.report_intermediate_result(0.5)\ntrial.report_final_result(p['x'])\n"
    )
    config = simple_config("t.py", 1, 1)
    dag_source = (
        "# airflow DAG: submit now, wait with a poking sensor that holds a worker\n"
        "from datetime import timedelta\nfrom airflow.sdk import DAG\n"
        "from trialflow.operators.trial import SubmitTrialOperator\nfrom trialflow.sensors.trial import TrialSensor\n"
        "from trialflow.operators.experiment import StartExperimentOperator\n"
        "with DAG('{DAG_ID}', schedule=None, default_args={'retries': 2, 'retry_delay': timedelta(seconds=1)}):\n"
        "    start = StartExperimentOperator(task_id='start_experiment', config_path='{CONFIG}')\n"
        "    submit = SubmitTrialOperator(task_id='submit', config_path='{CONFIG}', trial_index=0,\n"
        "                                 wait_for_completion=False)\n"
        "    wait = TrialSensor(task_id='wait', submission=submit.output, poke_interval=1, mode='poke')\n"
        "    start >> submit >> wait\n"
    )
    dag_id, _ = harness.experiment("workerkill", config, {"t.py": trial}, dag_source=dag_source)
    killed: list[int] = []

    def kill_sensor(run_id: str) -> None:
        if killed or not launches.exists():
            return
        (ti,) = harness.tis(dag_id, run_id, "wait") or [None]
        if ti and ti["state"] == "running" and ti.get("pid"):
            os.kill(ti["pid"], signal.SIGKILL)
            killed.append(ti["pid"])

    run_id, state = harness.run(dag_id, on_tick=kill_sensor)
    assert killed, "the sensor's task process was never seen running"
    assert state == "success"
    (ti,) = harness.tis(dag_id, run_id, "wait")
    assert ti["try_number"] >= 2
    assert len(launches.read_text().split()) == 1
    result = harness.xcom(dag_id, run_id, "wait")
    assert result["status"] == "SUCCEEDED" and result["intermediate_count"] == 1


def test_a_broken_config_never_creates_a_dag_or_a_run(harness: Harness):
    config = (
        "searchSpace: {x: {_type: uniform, _value: [1, 0]}}\ntrialCommand: x\ntrialConcurrency: 2\n"
        "tuner: {name: TPE}\ntrainingService: {platform: local}\n"
    )
    dag_id, folder = harness.experiment("broken", config)
    deadline = time.monotonic() + 60
    errors: list[dict] = []
    while time.monotonic() < deadline and not errors:
        errors = [
            e
            for e in harness.airflow.api("GET", "/importErrors").json()["import_errors"]
            if e["filename"].endswith("broken.py")
        ]
        time.sleep(0.5)
    assert errors, "the broken DAG file should show an import error"
    assert "searchSpace.x._value: uniform needs low < high" in errors[0]["stack_trace"]
    assert str(folder / "config.yml") in errors[0]["stack_trace"]
    assert harness.airflow.api("GET", f"/dags/{dag_id}").status_code == 404
    assert harness.airflow.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None}).status_code == 404
    harness.dag_files[dag_id].unlink()


NNI_TRIAL = """\
import nni

params = nni.get_next_parameter()
for epoch in range(3):
    nni.report_intermediate_result({"default": params["lr"] * epoch, "loss": 1.0 / (epoch + 1)})
nni.report_final_result({"default": params["lr"] * 10, "loss": 0.25})
"""


def test_unmodified_nni_3_trial_code(harness: Harness, nni_python: str):
    config = (
        f"searchSpace: {{lr: {{_type: loguniform, _value: [0.001, 0.1]}}, "
        f"opt: {{_type: choice, _value: [{{_name: sgd, m: {{_type: uniform, _value: [0, 1]}}}}, {{_name: adam}}]}}}}\n"
        f"trialCommand: {nni_python} mnist.py\ntrialConcurrency: 2\nmaxTrialNumber: 3\n"
        "tuner: {name: TPE, classArgs: {optimize_mode: maximize}}\ntrainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment("nni3", config, {"mnist.py": NNI_TRIAL})
    run_id, state = harness.run(dag_id)
    assert state == "success"
    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED"] * 3
    for row in rows:
        assert row.intermediate_count == 3
        assert row.final_metric == pytest.approx(row.parameters["lr"] * 10)
        assert row.final_metric_raw == {"default": row.final_metric, "loss": 0.25}
        assert row.parameters["opt"]["_name"] in ("sgd", "adam")
    xcom = harness.xcom(dag_id, run_id, "trial", 2)
    assert xcom["final_metric"] == rows[2].final_metric and xcom["intermediate_count"] == 3


def test_every_component_listens_on_loopback_only(harness: Harness):
    import psutil

    pids = set()
    for proc in harness.airflow.processes.values():
        root = psutil.Process(proc.pid)
        pids |= {root.pid} | {child.pid for child in root.children(recursive=True)}
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert listening, "the api-server at least must be listening"
    assert {c.laddr.ip for c in listening} == {"127.0.0.1"}, listening


def test_a_third_party_platform_runs_end_to_end(harness: Harness, tmp_path: Path, monkeypatch):
    """The `echo` platform lives in tests/integration/plugins (on the components' PYTHONPATH) and is
    found only through its `trialflow.platforms` entry point."""
    out = tmp_path / "greetings"
    trial = (
        "import os\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        f"open({str(out)!r}, 'a').write(os.environ['ECHO_GREETING'] + '\\n')\n"
        "trial.report_final_result(p['x'])\n"
    )
    config = simple_config("t.py", 2, 2, service="{platform: echo, greeting: bonjour}")
    dag_id, _ = harness.experiment("echo", config, {"t.py": trial})
    run_id, state = harness.run(dag_id)
    assert state == "success"
    assert out.read_text().split() == ["bonjour", "bonjour"]
    assert [r.status for r in harness.rows(dag_id, run_id)] == ["SUCCEEDED"] * 2
    assert harness.xcom(dag_id, run_id, "trial", 0)["platform"] == "echo"
    # its entry's traits reach the core, the DAG and the pages without trialflow naming it
    from trialflow.config.registry import is_host_bound, platform_entries
    from trialflow.platforms import hosts
    from trialflow.platforms.base import experiment_id_for

    # (the registry alone: the config loader's validators keep the platforms they were built with)
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))  # as on the components' path
    platform_entries.cache_clear()
    try:
        assert is_host_bound("echo") and not is_host_bound("remote")
        assert hosts.placement_problem(["echo"], {"echo"}, "CeleryExecutor", None) is not None
    finally:
        monkeypatch.undo()
        platform_entries.cache_clear()
    experiment = experiment_id_for(dag_id, run_id)
    record = harness.store.trial(harness.store.find_trial_id(experiment, 0))
    assert record.handle["log_files"] == ["stdout", "stderr"] and record.handle["location"].startswith("on ")
    from tests.helpers.pages import UiSetup

    passwords = json.loads((harness.airflow.home / "passwords.json").read_text())
    detail = (
        UiSetup(harness, dag_id, run_id, experiment, "", passwords).get(f"experiments/{experiment}/trials/0").json()
    )
    assert {part["name"] for part in detail["log"]} == {"stdout", "stderr"}
    assert detail["location"] == record.handle["location"]
