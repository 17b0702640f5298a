"""ExperimentTaskGroup: an experiment inside the author's DAG, built from a file or a mapping."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa
from airflow.sdk import DAG, task

from tests.helpers.dags import write_config
from trialflow.config import ConfigError
from trialflow.dag import experiment_dag
from trialflow.runs.summary import BEST_PARAMETERS_KEY
from trialflow.task_group import ExperimentTaskGroup

SPACE = {"C": {"_type": "loguniform", "_value": [0.01, 10]}}
PYTHON_CONFIG = {
    "searchSpace": SPACE,
    "trialFunction": "models:objective",
    "trialConcurrency": 2,
    "maxTrialNumber": 4,
    "tuner": {"name": "TPE", "classArgs": {"optimize_mode": "maximize"}},
    "trainingService": {"platform": "local"},
}


def two_groups(tmp_path: Path) -> DAG:
    config = write_config(tmp_path)
    with DAG("pipeline", schedule=None) as dag:

        @task
        def prepare() -> str:
            return "/data"

        @task
        def train(best: dict) -> None:
            pass

        svc = ExperimentTaskGroup("tune_svc", {**PYTHON_CONFIG, "trialCodeDirectory": str(tmp_path)})
        nni = ExperimentTaskGroup("tune_nni", str(config))
        prepare() >> [svc, nni]
        train(svc.best)
    return dag


def test_two_groups_are_two_experiments_side_by_side(tmp_path):
    dag = two_groups(tmp_path)
    for group, concurrency, count in (("tune_svc", 2, 4), ("tune_nni", 3, 7)):
        trial = dag.get_task(f"{group}.trial")
        assert trial.partial_kwargs["max_active_tis_per_dagrun"] == concurrency
        assert trial.expand_input.value["trial_index"] == list(range(count))
        assert trial.partial_kwargs["experiment_group"] == group
        assert dag.get_task(f"{group}.start_experiment").experiment_group == group
        # the watch and the end step reconcile their own group's trial tasks, not the other's
        assert dag.get_task(f"{group}.watch_trials").trial_task_id == f"{group}.trial"
        assert dag.get_task(f"{group}.end_experiment").trial_task_id == f"{group}.trial"
        publish = dag.get_task(f"{group}.publish_best")
        assert (publish.end_task_id, publish.start_task_id) == (f"{group}.end_experiment", f"{group}.start_experiment")
        assert publish.asset.name == f"trialflow/pipeline/{group}/best"
        assert dag.get_task(f"{group}.start_experiment").retries == 2  # trial tasks re-attach on retry
        assert dag.get_task(f"{group}.start_experiment").upstream_task_ids == {"prepare"}
    # no follow-on run inside a group: it would run prepare and train again
    assert not [t for t in dag.task_ids if t.endswith("continue_experiment")]
    # the downstream task takes the end step's best parameters
    train = dag.get_task("train")
    assert train.upstream_task_ids == {"tune_svc.end_experiment"}
    (arg,) = train.op_args
    assert (arg.operator.task_id, arg.key) == ("tune_svc.end_experiment", BEST_PARAMETERS_KEY)


def test_a_task_of_the_same_dag_takes_the_published_winner(tmp_path):
    with DAG("winner", schedule=None) as dag:

        @task
        def promote(result: dict) -> None:
            pass

        svc = ExperimentTaskGroup("tune", {**PYTHON_CONFIG, "trialCodeDirectory": str(tmp_path)})
        promote(svc.published)
    task_ = dag.get_task("promote")
    assert task_.upstream_task_ids == {"tune.publish_best"}
    (arg,) = task_.op_args
    assert (arg.operator.task_id, arg.key) == ("tune.publish_best", "return_value")


def test_the_dag_serializes_as_airflow_stores_it(tmp_path):
    from airflow.serialization.serialized_objects import DagSerialization

    dag = two_groups(tmp_path)
    data = DagSerialization.to_dict(dag)
    again = DagSerialization.from_dict(data)
    assert set(again.task_group.children) >= {"tune_svc", "tune_nni", "prepare", "train"}
    assert again.get_task("tune_nni.trial").partial_kwargs["max_active_tis_per_dagrun"] == 3


def test_experiment_dag_keeps_its_task_ids(tmp_path):
    """The same builder at the DAG's top: the ids every earlier run and page used."""
    dag = experiment_dag(write_config(tmp_path))
    assert dag.get_task("watch_trials").trial_task_id == "trial"
    assert dag.get_task("trial").partial_kwargs["experiment_group"] is None
    assert dag.get_task("publish_best").asset.name == "trialflow/trialflow_my_exp/best"


def test_a_python_experiment_dag_needs_a_dag_id(tmp_path):
    config = {**PYTHON_CONFIG, "trialCodeDirectory": str(tmp_path)}
    with pytest.raises(ValueError, match="needs a dag_id"):
        experiment_dag(config)
    assert experiment_dag(config, dag_id="tuned").get_task("trial").partial_kwargs["max_active_tis_per_dagrun"] == 2


def import_dag_file(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_python_experiment_with_an_error_fails_the_dag_import_naming_the_key(tmp_path):
    dag_file = tmp_path / "tune_dag.py"
    dag_file.write_text(
        textwrap.dedent(
            """
            from airflow.sdk import DAG
            from trialflow.task_group import ExperimentTaskGroup

            with DAG("tuned", schedule=None):
                ExperimentTaskGroup("tune", {
                    "searchSpace": {"C": {"_type": "loguniform", "_value": [0.01, 10]}},
                    "trialFunction": "models:objective",
                    "trialConcurrency": 0,
                    "tuner": {"name": "TPE"},
                    "trainingService": {"platform": "local"},
                })
            """
        )
    )
    with pytest.raises(ConfigError) as raised:
        import_dag_file(dag_file)
    (problem,) = raised.value.problems
    assert str(problem).startswith(f"{dag_file}: trialConcurrency: ")
    assert "greater than 0" in str(problem)


def test_relative_paths_of_a_python_experiment_start_at_the_dag_file(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "space.json").write_text('{"x": {"_type": "uniform", "_value": [0, 1]}}')
    dag_file = tmp_path / "tune_dag.py"
    dag_file.write_text(
        textwrap.dedent(
            """
            from airflow.sdk import DAG
            from trialflow.task_group import ExperimentTaskGroup

            with DAG("tuned", schedule=None) as dag:
                tune = ExperimentTaskGroup("tune", {
                    "searchSpaceFile": "space.json",
                    "trialCommand": "python3 t.py",
                    "trialCodeDirectory": "code",
                    "trialConcurrency": 1,
                    "maxTrialNumber": 2,
                    "tuner": {"name": "Random"},
                    "trainingService": {"platform": "local"},
                })
            """
        )
    )
    module = import_dag_file(dag_file)
    from trialflow.config import load_config

    config = load_config(module.dag.get_task("tune.start_experiment").config_path)
    assert config.trial_code_directory == tmp_path / "code"
    assert config.search_space == {"x": {"_type": "uniform", "_value": [0, 1]}}
    assert config.source_file == dag_file


@pytest.mark.parametrize(
    "change, key, words",
    [
        (
            {"trainingService": {"platform": "remote", "machineList": [{"host": "h", "user": "u", "password": "pw"}]}},
            ("trainingService", "machineList", 0, "password"),
            "a secret",
        ),
        ({"trialCommand": "API_TOKEN=abc python3 t.py", "trialFunction": None}, ("trialCommand",), "a secret"),
        ({"maxTrialNumber": {1, 2}}, ("maxTrialNumber",), "got set"),
    ],
)
def test_what_a_python_experiment_cannot_hold_is_named(tmp_path, change, key, words):
    config = {**PYTHON_CONFIG, **change}
    with DAG("tuned", schedule=None), pytest.raises(ConfigError) as raised:
        ExperimentTaskGroup("tune", config)
    (problem,) = raised.value.problems
    assert problem.key_path == key and words in problem.message
    assert "abc" not in str(raised.value) and "pw" not in str(raised.value)


def test_an_unbounded_experiment_in_a_group_needs_trials_per_run(tmp_path):
    config = {k: v for k, v in PYTHON_CONFIG.items() if k != "maxTrialNumber"}
    with DAG("tuned", schedule=None), pytest.raises(ValueError, match="set maxTrialNumber .* or trials_per_run"):
        ExperimentTaskGroup("tune", config)
    with DAG("tuned", schedule=None) as dag:
        ExperimentTaskGroup("tune", config, trials_per_run=5)
    assert dag.get_task("tune.trial").expand_input.value["trial_index"] == list(range(5))


def test_a_changed_concurrency_reaches_only_its_own_group(tmp_path, monkeypatch):
    from trialflow.store.concurrency_changes import limits_key, write_concurrency

    db = tmp_path / "store.db"
    monkeypatch.setenv(
        "AIRFLOW_CONN_TRIALFLOW_DEFAULT", f'{{"conn_type": "trialflow", "extra": {{"storage_url": "sqlite:///{db}"}}}}'
    )
    engine = sa.create_engine(f"sqlite:///{db}")
    write_concurrency(engine, limits_key("pipeline", "tune_nni"), "e1", 1)
    dag = two_groups(tmp_path)
    assert dag.get_task("tune_nni.trial").partial_kwargs["max_active_tis_per_dagrun"] == 1
    assert dag.get_task("tune_svc.trial").partial_kwargs["max_active_tis_per_dagrun"] == 2


def test_inputs_from_an_upstream_task_are_the_start_steps_templated_field(tmp_path):
    """An XComArg among the inputs makes its task upstream of the experiment, and the start step
    renders it once per run (what Rendered Template then shows)."""
    with DAG("with_inputs", schedule=None) as dag:

        @task
        def prepare() -> str:
            return "/data/x.npz"

        ExperimentTaskGroup("tune", {**PYTHON_CONFIG, "trialCodeDirectory": str(tmp_path)}, inputs={"data": prepare()})
    start = dag.get_task("tune.start_experiment")
    assert "inputs" in start.template_fields
    assert start.upstream_task_ids == {"prepare"}
    assert start.inputs["data"].operator.task_id == "prepare"


def test_a_local_experiment_group_under_a_multi_host_executor_goes_to_one_hosts_queue(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.delenv("AIRFLOW__TRIALFLOW__LOCAL_QUEUE", raising=False)
    config = {**PYTHON_CONFIG, "trialCodeDirectory": str(tmp_path)}
    with DAG("spread", schedule=None), pytest.raises(ConfigError, match="local_queue"):
        ExperimentTaskGroup("tune", config)
    with DAG("spread", schedule=None) as dag:
        ExperimentTaskGroup("tune", config, local_queue="box-1")

        @task
        def elsewhere() -> None:
            pass

        elsewhere()
    trial = dag.get_task("tune.trial")
    assert trial.partial_kwargs["queue"] == "box-1" and trial.partial_kwargs["stay_on_host"] is True
    assert {dag.get_task(f"tune.{t}").queue for t in ("start_experiment", "end_experiment", "watch_trials")} == {
        "box-1"
    }
    assert dag.get_task("elsewhere").queue != "box-1"  # the author's own tasks go where they go


def test_a_tracked_group_still_fails_its_run_when_the_experiment_fails(tmp_path):
    """log_to_mlflow runs whatever the end step's outcome (all_done) and succeeds when MLflow
    took the runs; Airflow reads a DAG run's state from its leaves, so publish_best (all_success,
    upstream_failed when the end step failed) must stay a leaf beside it: a failed experiment in
    a tracked group still fails the run."""
    config = {
        **PYTHON_CONFIG,
        "trialCodeDirectory": str(tmp_path),
        "mlflow": {"connId": "trialflow_mlflow", "experimentName": "svc"},
    }
    with DAG("pipeline", schedule=None) as dag:
        ExperimentTaskGroup("tune", config)
    track, publish = dag.get_task("tune.log_to_mlflow"), dag.get_task("tune.publish_best")
    assert track.trigger_rule == "all_done" and track.upstream_task_ids == {"tune.end_experiment"}
    assert publish.trigger_rule == "all_success" and publish.upstream_task_ids == {"tune.end_experiment"}
    assert {t.task_id for t in dag.leaves} >= {"tune.log_to_mlflow", "tune.publish_best"}
