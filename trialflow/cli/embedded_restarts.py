"""How often a private Airflow's component that died is started again (trialflow.cli.embedded).

A private Airflow runs on SQLite on the author's machine. On a loaded two-core machine its
scheduler has exited on ``sqlite3.OperationalError: database is locked`` past its 30 s wait
(trialflow.cli.embedded_database), in the full test suite while ten trial tasks were cleared around
their deferral; every later call of that Airflow then failed on "airflow scheduler exited", and
so would a `trialflow run` that had hours of trials left. What a process supervisor (systemd,
a Kubernetes Deployment) does for a deployed Airflow, the one that started the components does
here: a component that exits is started again with the same command, a few times. Nothing is
lost by it: Airflow keeps its state in the database (a new scheduler adopts the queued and
running task instances, a new triggerer takes the triggers over) and trialflow in its store.

A component that keeps dying is not started for ever: past ``limit`` starts within ``window``
seconds the error names it and its log, as before.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

#: Starts again allowed per component within RESTART_WINDOW seconds.
RESTART_LIMIT = 3
RESTART_WINDOW = 600.0


@dataclass(frozen=True)
class Restart:
    """One component started again: which, how its last process ended, and when (monotonic)."""

    component: str
    exit_code: int
    at: float
    #: The last error its log said before it exited (what the test summary and `trialflow run`
    #: show: the log itself may be gone by the time someone reads them).
    last_error: str = ""


#: A log line that says why a component exited (a Python exception's last line, Airflow's errors).
_ERROR_WORDS = ("Error", "Exception", "error", "Traceback")


def last_error(log_tail: str, limit: int = 300) -> str:
    """The last line of ``log_tail`` that names an error, bounded to ``limit`` characters."""
    for line in reversed(log_tail.splitlines()):
        if any(word in line for word in _ERROR_WORDS):
            return line.strip()[:limit]
    return ""


@dataclass
class RestartBudget:
    """The starts again each component still has: ``limit`` per sliding ``window`` seconds."""

    limit: int = RESTART_LIMIT
    window: float = RESTART_WINDOW
    _starts: dict[str, deque[float]] = field(default_factory=dict)

    def take(self, component: str, now: float) -> bool:
        """Whether ``component`` may be started again at ``now``; counts the start when it may."""
        starts = self._starts.setdefault(component, deque())
        while starts and now - starts[0] >= self.window:
            starts.popleft()
        if len(starts) >= self.limit:
            return False
        starts.append(now)
        return True

    def used(self, component: str) -> int:
        """Starts again of ``component`` counted in the current window (for the log line)."""
        return len(self._starts.get(component, ()))
