from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest

from tests.helpers.dags import CONFIG, write_config
from trialflow.config import ConfigError
from trialflow.dag import experiment_dag

#: An experiment DAG's tasks, in Airflow's order.
TASK_IDS = ["start_experiment", "trial", "end_experiment", "watch_trials", "continue_experiment", "publish_best"]


def test_dag_shape(tmp_path):
    dag = experiment_dag(write_config(tmp_path))
    assert dag.dag_id == "trialflow_my_exp"
    assert dag.task_ids == TASK_IDS
    trial = dag.get_task("trial")
    assert trial.partial_kwargs["max_active_tis_per_dagrun"] == 3
    assert trial.expand_input.value["trial_index"] == list(range(7))
    # maxExperimentDuration is enforced by the start step's deadline, not by failing the run
    assert dag.dagrun_timeout is None
    assert dag.get_task("end_experiment").trigger_rule == "all_done"
    assert dag.get_task("start_experiment").retries == 2
    assert dag.get_task("start_experiment").downstream_task_ids == {"trial", "watch_trials"}
    # the end step waits for the trials and for their watch (trialflow.runs.reconcile)
    assert dag.get_task("end_experiment").upstream_task_ids == {"trial", "watch_trials"}
    assert "trialflow" in dag.tags


def test_dag_arguments_pass_through(tmp_path):
    dag = experiment_dag(
        write_config(tmp_path), dag_id="nightly", schedule="@daily", tags=["team-a"], default_args={"retries": 5}
    )
    assert (dag.dag_id, dag.tags) == ("nightly", {"team-a"} if isinstance(dag.tags, set) else ["team-a"])
    assert dag.get_task("start_experiment").retries == 5  # default_args reach the tasks


def test_relative_config_path_resolves_against_the_dag_file(tmp_path):
    write_config(tmp_path)
    dag_file = tmp_path / "my_dag.py"
    dag_file.write_text('from trialflow.dag import experiment_dag\ndag = experiment_dag("exp/config.yml")\n')
    spec = importlib.util.spec_from_file_location("my_dag", dag_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.dag.dag_id == "trialflow_my_exp"


def test_broken_config_fails_at_parse_time(tmp_path):
    path = write_config(tmp_path, extra="trialConcurrency: 0\n")
    with pytest.raises(ConfigError, match="trialConcurrency"):
        experiment_dag(path)


@pytest.mark.parametrize(
    "tuner, platform, message",
    [
        ("PPOTuner", "local", "closest supported choice is 'Evolution'"),
        ("TPE", "dlc", "trainingService.platform: training service platform 'dlc' cannot run here"),
    ],
)
def test_configs_this_release_cannot_run_are_refused_at_parse_time(tmp_path, tuner, platform, message):
    path = write_config(tmp_path, tuner=tuner, platform=platform)
    if platform == "dlc":
        path.write_text(
            path.read_text().replace(
                "{platform: dlc}",
                "{platform: dlc, image: i, ecsSpec: e, region: r, nasDataSourceId: n, accessKeyId: a,\n"
                "  accessKeySecret: s, localStorageMountPoint: /tmp, containerStorageMountPoint: /mnt}",
            )
        )
    with pytest.raises(ConfigError, match=message):
        experiment_dag(path)


def test_grid_search_without_max_trials_runs_the_whole_grid(tmp_path):
    path = tmp_path / "c.yml"
    path.write_text(
        "searchSpace: {a: {_type: choice, _value: [1, 2, 3]}, b: {_type: randint, _value: [0, 2]}}\n"
        "trialCommand: x\ntrialConcurrency: 2\ntuner: {name: GridSearch}\ntrainingService: {platform: local}\n"
    )
    assert experiment_dag(path).get_task("trial").expand_input.value["trial_index"] == list(range(6))


def test_provider_info_matches_airflows_schema():
    import airflow

    from trialflow.get_provider_info import get_provider_info

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "airflow-provider-trialflow"
    for section in ("operators", "sensors", "hooks", "triggers"):
        for module in info[section][0]["python-modules"]:
            importlib.import_module(module)
    hook = info["connection-types"][0]["hook-class-name"]
    module, _, cls = hook.rpartition(".")
    assert getattr(importlib.import_module(module), cls).conn_type == "trialflow"


def test_a_missing_code_directory_is_refused_at_parse_time(tmp_path):
    path = write_config(tmp_path, extra="trialCodeDirectory: no-such-folder\n")
    with pytest.raises(ConfigError, match="no-such-folder does not exist"):
        experiment_dag(path)


def test_the_end_step_cleans_up_only_when_asked(tmp_path):
    assert experiment_dag(write_config(tmp_path)).get_task("end_experiment").cleanup is False
    assert experiment_dag(write_config(tmp_path), cleanup=True).get_task("end_experiment").cleanup is True


def test_a_bounded_experiment_goes_on_only_if_a_person_raises_its_limit(tmp_path):
    """Its continue step is there for a raised maxTrialNumber (and skipped otherwise: see
    Experiment.continuation); trials_per_run stays an unbounded experiment's setting."""
    dag = experiment_dag(write_config(tmp_path))
    assert dag.get_task("continue_experiment").upstream_task_ids == {"end_experiment"}
    with pytest.raises(ValueError, match="trials_per_run is for experiments without maxTrialNumber"):
        experiment_dag(write_config(tmp_path), trials_per_run=5)


def test_without_max_trial_number_the_run_continues_in_a_follow_on_run(tmp_path):
    """No silent cap: one run holds a finite fan-out and its last step starts the next run."""
    path = tmp_path / "c.yml"
    path.write_text(CONFIG.format(tuner="TPE", platform="local").replace("maxTrialNumber: 7\n", ""))
    dag = experiment_dag(path, dag_id="unbounded")
    assert dag.task_ids == TASK_IDS
    assert dag.get_task("trial").expand_input.value["trial_index"] == list(range(100))
    follow = dag.get_task("continue_experiment")
    assert follow.trigger_dag_id == "unbounded" and follow.upstream_task_ids == {"end_experiment"}
    assert "more in follow-on runs until maxExperimentDuration" in dag.doc_md
    wide = experiment_dag(path, trials_per_run=3)
    assert wide.get_task("trial").expand_input.value["trial_index"] == [0, 1, 2]
    assert wide.get_task("start_experiment").trial_count == 3  # the window matches the fan-out
    path.write_text(path.read_text().replace("trialConcurrency: 3", "trialConcurrency: 50"))
    assert len(experiment_dag(path).get_task("trial").expand_input.value["trial_index"]) == 500  # ten waves
    with pytest.raises(ValueError, match="trials_per_run: expected 1..10000"):
        experiment_dag(path, trials_per_run=0)
    for wrong in ("5", 2.5, True):
        with pytest.raises(ValueError, match="trials_per_run: expected a whole number"):
            experiment_dag(path, trials_per_run=wrong)


@pytest.fixture
def celery(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.delenv("AIRFLOW__TRIALFLOW__LOCAL_QUEUE", raising=False)
    return monkeypatch


def placement(dag) -> dict[str, object]:
    trial = dag.get_task("trial")
    return {
        "start": dag.get_task("start_experiment").queue,
        "trial": trial.partial_kwargs.get("queue"),
        "end": dag.get_task("end_experiment").queue,
        "stay_on_host": trial.partial_kwargs.get("stay_on_host"),
    }


def test_local_trials_under_a_multi_host_executor_are_refused_without_one_hosts_queue(tmp_path, celery):
    path = write_config(tmp_path)
    with pytest.raises(ConfigError) as raised:
        experiment_dag(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: trainingService.platform: 'local' runs each trial as a process")
    assert "CeleryExecutor" in message and "local_queue" in message


@pytest.mark.parametrize(
    "how, expected",
    [
        ({"local_queue": "box-1"}, "box-1"),
        ({"default_args": {"queue": "box-3"}}, "box-3"),
        ({}, "box-2"),  # [trialflow] local_queue
    ],
)
def test_with_one_hosts_queue_every_step_goes_there_and_local_trials_stay(tmp_path, celery, how, expected):
    celery.setenv("AIRFLOW__TRIALFLOW__LOCAL_QUEUE", "box-2")
    dag = experiment_dag(write_config(tmp_path), **how)
    assert placement(dag) == {"start": expected, "trial": expected, "end": expected, "stay_on_host": True}


def test_single_host_executors_and_multi_host_platforms_are_left_as_they_are(tmp_path, celery):
    path = write_config(tmp_path, platform="remote", extra="")
    path.write_text(
        path.read_text().replace(
            "{platform: remote}", "{platform: remote, machineList: [{host: 127.0.0.1, user: u, password: p}]}"
        )
    )
    remote = placement(experiment_dag(path))
    assert remote["stay_on_host"] is False and remote["trial"] in (None, "default")
    celery.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    local = placement(experiment_dag(write_config(tmp_path)))
    assert local["stay_on_host"] is False and local["trial"] in (None, "default")
    # a task sent to a multi-host executor by name is as good as the default being one
    with pytest.raises(ConfigError, match="KubernetesExecutor"):
        experiment_dag(write_config(tmp_path), default_args={"executor": "KubernetesExecutor"})


def test_a_changed_concurrency_reaches_the_dag_at_its_next_parse(tmp_path, monkeypatch):
    """The scheduler reads max_active_tis_per_dagrun from the parsed DAG: a person's change is
    read from the store when the dag-processor parses, not when a worker does."""
    import sqlalchemy as sa

    from trialflow.from_airflow import concurrency_at_parse as hook
    from trialflow.store.concurrency_changes import clear, write_concurrency

    db = tmp_path / "store.db"
    monkeypatch.setenv(
        "AIRFLOW_CONN_TRIALFLOW_DEFAULT", f'{{"conn_type": "trialflow", "extra": {{"storage_url": "sqlite:///{db}"}}}}'
    )
    path = write_config(tmp_path)
    assert experiment_dag(path, dag_id="limited").get_task("trial").max_active_tis_per_dagrun == 3
    assert not db.exists()  # reading did not create a store
    engine = sa.create_engine(f"sqlite:///{db}")
    write_concurrency(engine, "limited", "e1", 5)
    assert experiment_dag(path, dag_id="limited").get_task("trial").max_active_tis_per_dagrun == 5
    assert experiment_dag(path, dag_id="other").get_task("trial").max_active_tis_per_dagrun == 3
    monkeypatch.setattr(hook, "in_a_task", lambda: True)
    assert experiment_dag(path, dag_id="limited").get_task("trial").max_active_tis_per_dagrun == 3
    monkeypatch.setattr(hook, "in_a_task", lambda: False)
    assert not clear(engine, "limited", "another-experiment")
    assert clear(engine, "limited", "e1")
    assert experiment_dag(path, dag_id="limited").get_task("trial").max_active_tis_per_dagrun == 3
    db.write_bytes(b"not a database")
    assert experiment_dag(path, dag_id="limited").get_task("trial").max_active_tis_per_dagrun == 3


@pytest.mark.both_databases
def test_a_changed_concurrency_is_read_at_parse_from_either_store(store, tmp_path, monkeypatch):
    """SQLite and a real PostgreSQL, named as a user's connection names it (``postgresql://``)."""
    from trialflow.store.concurrency_changes import write_concurrency

    plain = store.url.replace("postgresql+psycopg://", "postgresql://")
    monkeypatch.setenv(
        "AIRFLOW_CONN_TRIALFLOW_DEFAULT", json.dumps({"conn_type": "trialflow", "extra": {"storage_url": plain}})
    )
    write_concurrency(store.engine, "plain", "e1", 6)
    assert experiment_dag(write_config(tmp_path), dag_id="plain").get_task("trial").max_active_tis_per_dagrun == 6
