"""A clear's marks (trialflow.steering.cleared_starts): which waiting starts they hold back, for
how long, and where the api-server writes them."""

from __future__ import annotations

import pytest

from trialflow.steering.cleared_starts import ALL, HOLD_SECONDS, ClearMark, held, marks_of


@pytest.mark.parametrize(
    ("marks", "since", "now", "expected"),
    [
        ({"1": 100.0}, {1: 99.0, 2: 99.0}, 101.0, {1}),  # its own index only
        ({ALL: 100.0}, {1: 99.0, 2: 99.0}, 101.0, {1, 2}),  # the whole run
        ({ALL: 100.0}, {1: 100.5}, 101.0, set()),  # began after the clear: a new try
        ({ALL: 100.0}, {1: 99.0}, 100.0 + HOLD_SECONDS, set()),  # held no longer than HOLD_SECONDS
        ({}, {1: 99.0}, 101.0, set()),
    ],
)
def test_a_clear_holds_the_starts_that_waited_before_it_for_a_while(marks, since, now, expected):
    assert held(marks, since, now) == expected


def test_marks_go_to_the_runs_experiments_and_a_task_marks_its_groups_only(tmp_path, store):
    import sys

    from trialflow.config import load_config
    from trialflow.experiment import GROUP_ATTR, Experiment
    from trialflow.runs import start_run
    from trialflow.steering.cleared_starts import mark_cleared, read_marks

    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
        f"trialCommand: {sys.executable} -c pass\ntrialConcurrency: 1\nmaxTrialNumber: 3\n"
        "tuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    experiment = Experiment(load_config(tmp_path / "config.yml"), "emarks", tmp_path / "work")
    start_run(experiment, store, "dag_m", "r1", {})
    assert store.experiment_attr("emarks", GROUP_ATTR) is None
    assert mark_cleared(store, "dag_m", "other_run", None, None, at=5.0) == 0
    assert mark_cleared(store, "dag_m", "r1", [2], "a_group", at=5.0) == 0  # another group's tasks
    assert mark_cleared(store, "dag_m", "r1", [2, 3], None, at=6.0) == 1  # one write for both
    assert mark_cleared(store, "dag_m", "r1", None, None, at=7.0) == 1
    assert mark_cleared(store, "dag_m", "r1", [], None, at=8.0) == 0
    assert read_marks(store, "emarks", "r1") == {"2": 6.0, "3": 6.0, ALL: 7.0}
    assert read_marks(store, "emarks", "r2") == {}


def test_a_clear_is_one_write_per_run_and_group_and_a_whole_run_covers_its_tasks():
    cleared = [
        ("d", "r1", 2, None),
        ("d", "r1", 3, None),  # the DAG's own experiment: with 2, one write
        ("d", "r1", 3, "g"),  # another group's task 3: its own write
        ("d", "r2", 1, None),
        ("d", "r2", None, None),  # r2 cleared whole: its task 1 needs nothing more
        ("e", "r1", 0, None),  # another DAG's run of the same id
    ]
    assert marks_of(cleared) == [
        ClearMark("d", "r2", None, None),
        ClearMark("d", "r1", None, (2, 3)),
        ClearMark("d", "r1", "g", (3,)),
        ClearMark("e", "r1", None, (0,)),
    ]
    assert marks_of([]) == []
