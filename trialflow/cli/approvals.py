"""What a DAG run waits for from a person, said by `trialflow run my_dag.py`.

A DAG that asks a person (Airflow's human-in-the-loop tasks: ``ApprovalOperator``,
``HITLOperator``) after its experiment waits, and the command printed nothing: its progress
lines stood at "12/12 done" while the run waited for an answer nobody knew was asked (issue 64).
Each such task is said once: its subject, where to answer (the task's Required Actions tab in
Airflow's UI) and who may (the users it is assigned to; else anyone who may edit the DAG). Pure:
the command's follower hands it Airflow's answer to ``GET .../hitlDetails``. No Airflow import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

#: Characters of a subject shown (a DAG's own text, one line).
SUBJECT_CHARS = 200


@dataclass(frozen=True)
class WaitingForPerson:
    """One human-in-the-loop task of the run that has no answer yet."""

    task_id: str
    map_index: int
    subject: str
    url: str
    #: The users it is assigned to (empty: anyone who may edit the DAG).
    assigned: tuple[str, ...]

    @property
    def key(self) -> tuple[str, int]:
        return self.task_id, self.map_index

    def line(self, dag_id: str) -> str:
        who = ", ".join(self.assigned) if self.assigned else f"any user who may edit DAG {dag_id}"
        task = self.task_id if self.map_index < 0 else f"{self.task_id}[{self.map_index}]"
        return f"{task} waits for a person: {self.subject!r}; answer at {self.url} ({who})"


def required_actions_url(base_url: str, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """The task instance's Required Actions tab (the UI's own route for it)."""
    mapped = f"/mapped/{map_index}" if map_index >= 0 else ""
    dag, run, task = (quote(part, safe="") for part in (dag_id, run_id, task_id))
    return f"{base_url.rstrip('/')}/dags/{dag}/runs/{run}/tasks/{task}{mapped}/required_actions"


def waiting_for_people(
    collection: Mapping[str, Any], base_url: str, dag_id: str, run_id: str
) -> list[WaitingForPerson]:
    """The unanswered human-in-the-loop tasks in an answer of ``GET .../hitlDetails``; what
    does not read as one is left out (the command goes on following the run)."""
    found = []
    details = collection.get("hitl_details")
    for detail in details if isinstance(details, list) else []:
        if not isinstance(detail, dict) or detail.get("response_received"):
            continue
        instance = detail.get("task_instance")
        if not isinstance(instance, dict) or not isinstance(instance.get("task_id"), str):
            continue
        task_id = instance["task_id"]
        map_index = instance.get("map_index", -1)
        map_index = map_index if isinstance(map_index, int) and not isinstance(map_index, bool) else -1
        users = detail.get("assigned_users")
        assigned = tuple(
            str(u.get("name") or u.get("id"))
            for u in (users if isinstance(users, list) else [])
            if isinstance(u, dict) and (u.get("name") or u.get("id"))
        )
        subject = " ".join(str(detail.get("subject") or "").split())[:SUBJECT_CHARS]
        url = required_actions_url(base_url, dag_id, run_id, task_id, map_index)
        found.append(WaitingForPerson(task_id, map_index, subject, url, assigned))
    return found
