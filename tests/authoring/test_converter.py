"""The one converter behind experiment_dag and ExperimentTaskGroup: its options are declared
once and both take them the same way."""

from __future__ import annotations

import dataclasses

import pytest

from trialflow.authoring.converter import ExperimentOptions
from trialflow.hooks.experiment_store import DEFAULT_CONN_ID


def test_options_are_taken_out_of_the_keyword_arguments_and_the_rest_is_left():
    kwargs = {"poll_interval": 0.5, "cleanup": True, "schedule": "@daily", "tags": ["x"]}
    options = ExperimentOptions.take(kwargs)
    assert (options.poll_interval, options.cleanup, options.store_conn_id) == (0.5, True, DEFAULT_CONN_ID)
    assert kwargs == {"schedule": "@daily", "tags": ["x"]}  # the DAG's own


def test_keyword_arguments_override_an_options_object_and_leave_it_as_it_was():
    base = ExperimentOptions(defer_after=3.0, asset_name="mine")
    options = ExperimentOptions.take({"defer_after": 1.0}, base)
    assert (options.defer_after, options.asset_name) == (1.0, "mine")
    assert base.defer_after == 3.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.defer_after = 2.0  # type: ignore[misc]


def test_options_of_another_kind_are_refused_by_name():
    with pytest.raises(TypeError, match="options: expected trialflow's ExperimentOptions, got dict"):
        ExperimentOptions.take({}, {"poll_interval": 1.0})  # type: ignore[arg-type]


def test_the_dag_and_the_group_take_exactly_the_options(tmp_path):
    """Both shells name no build option of their own: what they take is ExperimentOptions'."""
    import inspect

    from trialflow.dag import experiment_dag
    from trialflow.task_group import ExperimentTaskGroup

    option_names = {f.name for f in dataclasses.fields(ExperimentOptions)}
    for shell in (experiment_dag, ExperimentTaskGroup.__init__):
        named = set(inspect.signature(shell).parameters)
        assert not named & option_names, shell
        assert "options" in named


def test_trials_that_start_in_the_triggerer_serialize_as_airflow_defers_them(tmp_path):
    """start_trials_in='triggerer': the mapped trial task carries the class's own start
    arguments through serialization (the scheduler defers it from those), others keep the
    worker's start; a place that is neither is refused by name."""
    import sys

    from airflow.serialization.serialized_objects import DagSerialization

    from trialflow.dag import experiment_dag
    from trialflow.operators.trial import TriggeredTrialOperator

    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
        f"trialCommand: {sys.executable} -c pass\ntrialConcurrency: 2\nmaxTrialNumber: 3\n"
        "tuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    for place, expected in (("triggerer", True), ("worker", False)):
        dag = experiment_dag(str(tmp_path / "config.yml"), dag_id=f"d_{place}", start_trials_in=place)
        task = DagSerialization.from_dict(DagSerialization.to_dict(dag)).get_task("trial")
        assert task.start_from_trigger is expected
        if expected:
            assert task.start_trigger_args.trigger_cls == "trialflow.triggers.trial_start.TrialStartTrigger"
            assert task.start_trigger_args.next_method == "execute_complete"
            assert task.partial_kwargs["config_path"] == str(tmp_path / "config.yml")  # what the trigger reads
            assert dag.get_task("trial").operator_class is TriggeredTrialOperator
    with pytest.raises(ValueError, match="start_trials_in: expected one of auto, worker, triggerer, got 'cloud'"):
        ExperimentOptions(start_trials_in="cloud")


@pytest.mark.parametrize(
    ("tuner", "trials", "capacity", "place"),
    [
        ("{name: Random}", 3, None, "triggerer"),
        ("{name: TPE}", 250, None, "triggerer"),
        ("{name: TPE}", 251, None, "worker"),  # over a quarter of Airflow's default capacity
        ("{name: TPE}", 30, "100", "worker"),  # the deployment's own capacity
        ("{name: GP}", 3, None, "worker"),
        ("{name: optuna.samplers.TPESampler}", 3, None, "worker"),
    ],
)
def test_auto_starts_in_the_triggerer_unless_the_experiment_needs_a_worker(
    tmp_path, monkeypatch, tuner, trials, capacity, place
):
    """The default place, through the real DAG: the serialized task starts in the triggerer or
    not, and the DAG's doc says where and why."""
    import sys

    from airflow.serialization.serialized_objects import DagSerialization

    from trialflow.dag import experiment_dag

    if "GP" in tuner:
        pytest.importorskip("sklearn")
    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
        f"trialCommand: {sys.executable} -c pass\ntrialConcurrency: 2\nmaxTrialNumber: {trials}\n"
        f"tuner: {tuner}\ntrainingService: {{platform: local}}\n"
    )
    if capacity is not None:
        monkeypatch.setenv("AIRFLOW__TRIGGERER__CAPACITY", capacity)
    dag = experiment_dag(str(tmp_path / "config.yml"), dag_id="d_auto")
    task = DagSerialization.from_dict(DagSerialization.to_dict(dag)).get_task("trial")
    assert task.start_from_trigger is (place == "triggerer")
    assert f"- trial tasks start in the {place}: " in dag.doc_md


def test_an_authors_triggerer_start_that_fills_the_capacity_says_so_in_the_dags_doc(tmp_path, monkeypatch):
    """start_trials_in='triggerer' is the author's word, kept; where the run's trial tasks fill
    the deployment's triggerer capacity, the DAG's doc says what waits for a place."""
    import sys

    from trialflow.dag import experiment_dag

    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
        f"trialCommand: {sys.executable} -c pass\ntrialConcurrency: 2\nmaxTrialNumber: 30\n"
        "tuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    monkeypatch.setenv("AIRFLOW__TRIGGERER__CAPACITY", "30")
    dag = experiment_dag(str(tmp_path / "config.yml"), dag_id="d_full", start_trials_in="triggerer")
    assert "- trial tasks start in the triggerer: start_trials_in='triggerer'; its 30 trial tasks fill" in dag.doc_md
    monkeypatch.setenv("AIRFLOW__TRIGGERER__CAPACITY", "31")
    dag = experiment_dag(str(tmp_path / "config.yml"), dag_id="d_room", start_trials_in="triggerer")
    assert "- trial tasks start in the triggerer: start_trials_in='triggerer'\n" in dag.doc_md
