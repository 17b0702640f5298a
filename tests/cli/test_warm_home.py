"""A home's private Airflow kept up between runs (issue 47, 2): `trialflow up`, runs that attach
to it one after the other (the first with a DAG downstream of its Asset, issue 36, 3; the second
resuming it) and two at once (one --new), a killed scheduler replaced by the next run, and
`trialflow down` leaving no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_commands import DOWNSTREAM, GOOD, TRIAL, cli
from trialflow.cli import home_airflow

pytestmark = pytest.mark.integration


def configs(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "t.py").write_text(TRIAL)
    paths = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.yml"
        text = GOOD.format(command=f"{sys.executable} t.py 0.2", n=2)
        path.write_text(text.replace("experimentName: cli", f"experimentName: warm_{name}"))
        paths.append(path)
    return paths[0], paths[1]


def home_processes(home: Path) -> list[str]:
    """Every process of the home's Airflow: its components carry the home in their
    environment; LocalExecutor workers are found by their process group (the scheduler's)."""
    found = subprocess.run(["pgrep", "-af", "airflow"], capture_output=True, text=True).stdout.splitlines()
    mine = []
    for line in found:
        pid = int(line.split()[0])
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"AIRFLOW_HOME={home / 'airflow'}".encode() in environ:
            mine.append(line)
    return mine


def test_runs_attach_to_a_kept_airflow_and_a_dead_one_is_replaced(tmp_path):
    a, b = configs(tmp_path)
    home = tmp_path / ".trialflow"
    up = cli("up", str(a), timeout=300)
    assert up.returncode == 0, up.stderr[-3000:]
    assert "Airflow started: http://127.0.0.1:" in up.stderr
    kept = home_airflow.read(home / "airflow")
    assert kept is not None and kept.keep and kept.alive() and kept.users == []
    try:
        # `--downstream FILE` puts the DAG scheduled on the experiment's Asset on the same
        # Airflow; run waits for the run the published Asset starts, whose task gets exactly the
        # best parameters
        from trialflow.authoring.plan import default_dag_id
        from trialflow.config import load_config

        out, down = tmp_path / "handed.json", tmp_path / "after_tuning.py"
        down.write_text(DOWNSTREAM.format(dag_id=default_dag_id(a, load_config(a).experiment_name), out=str(out)))
        first = cli("run", str(a), "--json", "--downstream", str(down), timeout=300)
        assert first.returncode == 0, first.stderr[-3000:]
        assert "Using the Airflow already up in this home" in first.stderr
        assert "Preparing Airflow's database" not in first.stderr
        summary = json.loads(first.stdout)
        assert summary["state"] == "success"
        (downstream,) = summary["downstream"]
        assert (downstream["dag_id"], downstream["state"]) == ("after_tuning", "success")
        handed = json.loads(out.read_text())
        assert handed == {"trial_id": summary["best"]["trial_id"], "parameters": summary["best"]["parameters"]}
        assert "Downstream of the experiment: after_tuning" in first.stderr

        # Run again: NNI's `nnictl resume`. The same experiment; its finished trials are not run again
        launched = (tmp_path / "launches.txt").read_text().split()
        again = cli("run", str(a), "--json", timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "Resuming experiment " + summary["experiment_id"] in again.stderr
        resumed = json.loads(again.stdout)
        assert resumed["experiment_id"] == summary["experiment_id"] and resumed["trials"] == summary["trials"]
        assert (tmp_path / "launches.txt").read_text().split() == launched

        # two runs at once, of two experiments of the home: both attach, both finish
        started = [
            subprocess.Popen(
                [sys.executable, "-m", "trialflow.cli", "run", str(p), "--json", *extra],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for p, extra in ((a, ["--new"]), (b, []))
        ]
        outcomes = [proc.communicate(timeout=300) for proc in started]
        for proc, (out, err) in zip(started, outcomes, strict=True):
            assert proc.returncode == 0, err[-3000:]
            assert "Using the Airflow already up in this home" in err
            summary = json.loads(out)
            assert summary["state"] == "success" and [t["status"] for t in summary["trials"]] == ["SUCCEEDED"] * 2
        assert json.loads(outcomes[0][0])["experiment_id"] != json.loads(first.stdout)["experiment_id"]
        running = home_airflow.read(home / "airflow")
        assert running is not None and running.components == kept.components and running.users == []

        # the scheduler dies: the next run notices, replaces the whole Airflow, and keeps it kept
        os.kill(kept.components["scheduler"].pid, signal.SIGKILL)
        time.sleep(0.5)
        replaced = cli("run", str(b), "--json", "--new", timeout=300)
        assert replaced.returncode == 0, replaced.stderr[-3000:]
        assert "Starting Airflow" in replaced.stderr and "Using the Airflow" not in replaced.stderr
        now = home_airflow.read(home / "airflow")
        assert now is not None and now.keep and now.alive()
        assert all(not p.alive() for p in kept.components.values())
    finally:
        down = cli("down", "--home", str(home), timeout=120)
    assert down.returncode == 0 and "stopped" in down.stderr, down.stderr
    assert home_processes(home) == [], "every component and worker of the home is gone"
    assert home_airflow.read(home / "airflow") is None
    again = cli("down", "--home", str(home))
    assert again.returncode == 0 and "not up" in again.stderr
