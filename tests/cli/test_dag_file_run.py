"""`trialflow run my_dag.py`'s pure parts: which DAG, the author's own tasks, a log's tail."""

from __future__ import annotations

import pytest

from trialflow.authoring.plan import Built
from trialflow.cli.dag_file_run import LOG_LINE_CHARS, TaskOutcome, log_lines, own_tasks
from trialflow.cli.dag_files import NoExperiment, dag_of


def ti(task_id: str, state: str | None, map_index: int = -1, try_number: int = 1) -> dict:
    return {"task_id": task_id, "state": state, "map_index": map_index, "try_number": try_number}


def test_the_experiments_tasks_are_not_the_authors():
    tis = [
        ti("prepare", "success"),
        ti("tune_a.start_experiment", "success"),
        ti("tune_a.trial", "success", 0),
        ti("tune_b.end_experiment", "failed"),
        ti("tune_ab", "success"),  # a task of the author's whose name starts like a group's
        ti("train", "failed", try_number=2),
    ]
    assert own_tasks(tis, ["tune_a", "tune_b"]) == [
        TaskOutcome("prepare", {"success": 1}),
        TaskOutcome("tune_ab", {"success": 1}),
        TaskOutcome("train", {"failed": 1}, failed=(-1, 2)),
    ]


def test_a_whole_experiment_dag_has_no_tasks_of_the_authors():
    assert own_tasks([ti("start_experiment", "success"), ti("trial", "failed", 0)], [None]) == []


def test_a_mapped_task_says_each_state_and_its_first_failed_instance():
    tis = [ti("fit", "success", 0), ti("fit", "failed", 1), ti("fit", "failed", 2), ti("fit", None, 3)]
    (fit,) = own_tasks(tis, ["tune"])
    assert fit.state == "2 failed, 1 none, 1 success"
    assert fit.failed == (1, 1)
    assert TaskOutcome("one", {"upstream_failed": 1}).state == "upstream_failed"


def test_a_logs_tail_reads_structured_and_plain_entries():
    entries = [
        {"event": "::group::Log message source details", "level": None},
        {"event": "Task started", "level": "info"},
        {
            "event": "Task failed with exception",
            "level": "error",
            "error_detail": [{"exc_type": "RuntimeError", "exc_value": "broke"}],
        },
        "a plain line\nand another",
        {"event": "x" * 5000, "level": "info"},
    ]
    assert log_lines(entries) == (
        "info: Task started",
        "error: Task failed with exception",
        "  RuntimeError: broke",
        "a plain line",
        "and another",
        ("info: " + "x" * 5000)[:LOG_LINE_CHARS],
    )
    assert log_lines([{"event": f"line {i}", "level": "info"} for i in range(100)], limit=2) == (
        "info: line 98",
        "info: line 99",
    )
    assert log_lines([]) == ()


def built(dag_id: str, group: str | None) -> Built:
    return Built(dag_id if group is None else f"{dag_id} / {group}", "c.yml", (), dag_id, group)


def test_the_dag_to_run_is_the_only_one_or_the_named_one():
    one = [built("pipeline", "tune_a"), built("pipeline", "tune_b")]
    assert dag_of("my_dag.py", one, None) == "pipeline"
    assert dag_of("my_dag.py", one, "pipeline") == "pipeline"
    several = one + [built("nightly", None)]
    with pytest.raises(
        NoExperiment, match=r"my_dag.py: several DAGs build experiments \(pipeline, nightly\): name one with --dag-id"
    ):
        dag_of("my_dag.py", several, None)
    assert dag_of("my_dag.py", several, "nightly") == "nightly"
    with pytest.raises(
        NoExperiment, match=r"--dag-id other: no DAG of that id builds an experiment here \(pipeline, nightly\)"
    ):
        dag_of("my_dag.py", several, "other")
