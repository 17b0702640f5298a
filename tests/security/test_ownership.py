"""One DAG's run never reaches another DAG's experiment (ids are guessable: a hash of names).

A person allowed to trigger DAG A names DAG B's experiment in A's run conf, or the id a future
run of B will get: the start step refuses, and the store is as it was.
"""

from __future__ import annotations

import sys

import pytest

from trialflow.platforms.base import experiment_id_for
from trialflow.runs import ExperimentNotOwned, allot_window, check_owner

CONFIG = f"""\
searchSpace: {{x: {{_type: choice, _value: [1, 2, 3]}}}}
trialCommand: {sys.executable} t.py
trialConcurrency: 1
maxTrialNumber: 1
tuner: {{name: Random}}
trainingService: {{platform: local}}
"""
TRIAL = "import trialflow.trial as t\np = t.get_next_parameter()\nt.report_final_result(p['x'])\n"


def test_a_store_check_refuses_other_dags_experiments(tmp_path, store):
    theirs = experiment_id_for("dag_b", "run-1")
    store.open_experiment(theirs)
    store.set_experiment_attrs(theirs, {"dag_id": "dag_b"})
    check_owner(store, theirs, "dag_b", {"experiment_id": theirs})  # its own DAG may name it
    with pytest.raises(ExperimentNotOwned, match="not an experiment of DAG 'dag_a'"):
        check_owner(store, theirs, "dag_a", {"experiment_id": theirs})
    with pytest.raises(ExperimentNotOwned, match="belongs to another DAG"):
        check_owner(store, theirs, "dag_a", {})
    future = experiment_id_for("dag_b", "run-2")
    with pytest.raises(ExperimentNotOwned, match="not an experiment of DAG 'dag_a'") as refused:
        check_owner(store, future, "dag_a", {"experiment_id": future})
    # the same words whether the id exists elsewhere or not at all: nothing about B leaks
    assert str(refused.value).replace(future, theirs) == str(
        pytest.raises(ExperimentNotOwned, check_owner, store, theirs, "dag_a", {"experiment_id": theirs}).value
    )
    check_owner(store, experiment_id_for("dag_a", "r"), "dag_a", {})  # a new experiment of its own
    assert not store.experiment_exists(future)


def test_experiment_ids_do_not_collide_in_practice():
    """Issue 37 (2): 28 bits gave two manual runs of one DAG milliseconds apart one id (a
    hundred thousand run ids of one DAG held ~19 collisions). 80 bits: none, and no offline
    search reaches another DAG's id."""
    runs = [f"manual__2026-11-26T04:00:00.{us:06d}+00:00" for us in range(100_000)]
    ids = {experiment_id_for("dag_a", run) for run in runs}
    assert len(ids) == len(runs)
    assert all(len(i) == 17 and i.isascii() and i.isalnum() and i == i.lower() for i in list(ids)[:100])


def test_another_run_of_the_same_dag_landing_on_an_id_is_refused(tmp_path, store):
    """Behind the width: a run whose own id finds an experiment of its DAG that some other run
    created does not run its trials inside it."""
    from trialflow.experiment.run_windows import key_of

    taken = experiment_id_for("dag_a", "r1")
    store.open_experiment(taken)
    store.set_experiment_attrs(taken, {"dag_id": "dag_a", "run_id": "r1", key_of("r1"): {"first_index": 0}})
    with pytest.raises(ExperimentNotOwned, match="another run's of DAG 'dag_a'"):
        check_owner(store, taken, "dag_a", {}, "r2")
    check_owner(store, taken, "dag_a", {}, "r1")  # a cleared run re-opens its own
    check_owner(store, taken, "dag_a", {}, "r2", shared=True)  # scheduledRuns: continue, one study
    check_owner(store, taken, "dag_a", {"experiment_id": taken}, "r2")  # named on purpose
    # A start step that died after writing its run id, before its window: its retry goes on.
    store.set_experiment_attrs(taken, {"run_id": "r3"})
    check_owner(store, taken, "dag_a", {}, "r3")


@pytest.mark.integration
def test_a_run_conf_cannot_take_over_or_plant_in_another_dags_experiment(harness):
    dag_b, _ = harness.experiment("owner_b", CONFIG, {"t.py": TRIAL})
    dag_a, _ = harness.experiment("attacker_a", CONFIG, {"t.py": TRIAL})
    run_b, state = harness.run(dag_b)
    assert state == "success"
    store = harness.store
    victim = experiment_id_for(dag_b, run_b)
    before = (store.experiment_attrs(victim), store.trial_rows(victim))

    harness.airflow.wait_for_dag(dag_a, harness.dag_files[dag_a], timeout=90)
    future = experiment_id_for(dag_b, "manual__2099-01-01T00:00:00+00:00")
    for named in (victim, future):
        run_a = harness.airflow.trigger(dag_a, conf={"experiment_id": named})
        _, state = harness.wait(dag_a, run_a, timeout=180)
        states = {ti["task_id"]: ti["state"] for ti in harness.airflow.task_instances(dag_a, run_a)}
        assert state == "failed", states
        assert states["start_experiment"] == "failed"
        assert states["trial"] == "upstream_failed"
        assert states["end_experiment"] == "failed"  # and it read nothing of B's trials to report

    after = (store.experiment_attrs(victim), store.trial_rows(victim))
    assert after == before  # B's owner, run, config and trials untouched
    assert after[0]["dag_id"] == dag_b
    assert not store.experiment_exists(future)  # nothing planted for B's future run


def test_a_trial_task_of_a_run_its_start_step_did_not_window_starts_nothing(tmp_path, store):
    """Defence behind the start step: a trial task (say, after a person marked the failed start
    step 'success') finds no window for its run and asks the tuner for nothing."""
    from trialflow.config import load_config
    from trialflow.experiment import Experiment
    from trialflow.lifecycle import trial_lifecycle

    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "eowned01", tmp_path / "work")
    experiment.open(store)
    with pytest.raises(trial_lifecycle.TrialCannotRun, match="its start step did not give it that trial"):
        trial_lifecycle.start_trial(experiment, store, "not-started", 0)
    assert store.trial_rows("eowned01") == []
    allot_window(experiment, store, "started")
    # and only the indexes the window holds: the task past them skips, asking for nothing
    with pytest.raises(trial_lifecycle.TrialNotStarted, match="this run holds"):
        trial_lifecycle.start_trial(experiment, store, "started", 1)
    assert store.trial_rows("eowned01") == []


def test_a_task_group_reaches_its_own_experiment_only(store):
    """Issue 39: two experiment task groups of one DAG are two experiments, each owned by (DAG,
    group); a conf naming the other group's (either conf key) is refused as another DAG's is."""
    from trialflow.experiment import GROUP_ATTR

    ids = {g: experiment_id_for("dag_a", "run-1", g) for g in ("tune_a", "tune_b")}
    assert len({*ids.values(), experiment_id_for("dag_a", "run-1")}) == 3  # a group's id is its own
    assert experiment_id_for("dag_a", "run-1", None) == experiment_id_for("dag_a", "run-1")  # unchanged for DAGs
    for group, eid in ids.items():
        store.open_experiment(eid)
        store.set_experiment_attrs(eid, {"dag_id": "dag_a", GROUP_ATTR: group})
    check_owner(store, ids["tune_a"], "dag_a", {"experiments": {"tune_a": ids["tune_a"]}}, group="tune_a")
    with pytest.raises(ExperimentNotOwned, match="experiments.tune_b: .* not an experiment of task group 'tune_b'"):
        check_owner(store, ids["tune_a"], "dag_a", {"experiments": {"tune_b": ids["tune_a"]}}, group="tune_b")
    with pytest.raises(ExperimentNotOwned, match="conf experiment_id: .* task group 'tune_b' of DAG 'dag_a'"):
        check_owner(store, ids["tune_a"], "dag_a", {"experiment_id": ids["tune_a"]}, group="tune_b")
    with pytest.raises(ExperimentNotOwned, match="belongs to another DAG or task group"):
        check_owner(store, ids["tune_a"], "dag_a", {}, group="tune_b")
    # the DAG's own (group-less) experiment is not a group's either, nor the other way round
    with pytest.raises(ExperimentNotOwned):
        check_owner(store, ids["tune_a"], "dag_a", {"experiment_id": ids["tune_a"]})


def test_a_conf_naming_experiments_per_group_is_read_by_name():
    from trialflow.experiment import experiment_id_for_run, named_experiment

    conf = {"experiments": {"tune_a": "eaaaa"}, "experiment_id": "ebbbb"}
    assert named_experiment(conf, "tune_a") == ("experiments.tune_a", "eaaaa")
    assert named_experiment(conf, "tune_b") == ("experiment_id", "ebbbb")  # the run-wide name
    assert named_experiment(conf) == ("experiment_id", "ebbbb")
    assert named_experiment({}, "tune_a") is None
    with pytest.raises(ValueError, match="conf experiments: expected a mapping of task group id"):
        named_experiment({"experiments": ["eaaaa"]}, "tune_a")

    class Config:
        scheduled_runs = "new"

    with pytest.raises(ValueError, match="conf experiments.tune_a: expected lowercase letters"):
        experiment_id_for_run(Config(), "dag_a", "r", {"experiments": {"tune_a": "../x"}}, "tune_a")
