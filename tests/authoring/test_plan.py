"""DAG plans: the full config check once per change of its files, not at every DAG parse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trialflow.authoring.plan import DagPlan, cache_dir, cached_plan, load_plan
from trialflow.config import ConfigError

CONFIG = """\
experimentName: planned
searchSpaceFile: space.json
trialCommand: python3 t.py
trialConcurrency: 3
maxTrialNumber: 7
tuner: {name: TPE, classArgs: {optimize_mode: minimize}}
assessor: {name: Medianstop}
trainingService: {platform: local}
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("TRIALFLOW_CACHE_DIR", str(tmp_path / "plans"))
    (tmp_path / "space.json").write_text('{"x": {"_type": "uniform", "_value": [0, 1]}}')
    (tmp_path / "t.py").write_text("print(1)\n")
    path = tmp_path / "config.yml"
    path.write_text(CONFIG)
    return path


def test_a_checked_config_is_planned_once_and_read_back(config: Path):
    assert cached_plan(config) is None
    plan = load_plan(config)
    assert plan == DagPlan(
        config_path=str(config),
        experiment_name="planned",
        trial_count=7,
        trial_concurrency=3,
        unbounded=False,
        platforms=("local",),
        host_bound=("local",),
        algorithm_kind="tuner",
        algorithm="TPE",
        assessor="Medianstop",
        optimize_mode="minimize",
    )
    assert cached_plan(config) == plan
    assert len(list(cache_dir().glob("*.json"))) == 1


@pytest.mark.parametrize("edit", ["config", "space"])
def test_a_changed_file_is_checked_again(config: Path, edit: str):
    load_plan(config)
    if edit == "config":
        config.write_text(CONFIG.replace("maxTrialNumber: 7", "maxTrialNumber: 9"))
        assert cached_plan(config) is None and load_plan(config).trial_count == 9
    else:  # the search space file is part of the plan's sources; a broken one is refused again
        (config.parent / "space.json").write_text('{"x": {"_type": "uniform", "_value": [1]}}')
        assert cached_plan(config) is None
        with pytest.raises(ConfigError, match="space.json"):
            load_plan(config)


def test_a_broken_config_is_never_kept(config: Path):
    config.write_text(CONFIG.replace("trialConcurrency: 3", "trialConcurrency: zero"))
    for _ in range(2):
        with pytest.raises(ConfigError, match="trialConcurrency"):
            load_plan(config)
    assert not list(cache_dir().glob("*.json"))


def test_a_damaged_or_forged_entry_means_a_full_check(config: Path):
    load_plan(config)
    (entry,) = cache_dir().glob("*.json")
    for text in ("{not json", json.dumps({"files": [], "plan": {}}), json.dumps({"plan": {"x": 1}})):
        entry.write_text(text)
        assert cached_plan(config) is None
        assert load_plan(config).trial_count == 7  # checked again and kept again
    forged = json.loads(entry.read_text())
    forged["files"][str(config)] = "0" * 64  # a plan that claims other contents
    forged["plan"]["trial_count"] = 10_000
    entry.write_text(json.dumps(forged))
    assert load_plan(config).trial_count == 7


def test_an_unwritable_cache_only_costs_the_check(config: Path, monkeypatch, tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TRIALFLOW_CACHE_DIR", str(blocker / "plans"))
    assert load_plan(config).trial_count == 7
    assert cached_plan(config) is None


@pytest.mark.slow
def test_a_planned_dag_parses_without_the_config_models(config: Path):
    """What Airflow pays at every parse and in every task process once the plan is kept."""
    (config.parent / "dag.py").write_text(
        f"from trialflow.dag import experiment_dag\ndag = experiment_dag({str(config)!r})\n"
    )
    probe = (
        "import sys, runpy\nns = runpy.run_path(sys.argv[1])\n"
        "print(ns['dag'].task_ids, sorted(m for m in ('optuna', 'trialflow.config.model', "
        "'trialflow.experiment', 'airflow.models.dagrun') if m in sys.modules))\n"
    )
    dag_file = str(config.parent / "dag.py")

    def parse() -> str:  # a fresh process, as Airflow parses (the monkeypatched cache folder included)
        return subprocess.run(
            [sys.executable, "-c", probe, dag_file], env=dict(os.environ), text=True, capture_output=True, check=True
        ).stdout

    first, again = parse(), parse()
    assert "trialflow.config.model" in first  # the full check, the first time
    assert again.strip() == (
        "['start_experiment', 'trial', 'end_experiment', 'watch_trials', 'continue_experiment', 'publish_best'] []"
    )


def test_a_failed_write_leaves_no_temporary_file(config: Path, monkeypatch):
    def refuse(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("trialflow.authoring.plan.os.replace", refuse)
    assert load_plan(config).trial_count == 7  # the check's answer, kept or not
    assert list(cache_dir().iterdir()) == []


def test_a_custom_tuner_and_assessor_are_planned_by_their_class(config: Path):
    (config.parent / "mine.py").write_text("class T: pass\nclass A: pass\n")
    config.write_text(
        CONFIG.replace(
            "{name: TPE, classArgs: {optimize_mode: minimize}}", "{className: mine.T, codeDirectory: .}"
        ).replace("{name: Medianstop}", "{className: mine.A, codeDirectory: .}")
    )
    plan = load_plan(config)
    assert (plan.algorithm, plan.assessor) == ("mine.T", "mine.A")
