"""`trialflow run my_dag.py` says each task that waits for a person, once, with where to answer
and who may (issue 64, 8). The shape is Airflow 3.3's ``GET .../hitlDetails`` answer
(airflow.api_fastapi.core_api.datamodels.hitl.HITLDetailCollection)."""

from __future__ import annotations

from typing import Any

from trialflow.cli.approvals import SUBJECT_CHARS, WaitingForPerson, required_actions_url, waiting_for_people
from trialflow.cli.dag_file_run import DagFileRun

BASE = "http://127.0.0.1:8793"


def detail(task_id: str, map_index: int = -1, answered: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "task_instance": {"task_id": task_id, "map_index": map_index, "dag_id": "pipeline", "state": "deferred"},
        "options": ["Approve", "Reject"],
        "subject": "Promote the digits model?",
        "assigned_users": [],
        "created_at": "2026-12-02T21:00:00Z",
        "response_received": answered,
        **extra,
    }


def test_an_unanswered_approval_says_where_to_answer_and_who_may():
    answer = {
        "hitl_details": [
            detail("approve"),
            detail("choose", 2, assigned_users=[{"id": "7", "name": "alice"}, {"id": "9", "name": ""}]),
            detail("done", answered=True),
        ],
        "total_entries": 3,
    }
    first, second = waiting_for_people(answer, BASE + "/", "pipeline", "manual__2026-12-02T21:00:00+00:00")
    assert (
        first.url
        == f"{BASE}/dags/pipeline/runs/manual__2026-12-02T21%3A00%3A00%2B00%3A00/tasks/approve/required_actions"
    )
    assert first.line("pipeline") == (
        f"approve waits for a person: 'Promote the digits model?'; answer at {first.url} "
        "(any user who may edit DAG pipeline)"
    )
    assert second.url.endswith("/tasks/choose/mapped/2/required_actions")
    assert second.assigned == ("alice", "9") and second.line("pipeline").endswith("(alice, 9)")


def test_what_does_not_read_as_a_task_is_left_out_and_a_subject_is_one_bounded_line():
    hostile = {
        "hitl_details": [
            "not a dict",
            {"task_instance": None},
            {"task_instance": {"task_id": 5}},
            detail("long", map_index=True, subject="a\nb\r" + "x" * 10_000, assigned_users="root"),
        ]
    }
    (only,) = waiting_for_people(hostile, BASE, "d", "r")
    assert only.map_index == -1 and only.assigned == ()
    assert "\n" not in only.subject and len(only.subject) == SUBJECT_CHARS
    assert waiting_for_people({"hitl_details": None}, BASE, "d", "r") == []
    assert waiting_for_people({}, BASE, "d", "r") == []


def test_ids_are_quoted_into_the_path():
    url = required_actions_url(BASE, "d/x", "r?y", "t#z", -1)
    assert url == f"{BASE}/dags/d%2Fx/runs/r%3Fy/tasks/t%23z/required_actions"


class FakeAirflow:
    """Airflow's answers as the follow loop reads them: a run that waits, then ends."""

    base_url = BASE

    def __init__(self) -> None:
        self.polls = 0

    def check_alive(self) -> None:
        self.polls += 1

    def dag_run_state(self, dag_id: str, run_id: str) -> str:
        return "success" if self.polls >= 4 else "running"

    def hitl_details(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return {"hitl_details": [detail("approve")] if self.polls >= 2 else []}


def test_the_follow_loop_says_each_waiting_task_once():
    run = DagFileRun.__new__(DagFileRun)
    run.airflow, run.dag_id, run.run_id, run.groups, run.poll_interval = FakeAirflow(), "pipeline", "r1", [], 0.0
    said: list[WaitingForPerson] = []
    import trialflow.cli.dag_file_run as module

    old, module.HITL_LOOK_EVERY = module.HITL_LOOK_EVERY, 0.0
    try:
        assert run.wait(lambda *_: None, on_waiting=said.append) == "success"
    finally:
        module.HITL_LOOK_EVERY = old
    assert [w.task_id for w in said] == ["approve"]
