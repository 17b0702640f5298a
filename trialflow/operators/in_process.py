"""Whether a task runs inside Airflow's ``dag.test()``, which runs one task at a time.

``dag.test()`` (without an executor) runs every task in the calling process, one after the
other, and runs a deferred task's trigger in line until it fires. A step that waits, deferred,
for *other* tasks of the run to end (the watch) would wait for ever there: those tasks run only
after it. Such a step asks this module and steps aside.
"""

from __future__ import annotations


def runs_in_process() -> bool:
    """True when this task runs in Airflow's in-process test supervisor (``dag.test()``): its
    comms with the supervisor are the in-process deque, never the socket of a real worker."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:  # another Task SDK layout: a real worker, as far as we can tell
        return False
    return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)
