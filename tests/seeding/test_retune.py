"""scheduledRuns: retune without Airflow: a new experiment whose first trials are the previous
experiment's best parameter sets, measured again (trialflow.seeding.retune)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.rows import row
from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.platforms.base import TrialStatus
from trialflow.runs import start_run
from trialflow.seeding.retune import RETUNED_BY, RETUNED_FROM, ranked
from trialflow.store.experiment_store import ExperimentStore
from trialflow.tuning.asker import ask

SPACE = "searchSpace: {{x: {{_type: uniform, _value: [0, {high}]}}, k: {{_type: choice, _value: [a, b]}}}}\n"
CONFIG = """\
trialCommand: python3 t.py
trialConcurrency: 2
maxTrialNumber: 6
tuner: {{name: TPE, classArgs: {{optimize_mode: {mode}}}}}
trainingService: {{platform: local}}
scheduledRuns: retune
retuneTopK: 3
"""


def experiment(tmp_path: Path, exp_id: str, mode: str = "maximize", high: int = 10) -> Experiment:
    path = tmp_path / f"{exp_id}.yml"
    path.write_text(SPACE.format(high=high) + CONFIG.format(mode=mode))
    return Experiment(load_config(path), exp_id, tmp_path / "work")


def finish(store: ExperimentStore, exp: Experiment, index: int, value: float | None, status=TrialStatus.SUCCEEDED):
    asked = ask(store, exp.experiment_id, index, f"{exp.experiment_id}-{index}", exp.algorithm, exp.space)
    store.finish(asked.storage_id, status, value, None)
    return asked.parameters


def test_the_first_trials_re_evaluate_the_previous_experiments_top_k(tmp_path, store):
    first = experiment(tmp_path, "e-first")
    start_run(first, store, "dag_a", "r1", {})
    values = [0.5, 0.9, None, 0.7, 0.2, 0.8]
    params = [
        finish(store, first, i, v, TrialStatus.SUCCEEDED if v is not None else TrialStatus.FAILED)
        for i, v in enumerate(values)
    ]
    other = experiment(tmp_path, "e-other-dag")  # a later experiment of another DAG is not "previous"
    start_run(other, store, "dag_b", "r1", {})
    finish(store, other, 0, 100.0)

    second = experiment(tmp_path, "e-second")
    started = start_run(second, store, "dag_a", "r2", {})
    assert started.retune is not None and started.retune.experiment_id == "e-first"
    top = [params[1], params[5], params[3]]  # 0.9, 0.8, 0.7
    assert [q["parameters"] for q in started.retune.queued] == top
    got = [finish(store, second, i, 0.1) for i in range(4)]
    assert got[:3] == top and got[3] not in top  # then the tuner's own
    asked_by = store.trial_attr(store.find_trial_id("e-second", 0), "asked_by")
    assert asked_by["by"] == "retune"
    assert asked_by["reason"] == "re-evaluates trial e-first-1 of experiment e-first (0.9 on the old data)"
    # the two experiments name each other (the pages link them)
    assert store.experiment_attr("e-second", RETUNED_FROM)["experiment_id"] == "e-first"
    assert store.experiment_attr("e-first", RETUNED_BY) == ["e-second"]


def test_a_retried_start_step_queues_nothing_twice(tmp_path, store):
    first = experiment(tmp_path, "e1")
    start_run(first, store, "dag_a", "r1", {})
    finish(store, first, 0, 0.3)
    second = experiment(tmp_path, "e2")
    start_run(second, store, "dag_a", "r2", {})
    again = start_run(second, store, "dag_a", "r2", {})
    assert len(store.waiting_trials("e2")) == 1
    assert again.retune is not None and again.retune.reason == "already queued"
    assert store.experiment_attr("e1", RETUNED_BY) == ["e2"]


def test_minimize_ranks_the_smallest_first_and_repeated_points_count_once():
    rows = [
        row(0, final_metric=3.0, parameters={"x": 1}),
        row(1, final_metric=1.0, parameters={"x": 2}),
        row(2, final_metric=2.0, parameters={"x": 2}),  # the same point again
        row(3, final_metric=float("nan"), parameters={"x": 3}),
        row(4, "FAILED", final_metric=0.0, parameters={"x": 4}),
    ]
    assert [r.parameters for r in ranked(rows, "minimize")] == [{"x": 2}, {"x": 1}]
    assert [r.parameters for r in ranked(rows, "maximize")] == [{"x": 1}, {"x": 2}]


def test_the_first_experiment_of_a_dag_starts_fresh(tmp_path, store):
    started = start_run(experiment(tmp_path, "e1"), store, "dag_a", "r1", {})
    assert started.retune is not None and started.retune.experiment_id is None
    assert "no earlier experiment with a result" in started.retune.reason
    assert store.waiting_trials("e1") == []


def test_sets_outside_a_changed_search_space_are_left_out_and_named(tmp_path, store):
    first = experiment(tmp_path, "e1", high=10)
    start_run(first, store, "dag_a", "r1", {})
    for i in range(6):
        finish(store, first, i, float(i))
    narrower = experiment(tmp_path, "e2", high=1)  # the data changed, and so did the space
    started = start_run(narrower, store, "dag_a", "r2", {})
    assert started.retune is not None
    fitting = [q["parameters"]["x"] for q in started.retune.queued]
    assert all(x <= 1 for x in fitting) and len(fitting) + len(started.retune.dropped) >= 3
    assert all("x" in d for d in started.retune.dropped)


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("retuneTopK: 2\n", "retuneTopK: only with scheduledRuns: retune"),
        ("scheduledRuns: retune\nretuneTopK: 0\n", "retuneTopK"),
    ],
)
def test_retune_options_are_checked(tmp_path, yaml, message):
    from trialflow.config.errors import ConfigError

    path = tmp_path / "c.yml"
    path.write_text(
        SPACE.format(high=1) + CONFIG.format(mode="maximize").replace("scheduledRuns: retune\nretuneTopK: 3\n", yaml)
    )
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_a_grid_search_cannot_retune(tmp_path):
    from trialflow.config.errors import ConfigError

    path = tmp_path / "c.yml"
    path.write_text(SPACE.format(high=1) + CONFIG.format(mode="maximize").replace("name: TPE", "name: GridSearch"))
    with pytest.raises(ConfigError, match="scheduledRuns: retune queues earlier parameter sets"):
        load_config(path)


def test_a_groups_previous_experiment_is_its_own_groups(store):
    """Issue 39: retune in an experiment task group starts from that group's last experiment,
    not from another group's of the same DAG (nor the DAG's own)."""
    from tests.helpers.filled_store import fill
    from trialflow.experiment import GROUP_ATTR
    from trialflow.seeding.retune import previous_experiment

    for experiment_id, group in (("ea1", "a"), ("eb1", "b"), ("edag", None), ("ea2", "a")):
        fill(store, experiment_id, dag_id="dag_g")
        if group is not None:
            store.set_experiment_attrs(experiment_id, {GROUP_ATTR: group})
    assert previous_experiment(store, "dag_g", "ea2", "a") == "ea1"
    assert previous_experiment(store, "dag_g", "ebnew", "b") == "eb1"
    assert previous_experiment(store, "dag_g", "enew") == "edag"
