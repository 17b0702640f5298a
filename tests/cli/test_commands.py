"""The `trialflow` command as a user runs it (subprocesses, real exit codes and streams)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.rows import row
from trialflow.platforms.local import process_alive

TRIALFLOW = [sys.executable, "-m", "trialflow.cli"]
GOOD = """\
experimentName: cli
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}, k: {{_type: choice, _value: [a, b]}}}}
trialCommand: {command}
trialConcurrency: 2
maxTrialNumber: {n}
tuner: {{name: TPE, classArgs: {{optimize_mode: maximize, seed: 5}}}}
trainingService: {{platform: local}}
"""
TRIAL = (
    "import os, sys, time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
    "open('launches.txt', 'a').write(os.environ['NNI_TRIAL_JOB_ID'] + '\\n')\n"
    "time.sleep(float(sys.argv[1]))\ntrial.report_intermediate_result(p['x'] / 2)\n"
    "trial.report_final_result(p['x'])\n"
)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(TRIALFLOW + list(args), capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def experiment(tmp_path: Path):
    def make(n: int = 3, sleep: float = 0.2) -> Path:
        (tmp_path / "t.py").write_text(TRIAL)
        path = tmp_path / "config.yml"
        path.write_text(GOOD.format(command=f"{sys.executable} t.py {sleep}", n=n))
        return path

    return make


def test_validate_ok_and_failures(experiment, tmp_path):
    ok = cli("validate", str(experiment()))
    assert ok.returncode == 0 and "OK" in ok.stderr and ok.stdout == ""
    bad = tmp_path / "bad.yml"
    bad.write_text(GOOD.format(command="x", n=0).replace("platform: local", "platform: local, colour: red"))
    result = cli("validate", str(bad))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{bad}:5: maxTrialNumber: Input should be greater than 0" in result.stderr
    assert "trainingService.colour: unknown key" in result.stderr
    nas = tmp_path / "ppo.yml"
    nas.write_text(GOOD.format(command="x", n=2).replace("name: TPE", "name: PPOTuner"))
    result = cli("validate", str(nas))
    assert result.returncode == 1 and "closest supported choice is 'Evolution'" in result.stderr


def test_validate_says_what_a_config_without_max_trial_number_runs(tmp_path):
    """Not "100 trials": without maxTrialNumber the experiment goes on in follow-on runs."""
    path = tmp_path / "open.yml"
    unbounded = GOOD.format(command="x", n=1).replace("maxTrialNumber: 1\n", "")
    path.write_text(unbounded)
    said = cli("validate", str(path)).stderr
    assert (
        "trials without a limit until you stop it (no maxTrialNumber, no maxExperimentDuration), 100 per DAG run"
        in said
    )
    path.write_text(unbounded + "maxExperimentDuration: 90m\n")
    assert (
        "trials without a limit until maxExperimentDuration (90m), 100 per DAG run" in cli("validate", str(path)).stderr
    )
    path.write_text(GOOD.format(command="x", n=7))
    assert "; 7 trials, 2 at a time" in cli("validate", str(path)).stderr


def test_convert_prints_a_loadable_v2_config(tmp_path):
    (tmp_path / "space.json").write_text('{"x": {"_type": "choice", "_value": [1, 2]}}')
    v1 = tmp_path / "v1.yml"
    v1.write_text(
        "authorName: a\nexperimentName: e\ntrialConcurrency: 1\nmaxExecDuration: 1h\nmaxTrialNum: 3\n"
        "trainingServicePlatform: remote\nsearchSpacePath: space.json\ntuner: {builtinTunerName: TPE}\n"
        "trial: {command: python3 t.py, codeDir: .}\n"
        "machineList: [{ip: h, username: u, passwd: hunter2, passphrase: pp}]\n"
    )
    result = cli("convert", str(v1))
    assert result.returncode == 0, result.stderr
    v2 = yaml.safe_load(result.stdout)
    assert v2["maxExperimentDuration"] == 3600 and v2["trainingService"]["platform"] == "remote"
    assert v2["searchSpace"] == {"x": {"_type": "choice", "_value": [1, 2]}}
    assert "hunter2" not in result.stdout and "pp" not in str(v2["trainingService"]["machineList"][0].values())


def test_render_shows_one_trial_without_running_it(experiment, tmp_path):
    config = experiment()
    result = cli("render", str(config), "--trial-index", "1")
    assert result.returncode == 0, result.stderr
    out = yaml.safe_load(result.stdout)
    assert out["trial_index"] == 1 and out["trial_id"].endswith("-0001")
    sub = out["submission"]
    assert sub["platform"] == "local" and sub["working_directory"] == str(tmp_path)
    assert sub["environment"]["NNI_TRIAL_SEQ_ID"] == "1"
    assert sub["parameter.cfg"]["parameters"] == out["parameters"]
    assert not Path(sub["trial_directory"]).exists()
    # the folder `trialflow run` would use (its home beside the config), not one under ~
    assert Path(sub["trial_directory"]).is_relative_to(config.parent / ".trialflow" / "experiments")
    assert cli("render", str(config), "--trial-index", "1").stdout == result.stdout  # seeded: reproducible
    elsewhere = yaml.safe_load(cli("render", str(config), "--home", str(tmp_path / "h")).stdout)
    assert Path(elsewhere["submission"]["trial_directory"]).is_relative_to(tmp_path / "h" / "experiments")


def test_render_refuses_an_index_outside_the_experiment(experiment):
    result = cli("render", str(experiment(n=3)), "--trial-index", "3")
    assert result.returncode == 1 and "outside this experiment's trials 0..2" in result.stderr
    assert "Traceback" not in result.stderr


def test_redaction_masks_secret_keys_at_any_depth():
    from trialflow.config.redaction import redact

    data = {
        "env": {"MY_TOKEN": "t", "PATH": "/bin"},
        "machines": [{"password": "p", "host": "h"}],
        "sshPassphrase": "pp",
        "api_key": "k",
        "empty_password": "",
    }
    assert redact(data) == {
        "env": {"MY_TOKEN": "***", "PATH": "/bin"},
        "machines": [{"password": "***", "host": "h"}],
        "sshPassphrase": "***",
        "api_key": "***",
        "empty_password": "",
    }


def test_run_refuses_a_broken_config_before_starting_anything(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(GOOD.format(command="x", n=2).replace("trialConcurrency: 2", "trialConcurrency: -1"))
    result = cli("run", str(bad), "--json")
    assert result.returncode == 1 and "trialConcurrency" in result.stderr and result.stdout == ""
    assert not (tmp_path / ".trialflow").exists()


def test_run_prepares_its_experiment_without_importing_airflow(experiment):
    """`trialflow run` reads the config, names the DAG and sets up its private Airflow before any
    component exists; importing Airflow there cost ~2.8 s of its start-up (measured)."""
    probe = (
        "import sys\nfrom trialflow.cli.runner import ExperimentRun\nrun = ExperimentRun(sys.argv[1])\n"
        "print(run.dag_id, sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] == 'airflow'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(experiment())], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["trialflow_cli", "[]"]


@pytest.mark.integration
def test_run_end_to_end_then_stops_its_airflow(experiment, tmp_path):
    config = experiment(n=3)
    result = cli("run", str(config), "--json", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    launches = (tmp_path / "launches.txt").read_text().split()
    assert sorted(launches) == sorted(t["trial_id"] for t in summary["trials"])
    assert summary["state"] == "success" and summary["optimize_mode"] == "maximize"
    assert [t["status"] for t in summary["trials"]] == ["SUCCEEDED"] * 3
    assert all(t["intermediate_count"] == 1 and t["final_metric"] == t["parameters"]["x"] for t in summary["trials"])
    assert summary["best"]["final_metric"] == max(t["final_metric"] for t in summary["trials"])
    assert all("message" in t for t in summary["trials"])  # issue 36 (2): why a trial failed stays
    # issue 36 (2): where to watch it is said once Airflow is up, before the trials end
    assert "Watch it: http://127.0.0.1:" in result.stderr and "passwords.json" in result.stderr
    home = tmp_path / ".trialflow"
    assert (home / "experiments.db").exists() and (home / "dags" / "trialflow_cli.py").exists()
    assert (home / ".airflowignore").read_text().splitlines()[1:] == ["*", ".*"]  # issue 36 (3)
    leftovers = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True).stdout
    assert leftovers == "", "Airflow components must be stopped on exit"

    # Run again (NNI's `nnictl resume`) and --new: tests/cli/test_warm_home.py, attached to a
    # kept Airflow (here they cost a second cold start: 88 s for the three runs).


@pytest.mark.integration
def test_ctrl_c_cancels_trials_and_stops_airflow(experiment, tmp_path):
    config = experiment(n=4, sleep=300)
    # Ctrl-C as a terminal delivers it, even when the suite itself runs in the background (a
    # shell's `&` starts it with SIGINT ignored, which the child would inherit and never see).
    proc = subprocess.Popen(
        TRIALFLOW + ["run", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    trials = tmp_path / ".trialflow" / "experiments"
    deadline = time.monotonic() + 240
    pids: list[int] = []
    while time.monotonic() < deadline and len(pids) < 2:
        pids = [int(p.read_text().split()[0]) for p in trials.glob("*/trials/*/.trialflow/pid")]
        time.sleep(0.5)
    assert len(pids) == 2, "two trials should be running (trialConcurrency: 2)"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "Cancelled 2 running trial(s)" in err, err[-3000:]
    assert "USER_CANCELED" in out
    assert not any(process_alive(pid) for pid in pids)
    assert subprocess.run(["pgrep", "-f", str(tmp_path / ".trialflow")], capture_output=True).stdout == b""


@pytest.mark.slow
def test_experiments_trials_and_export_read_the_store(tmp_path):
    from tests.helpers.filled_store import fill
    from trialflow.store.experiment_store import ExperimentStore, sqlite_url

    fill(ExperimentStore(sqlite_url(tmp_path / "experiments.db")))
    listed = json.loads(cli("experiments", "--home", str(tmp_path), "--json").stdout)
    assert [e["experiment_id"] for e in listed] == ["eq000001"] and listed[0]["counts"]["SUCCEEDED"] == 5
    table = cli("trials", "eq000001", "--home", str(tmp_path), "--status", "SUCCEEDED", "--sort", "metric", "--desc")
    assert (
        table.returncode == 0 and "5 trials" in table.stdout and table.stdout.index("1.7") < table.stdout.index("1.6")
    )
    page = json.loads(cli("trials", "eq000001", "--home", str(tmp_path), "--json", "--limit", "2").stdout)
    assert page["total"] == 8 and len(page["rows"]) == 2
    out = tmp_path / "trials.csv"
    assert cli("export", "eq000001", "--home", str(tmp_path), "-o", str(out)).returncode == 0
    import csv

    assert next(csv.reader(out.open(newline="")))[:3] == ["trial_index", "trial_id", "status"]
    exported = json.loads(cli("export", "eq000001", "--home", str(tmp_path), "--format", "json").stdout)
    assert len(exported) == 8
    nowhere = cli("export", "eq000001", "--home", str(tmp_path), "-o", str(tmp_path / "no" / "such" / "x.csv"))
    assert nowhere.returncode == 1 and "Traceback" not in nowhere.stderr
    assert f"cannot write the export to {tmp_path / 'no' / 'such' / 'x.csv'}: No such file" in nowhere.stderr
    missing = cli("trials", "nope", "--home", str(tmp_path))
    assert missing.returncode == 1 and "no experiment 'nope'" in missing.stderr and "Traceback" not in missing.stderr
    assert "no experiment store" in cli("experiments", "--home", str(tmp_path / "none")).stderr


def test_an_offset_too_large_for_the_store_is_a_usage_error(tmp_path):
    result = cli("trials", "eanything", "--store", f"sqlite:///{tmp_path}/s.db", "--offset", str(10**19))
    assert result.returncode == 2 and "expected 0..2147483647" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_render_keeps_the_azure_sdks_own_noise_out(tmp_path):
    """azure-ai-ml logged six 'experimental class' warnings before render's output."""
    import importlib.util

    if importlib.util.find_spec("azure.ai.ml") is None:  # found, not imported: render imports it
        pytest.skip("the azure extra (make venv installs it)")
    (tmp_path / "t.py").write_text("print(1)\n")
    config = tmp_path / "aml.yml"
    config.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\ntrialConcurrency: 1\n"
        "maxTrialNumber: 2\ntuner: {name: TPE}\ntrainingService:\n  platform: aml\n  dockerImage: python:3.11\n"
        "  subscriptionId: s\n  resourceGroup: g\n  workspaceName: w\n  computeTarget: c\n"
    )
    import os

    # a cloud name an in-process Azure test left in this process's environment is not render's
    env = {k: v for k, v in os.environ.items() if not k.startswith("AZUREML_")}
    result = subprocess.run([*TRIALFLOW, "render", str(config)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "experimental class" not in result.stderr and result.stderr.strip() == ""


@pytest.mark.slow
def test_kill_and_stop_write_the_intent_a_follower_acts_on(tmp_path):
    """`trialflow kill` / `stop` (nnictl trial kill / stop): the request lands in the store with
    who asked; a refused one says why and changes nothing. tests/steering/test_steering.py and
    tests/ui/test_actions.py follow the request to the trial's process."""
    from tests.helpers.filled_store import fill
    from trialflow import steering
    from trialflow.platforms.base import TrialStatus
    from trialflow.store.experiment_store import ExperimentStore, sqlite_url

    store = ExperimentStore(sqlite_url(tmp_path / "experiments.db"))
    fill(store)
    running = [r for r in store.trial_rows("eq000001") if r.status in ("RUNNING", "WAITING")]
    assert running, "the fixture has a running trial"
    index = running[0].trial_index
    killed = cli("kill", "eq000001", str(index), "--home", str(tmp_path))
    assert killed.returncode == 0 and f"trial {index}" in killed.stdout, killed.stderr
    record = store.find_trial("eq000001", index)
    assert (
        steering.stop_requested(store, record.storage_id) == f"killed by {steering.history(store, 'eq000001')[0]['by']}"
    )
    assert steering.history(store, "eq000001")[0]["by"].endswith("(CLI)")
    ended = cli("kill", "eq000001", "0", "--home", str(tmp_path))
    assert ended.returncode == 1 and "already ended" in ended.stderr and "Traceback" not in ended.stderr
    assert cli("kill", "eq000001", "99", "--home", str(tmp_path)).stderr.strip().endswith("(it has not started)")
    stopped = cli("stop", "eq000001", "--home", str(tmp_path))
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert [h["action"] for h in steering.history(store, "eq000001")] == ["kill trial", "stop experiment"]
    assert cli("stop", "nope", "--home", str(tmp_path)).returncode == 1
    assert store.find_trial("eq000001", 0).status == TrialStatus.SUCCEEDED  # untouched


@pytest.mark.slow
def test_limits_shows_and_changes_with_clear_errors(tmp_path):
    from tests.helpers.filled_store import fill
    from trialflow import steering
    from trialflow.store.concurrency_changes import read_concurrency
    from trialflow.store.experiment_store import ExperimentStore, sqlite_url

    store = ExperimentStore(sqlite_url(tmp_path / "experiments.db"))
    fill(store, dag_id="dag_q")
    shown = cli("limits", "eq000001", "--home", str(tmp_path))
    assert shown.returncode == 0 and json.loads(shown.stdout)["maxTrialNumber"] == 8  # the config's
    changed = cli("limits", "eq000001", "--home", str(tmp_path), "--concurrency", "5", "--duration", "2h")
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout)["trialConcurrency"] == 5 and "next parses" in changed.stderr
    assert steering.limits(store, "eq000001")["maxExperimentDuration"] == 7200.0
    assert read_concurrency(store.engine, "dag_q") == 5
    bad = cli("limits", "eq000001", "--home", str(tmp_path), "--duration=-1h")
    assert bad.returncode == 1 and bad.stderr.startswith("maxExperimentDuration: expected a duration")
    assert cli("limits", "eq000001", "--home", str(tmp_path), "--concurrency", "0").returncode == 1
    assert steering.limits(store, "eq000001")["trialConcurrency"] == 5
    # Issue 36 (2): once its runs are over, the command line refuses as the pages do (409 there)
    store.set_experiment_attrs("eq000001", {"run:r1": {"first_index": 0, "count": 8, "ended_at": 1.0}})
    over = cli("limits", "eq000001", "--home", str(tmp_path), "--max-trials", "20")
    assert over.returncode == 1 and "is not running (its runs are over): nothing changed" in over.stderr
    assert steering.limits(store, "eq000001")["maxTrialNumber"] == 8
    assert "is not running" in cli("stop", "eq000001", "--home", str(tmp_path)).stderr


@pytest.mark.slow
def test_add_trial_and_rerun_queue_checked_trials(tmp_path):
    from tests.helpers.filled_store import SPACE, fill
    from trialflow import steering
    from trialflow.store.experiment_store import ExperimentStore, sqlite_url

    store = ExperimentStore(sqlite_url(tmp_path / "experiments.db"))
    fill(store)
    assert "keeps no search space" in cli("add-trial", "eq000001", "--home", str(tmp_path), "--parameters", "{}").stderr
    config = store.experiment_attr("eq000001", "config")
    store.set_experiment_attrs("eq000001", {"config": {**config, "searchSpace": SPACE.raw}})
    point = store.find_trial("eq000001", 0).parameters
    added = cli("add-trial", "eq000001", "--home", str(tmp_path), "--parameters", json.dumps(point))
    assert added.returncode == 0 and "queued" in added.stdout, added.stderr
    bad = cli("add-trial", "eq000001", "--home", str(tmp_path), "--parameters", '{"nope": 1}')
    assert bad.returncode == 1 and bad.stderr.startswith("parameters.") and "Traceback" not in bad.stderr
    broken = cli("add-trial", "eq000001", "--home", str(tmp_path), "--parameters", "{lr: 1")
    assert broken.returncode == 1 and "--parameters: expected a JSON object" in broken.stderr
    rerun = cli("rerun", "eq000001", "--home", str(tmp_path))
    assert rerun.returncode == 0 and "queued again" in rerun.stdout, rerun.stderr
    waiting = steering.waiting_trials(store, "eq000001")
    # one added, the failed and the early-stopped one again
    assert waiting[0]["parameters"] == point and len(waiting) == 3
    assert waiting[1]["reason"].startswith("re-run of trial")


SEVERAL = (
    "from trialflow import trial\np = trial.get_next_parameter()\n"
    "trial.report_final_result({'acc': round(p['x'], 4), 'cost': round(1 + p['x'] ** 2 - (p['k'] == 'b') * 0.1, 4)})\n"
)


# make test-extended (51 s here, a cold Airflow of its own): what it shows is pinned a level down by
# test_the_run_table_marks_the_pareto_set below and tests/store/test_pareto.py's
# test_the_pages_cli_and_export_show_the_same_pareto_set; several objectives under the real scheduler
# stay in tests/ui/test_pipeline_pages.py's pareto page tests.
@pytest.mark.integration
@pytest.mark.extended
def test_run_with_several_objectives_reports_the_pareto_set(tmp_path):
    from tests.helpers.pareto import brute_force

    (tmp_path / "t.py").write_text(SEVERAL)
    config = tmp_path / "config.yml"
    config.write_text(
        GOOD.format(command=f"{sys.executable} t.py", n=6)
        + "objectives: [{metric: acc, mode: maximize}, {metric: cost, mode: minimize}]\n"
    )
    result = cli("run", str(config), "--json", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    points = [[t["values"]["acc"], t["values"]["cost"]] for t in summary["trials"]]
    expected = [summary["trials"][i]["trial_index"] for i in brute_force(points, ["maximize", "minimize"])]
    assert sorted(summary["pareto"]) == expected
    assert summary["best"]["trial_index"] in expected


def test_the_run_table_marks_the_pareto_set(tmp_path, capsys):
    from trialflow.cli.progress import RunDisplay
    from trialflow.cli.runner import RunResult

    rows = [
        row(i, parameters={"x": i}, values={"acc": acc, "cost": cost})
        for i, (acc, cost) in enumerate([(0.9, 3.0), (0.5, 1.0), (0.4, 2.0)])
    ]
    result = RunResult("e1", "d", "r", "success", rows, rows[0], "maximize", tmp_path, pareto=[0, 1])
    RunDisplay(3, quiet=True).results(result)
    out = capsys.readouterr().out
    assert "Pareto set (*): 2 trials" in out
    marked = [line for line in out.splitlines() if "acc=" in line and "*" in line.split("acc=")[0]]
    assert len(marked) == 2 and "acc=0.4" not in "".join(marked)


DOWNSTREAM = """\
# An Airflow DAG downstream of the experiment: it writes the parameters it was handed.
import json
from airflow.sdk import dag, task
from trialflow.assets import best_parameters, best_parameters_asset


@dag(schedule=[best_parameters_asset({dag_id!r})], catchup=False)
def after_tuning():
    @task
    def train(**context):
        best = best_parameters(context)
        open({out!r}, "w").write(json.dumps({{"trial_id": best.trial_id, "parameters": best.parameters}}))

    train()


after_tuning()
"""


def test_a_missing_downstream_file_is_refused_before_anything_starts(experiment, tmp_path):
    """Issue 36 (3): `--downstream FILE` names a DAG file to run beside the experiment. Its run on
    a private Airflow, handing the best parameters on, is tests/cli/test_warm_home.py's first run
    (it had a cold Airflow of its own here: 56 s in CI)."""
    missing = cli("run", str(experiment(n=2)), "--downstream", str(tmp_path / "nope.py"))
    assert missing.returncode == 1 and "--downstream" in missing.stderr and "Traceback" not in missing.stderr
    assert "no such DAG file" in missing.stderr
    assert not (tmp_path / ".trialflow" / "airflow").exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["db", "check", "--store", "nonsense"], "the store URL (?://...) is not one SQLAlchemy reads"),
        # issue 46, 7: an unquoted '@' in the password moved the split; int() repeated the rest
        (
            ["db", "check", "--store", "postgresql://alice:Top@hunter2:PW99@127.0.0.1:5999/x"],
            "the store URL (postgresql://...) holds more than one '@' before its host",
        ),
        (
            ["experiments", "--store", "postgresql://alice:Top@hunter2:PW99@127.0.0.1:5999/x"],
            "a password holding '@', ':' or '/' must be percent-encoded",
        ),
        (["db", "upgrade", "--store", "postgresql+psycopg://u:hunter2@127.0.0.1:1/x"], "the store's database failed"),
        (["experiments", "--store", "postgresql+psycopg://u:hunter2@127.0.0.1:1/x"], "the store's database failed"),
    ],
)
def test_a_store_that_cannot_be_opened_is_said_without_a_traceback_or_its_password(argv, said, capsys):
    from trialflow.cli.commands import main

    assert main(argv) == 1
    err = capsys.readouterr().err
    assert said in err and "hunter2" not in err and "PW99" not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def _tables(path) -> list[str]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))


READING = [
    ["db", "check"],
    ["db", "upgrade"],
    ["experiments"],
    ["trials", "e1"],
    ["export", "e1"],
    ["kill", "e1", "0"],
    ["stop", "e1"],
    ["sync-mlflow", "e1"],
    ["update-searchspace", "e1"],
]


@pytest.mark.parametrize("argv", READING, ids=lambda a: " ".join(a))
def test_a_foreign_database_is_named_and_never_written(argv, tmp_path, capsys):
    """Issue 46, 6: `db check` called a foreign SQLite file current, and `experiments` then wrote
    about 30 tables into it."""
    import sqlite3

    from trialflow.cli.commands import main

    foreign = tmp_path / "app.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    before = foreign.read_bytes()
    assert main([*argv, "--store", f"sqlite:///{foreign}"]) == 1
    err = capsys.readouterr().err
    assert "not a trialflow experiment store (it holds other tables: users)" in err and "Traceback" not in err
    assert _tables(foreign) == ["users"] and foreign.read_bytes() == before


@pytest.mark.parametrize("argv", READING, ids=lambda a: " ".join(a))
def test_a_store_path_that_does_not_exist_is_never_created(argv, tmp_path, capsys):
    from trialflow.cli.commands import main

    missing = tmp_path / "typo" / "experiments.db"
    missing.parent.mkdir()
    assert main([*argv, "--store", f"sqlite:///{missing}"]) == 1
    assert "no experiment store there (no such file" in capsys.readouterr().err
    assert list(missing.parent.iterdir()) == []  # not even a 0-byte file


def test_an_empty_database_and_a_text_file_are_said_in_one_line(tmp_path, capsys):
    from trialflow.cli.commands import main

    empty = tmp_path / "empty.db"
    empty.touch()
    assert main(["db", "check", "--store", f"sqlite:///{empty}"]) == 0
    assert "no trialflow store here yet" in capsys.readouterr().out
    assert main(["experiments", "--store", f"sqlite:///{empty}"]) == 1
    assert "the database is empty: no experiment store there" in capsys.readouterr().err
    assert empty.stat().st_size == 0
    text = tmp_path / "notes.db"
    text.write_text("not a database at all\n" * 10)
    for argv in (["db", "check"], ["db", "upgrade"], ["experiments"]):
        assert main([*argv, "--store", f"sqlite:///{text}"]) == 1
        err = capsys.readouterr().err
        assert err.strip() == "the store's database failed: file is not a database", err


def test_an_interrupted_upgrade_is_one_line_and_leaves_the_store(tmp_path, capsys, monkeypatch):
    import sqlite3
    from contextlib import closing

    from trialflow.cli.commands import main
    from trialflow.store import schema as store_schema
    from trialflow.store.experiment_store import ExperimentStore, sqlite_url

    path = tmp_path / "s.db"
    ExperimentStore(sqlite_url(path)).engine.dispose()  # its WAL folded in now, not at a later GC

    def interrupted(engine):
        raise KeyboardInterrupt

    def content() -> list[str]:  # what the store holds (the file's bytes move with WAL checkpoints)
        with closing(sqlite3.connect(path)) as conn:
            return list(conn.iterdump())

    monkeypatch.setattr(store_schema, "upgrade", interrupted)
    before = content()
    assert main(["db", "upgrade", "--store", sqlite_url(path)]) == 1
    err = capsys.readouterr().err
    assert err.strip().endswith("upgrade interrupted; the store is as it was") and "Traceback" not in err
    assert content() == before


@pytest.mark.parametrize(
    ("driver", "said"),
    [
        (
            'connection to "postgresql://u:hunter2@db/x" failed\ndetail',
            'connection to "postgresql://u:***@db/x" failed',
        ),
        ("could not connect password=hunter2 host=db", "could not connect password=*** host=db"),
        ("", "Exception"),  # a driver that says nothing: its error's type, not an IndexError
        ("x " * 3000, "x " * 150),
        ("x" * 5000, "Exception"),  # one word past the cap: none of it said (it may be a secret)
        # the bound falls inside the URL's password: masked whole, not cut to its first letters
        ("x" * 280 + " postgresql://u:hunter2secret@db/x", ("x" * 280 + " postgresql://u:***@db/x")[:300]),
    ],
)
def test_what_the_database_driver_said_is_one_bounded_line_with_secrets_masked(driver, said):
    import sqlalchemy as sa

    from trialflow.cli.failures import _driver_said

    assert _driver_said(sa.exc.OperationalError("SELECT 1", {}, Exception(driver))) == said


def test_a_driver_line_capped_inside_a_password_keeps_none_of_it():
    # Long passwords mask to "***", so what stood past the 4,096-character cap comes within the
    # 300 characters said: the cap must not leave the start of a password there.
    import sqlalchemy as sa

    from trialflow.cli.failures import _driver_said

    before = " ".join("postgresql://u:" + "p" * 512 + "@db" for _ in range(7))
    before += " postgresql://u:" + "p" * (4096 - len(before) - 39) + "@db "  # "hunt" ends at 4096
    line = before + "postgresql://u:hunter2secret@db"
    assert line[4092:4096] == "hunt"
    said = _driver_said(sa.exc.OperationalError("SELECT 1", {}, Exception(line)))
    assert said.count("postgresql://u:***@db") == 8 and "hunt" not in said and "ppp" not in said
