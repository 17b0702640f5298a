"""The state a trial's task ends in, decided from how its trial ended. No Airflow.

A trial that succeeded ends its task ``success``; one stopped on purpose (an assessor's early
stop, a person's kill or stop, the experiment's deadline) ``skipped``; a failure ``failed``.
One more case: a person who set the task's state in Airflow (Mark failed, Mark success, Mark
skipped in the Grid) chose that state, and the task keeps it. Airflow usually keeps it itself,
but a mark that lands as the task defers is undone by the deferral (the task is deferred
again, measured within 6 ms of the click), and the trigger that then ends the task, or the
worker's next try, must end it as the person chose, not as any stopped trial's.

The person's choice travels in the trial's stop reason, which the api-server's listener and
the operator's or trigger's on_kill write (``marked_reason``) and which the store keeps beside
the trial, whoever follows it next: the one phrase is written and read here alone.
"""

from __future__ import annotations

from typing import Literal

TaskState = Literal["success", "failed", "skipped"]

#: The start of every stop reason that comes from a person's action in Airflow.
FROM_AIRFLOW = "stopped from Airflow: "
#: The stop reason's words for each state a person may set a task to.
MARKED: dict[TaskState, str] = {
    "failed": "its task was marked failed",
    "success": "its task was marked success",
    "skipped": "its task was marked skipped",
}


def marked_reason(state: TaskState) -> str:
    """The trial's stop reason when a person set its task to ``state``."""
    return FROM_AIRFLOW + MARKED[state]


def person_chose(message: str | None) -> TaskState | None:
    """The state a person set the trial's task to, read from the trial's stop reason; None
    when no person marked it (a kill from the pages, a clear, an early stop, a failure)."""
    if not message or not message.startswith(FROM_AIRFLOW):
        return None
    action = message[len(FROM_AIRFLOW) :]
    for state, words in MARKED.items():
        # the words end there or a clause follows ("; DAG run ... is failed")
        if action == words or action.startswith(words + ";"):
            return state
    return None


def task_state(succeeded: bool, stopped_on_purpose: bool, message: str | None) -> TaskState:
    """The task's end state: the person's choice where one marked it, else what the trial's
    end says (success, skipped on purpose, failed)."""
    if succeeded:
        return "success"
    chosen = person_chose(message) if stopped_on_purpose else None
    if chosen is not None:
        return chosen
    return "skipped" if stopped_on_purpose else "failed"
