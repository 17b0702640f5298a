"""Which experiment a DAG run drives, which trial indexes it owns, and its deadline."""

from __future__ import annotations

from pathlib import Path

import pytest

from trialflow.config import load_config
from trialflow.experiment import Experiment, experiment_id_for_run, trial_count
from trialflow.experiment.run_windows import RunWindow
from trialflow.platforms.base import experiment_id_for
from trialflow.runs import allot_window, continuation
from trialflow.tuning.asker import ask


def _config(tmp_path: Path, extra: str = "", space: str = "{x: {_type: uniform, _value: [0, 1]}}"):
    path = tmp_path / "c.yml"
    path.write_text(
        f"searchSpace: {space}\ntrialCommand: 'true'\ntrialConcurrency: 1\n"
        f"trainingService: {{platform: local}}\n{extra}"
    )
    return load_config(path)


def test_each_run_is_its_own_experiment_by_default(tmp_path):
    config = _config(tmp_path, "tuner: {name: TPE}\n")
    assert experiment_id_for_run(config, "d", "r1") == experiment_id_for("d", "r1")
    assert experiment_id_for_run(config, "d", "r1") != experiment_id_for_run(config, "d", "r2")


def test_continue_keeps_one_study_for_the_dag(tmp_path):
    config = _config(tmp_path, "tuner: {name: TPE}\nscheduledRuns: continue\n")
    assert experiment_id_for_run(config, "d", "r1") == experiment_id_for_run(config, "d", "r2")
    assert experiment_id_for_run(config, "d", "r1") != experiment_id_for_run(config, "other", "r1")


def test_a_run_may_name_its_experiment(tmp_path):
    config = _config(tmp_path, "tuner: {name: TPE}\n")
    assert experiment_id_for_run(config, "d", "r9", {"experiment_id": "e1234567"}) == "e1234567"
    with pytest.raises(ValueError, match="dag run conf experiment_id"):
        experiment_id_for_run(config, "d", "r9", {"experiment_id": "../../etc"})


def test_scheduled_runs_rejects_other_values(tmp_path):
    from trialflow.config import ConfigError

    with pytest.raises(ConfigError, match="scheduledRuns"):
        _config(tmp_path, "tuner: {name: TPE}\nscheduledRuns: sometimes\n")


@pytest.mark.parametrize(
    "tuner, space, max_trials, expected",
    [
        ("TPE", "{x: {_type: uniform, _value: [0, 1]}}", 7, 7),
        ("TPE", "{x: {_type: uniform, _value: [0, 1]}}", None, 100),  # per run: the next run goes on
        ("GridSearch", "{x: {_type: choice, _value: [1, 2, 3]}}", None, 3),
        ("GridSearch", "{x: {_type: choice, _value: [1, 2, 3]}}", 10, 3),  # NNI stops when the grid is done
        ("GridSearch", "{x: {_type: choice, _value: [1, 2, 3]}}", 2, 2),
        ("BatchTuner", "{combine_params: {_type: choice, _value: [{a: 1}, {a: 2}]}}", 9, 2),
    ],
)
def test_trial_count(tmp_path, tuner, space, max_trials, expected):
    extra = f"tuner: {{name: {tuner}}}\n" + (f"maxTrialNumber: {max_trials}\n" if max_trials else "")
    assert trial_count(_config(tmp_path, extra, space)) == expected


def test_runs_that_continue_a_study_get_consecutive_indexes(tmp_path, store):
    config = _config(
        tmp_path, "tuner: {name: TPE}\nmaxTrialNumber: 4\nmaxExperimentDuration: 1h\nscheduledRuns: continue\n"
    )
    experiment = Experiment(config, "ecccccc1", tmp_path / "work")
    experiment.open(store)
    first = allot_window(experiment, store, "r1", now=1000.0)
    second = allot_window(experiment, store, "r2", now=2000.0)
    assert (first.first_index, first.count, first.deadline) == (0, 4, 4600.0)
    assert (second.first_index, second.count, second.deadline) == (4, 4, 5600.0)
    # r1 cleared and started again: same indexes, a fresh deadline
    again = allot_window(experiment, store, "r1", now=9000.0)
    assert (again.first_index, again.deadline) == (0, 12600.0)
    assert RunWindow.of(store.experiment_attrs("ecccccc1"), "r2") == second
    assert RunWindow.of({}, "never-started") == RunWindow(0, 0, None)  # exists=False
    # what a trial task reads: its own run's window only, the same as from all attributes
    assert [experiment.window(store, run) for run in ("r1", "r2", "never-started")] == [
        again,
        second,
        RunWindow(0, 0, None),
    ]


@pytest.mark.parametrize(
    "extra, space, why",
    [
        ("tuner: {name: TPE}\nmaxTrialNumber: 4\n", None, "the experiment's trials are all in this run"),
        ("tuner: {name: GridSearch}\n", "{x: {_type: choice, _value: [1, 2]}}", "all in this run"),
    ],
)
def test_a_bounded_experiment_never_continues(tmp_path, extra, space, why, store):
    config = _config(tmp_path, extra, space or "{x: {_type: uniform, _value: [0, 1]}}")
    experiment = Experiment(config, "ebbbbbb1", tmp_path / "work")
    experiment.open(store)
    allot_window(experiment, store, "r1")
    following = continuation(experiment, store, "r1")
    assert following.run_id is None and why in following.reason


def test_an_unbounded_experiment_goes_on_in_follow_on_runs_until_its_duration_ends(tmp_path, store):
    """No maxTrialNumber: as NNI, trials keep coming until maxExperimentDuration, run after run;
    each follow-on run keeps the first run's deadline and takes the next indexes."""
    config = _config(tmp_path, "tuner: {name: TPE}\nmaxExperimentDuration: 1h\n")
    experiment = Experiment(config, "eaaaaaa1", tmp_path / "work")
    experiment.open(store)
    first = allot_window(experiment, store, "manual_1", now=1000.0, count=30)
    following = continuation(experiment, store, "manual_1", now=2000.0)
    assert following.run_id == "trialflow__eaaaaaa1__from_000030"
    assert following.conf == {"experiment_id": "eaaaaaa1", "continues": "manual_1"}
    assert experiment_id_for_run(config, "d", following.run_id, following.conf) == "eaaaaaa1"
    second = allot_window(experiment, store, following.run_id, now=3000.0, continues="manual_1", count=30)
    assert (second.first_index, second.count, second.deadline) == (30, 30, first.deadline) == (30, 30, 4600.0)
    last = continuation(experiment, store, following.run_id, now=4600.0)
    assert last.run_id is None and last.reason == "maxExperimentDuration reached"
    # Without maxExperimentDuration it goes on until someone stops it, as in NNI.
    forever = Experiment(_config(tmp_path, "tuner: {name: Random}\n"), "eaaaaaa2", tmp_path / "work")
    forever.open(store)
    allot_window(forever, store, "r1")
    assert continuation(forever, store, "r1", now=1e12).run_id == "trialflow__eaaaaaa2__from_000100"


def test_window_expiry(tmp_path):
    assert not RunWindow(0, 3, None).expired()
    assert RunWindow(0, 3, 100.0).expired(now=100.0)
    assert not RunWindow(0, 3, 100.0).expired(now=99.0)


def test_shared_storage_that_nni_would_mount_is_refused_with_what_to_do(tmp_path):
    from trialflow.experiment import check_runnable

    config = _config(
        tmp_path,
        "tuner: {name: TPE}\nsharedStorage: {storageType: NFS, nfsServer: nfs.example, "
        "exportedDirectory: /export, localMountPoint: /mnt/nfs, remoteMountPoint: /mnt/nfs, "
        "localMounted: nnimount}\n",
    )
    problems = [(p.key_path, p.message) for p in check_runnable(config)]
    assert problems == [
        (
            ("sharedStorage", "localMounted"),
            "trialflow never runs `sudo mount`: mount nfs.example:/export at /mnt/nfs yourself and set "
            "localMounted: usermount (or nomount to upload the code instead)",
        )
    ]


def test_checkpoints_run_on_local_and_are_refused_where_the_platform_cannot_keep_them(tmp_path):
    """Local keeps them; a platform without fetch and restart is named, at parse time, rather
    than run without the checkpoints the config asked for."""
    from trialflow.experiment import check_runnable

    config = _config(tmp_path, "tuner: {name: TPE}\ncheckpoints: {store: 's3://bucket/p', keepLast: 2}\n")
    assert config.checkpoints is not None and config.checkpoints.store == "s3://bucket/p"
    assert check_runnable(config) == []
    path = tmp_path / "k.yml"
    head = "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: 'true'\ntrialConcurrency: 1\n"
    path.write_text(
        head + "tuner: {name: TPE}\ncheckpoints: {keepLast: 2}\ntrainingService:\n"
        "  platform: openpai\n  host: https://pai.example\n  username: u\n  tokenConnId: pai\n"
        "  trialGpuNumber: 0\n  trialCpuNumber: 1\n  trialMemorySize: 1gb\n  dockerImage: img\n"
        "  localStorageMountPoint: /mnt\n  containerStorageMountPoint: /mnt\n  storageConfigName: s\n"
    )
    assert check_runnable(load_config(path)) == []  # its storage is mounted on the Airflow side
    aml = (
        "trainingService:\n  platform: aml\n  dockerImage: python:3.11\n  subscriptionId: s\n"
        "  resourceGroup: g\n  workspaceName: w\n  computeTarget: c\n"
    )
    path.write_text(head + "tuner: {name: TPE}\ncheckpoints: {keepLast: 2}\n" + aml)
    # (where the [azure] extra is missing, trainingService.platform says so too)
    problems = [p.message for p in check_runnable(load_config(path)) if p.key_path == ("checkpoints",)]
    assert len(problems) == 1 and "not yet keep checkpoints or restart trials on aml" in problems[0], problems
    # PBTTuner implies checkpoints (NNI's example has no key): refused there too, saying why
    path.write_text(head + "tuner: {name: PBTTuner}\n" + aml)
    problems = [p.message for p in check_runnable(load_config(path)) if p.key_path == ("checkpoints",)]
    assert len(problems) == 1, problems
    assert "PBTTuner hands checkpoints on, so it needs a platform that keeps them" in problems[0]


def test_hybrid_places_each_trial_on_the_platform_with_fewest_active_trials(tmp_path, store):
    from trialflow.platforms.base import TrialStatus

    config = _config(tmp_path, "tuner: {name: TPE}\n").model_copy(deep=True)
    config.training_service = config.training_service * 3  # three platforms listed
    experiment = Experiment(config, "ehybrid1", tmp_path)
    experiment.open(store)
    asked = iter(range(100))

    def active(service: int, handle: bool = True) -> int:
        index = next(asked)
        storage_id = ask(store, "ehybrid1", index, f"t{index}", experiment.algorithm, experiment.space).storage_id
        store.set_attrs(storage_id, service_index=service, **({"handle": {"platform": "local"}} if handle else {}))
        return storage_id

    def choose(trial_index: int) -> int:  # as a start reads them (read_for_start, active=True)
        return experiment.choose_service(store.active_trials("ehybrid1"), trial_index)

    assert [choose(i) for i in range(3)] == [0, 1, 2]  # ties: round-robin
    active(0)
    active(0)
    active(2)
    assert choose(0) == 1
    active(1)
    active(1, handle=False)  # asked, not yet submitted: not active
    assert choose(5) == 2
    finished = active(2)
    store.finish(finished, TrialStatus.SUCCEEDED, 1.0)  # ended trials do not count: 1 and 2 tie again
    assert [choose(i) for i in (1, 2)] == [1, 2]


def test_a_remote_code_directory_over_nni_limits_is_refused_by_validate(tmp_path, monkeypatch):
    from trialflow.experiment import check_runnable
    from trialflow.trial import packing

    monkeypatch.setattr(packing, "MAX_FILES", 3)
    for i in range(4):
        (tmp_path / f"f{i}.py").write_text("x")
    path = tmp_path / "c.yml"
    path.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: 'true'\ntrialConcurrency: 1\n"
        "tuner: {name: TPE}\ntrainingService: {platform: remote, machineList: [{host: h, user: u}]}\n"
    )
    problems = [(p.key_path, p.message) for p in check_runnable(load_config(path))]
    assert len(problems) == 1 and problems[0][0] == ("trialCodeDirectory",)
    assert "files to upload; the limit is 3" in problems[0][1]


@pytest.mark.parametrize("bad", [5, "", ["r1"], {"run": "r1"}])
def test_a_hand_written_continues_in_the_run_conf_is_refused_by_name(bad):
    from trialflow.runs import continued_run

    assert continued_run({"continues": "manual_1"}) == "manual_1"
    assert continued_run({}) is None and continued_run(None) is None
    with pytest.raises(ValueError, match="dag run conf continues: expected the run id"):
        continued_run({"continues": bad})
