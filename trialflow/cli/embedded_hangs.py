"""When a private Airflow's component that still runs counts as hung (trialflow.cli.embedded).

A component that exits is started again (trialflow.cli.embedded_restarts); one that hangs never
exits. Airflow 3.3's triggerer was seen to hang for good under a thousand one-second trials
(bench/thousand.py, bench/RESULTS.md, tenth pass): its supervisor blocked sending the trigger
runner a message with 700 new triggers, while the runner's event loop blocked writing a log line
to the socket that supervisor no longer read. Nothing in Airflow ends that; every deferred task
of every DAG then waits for ever, and a `trialflow run` with it. A deployed Airflow has a
liveness check for this (`airflow jobs check`, as Airflow's own docker-compose file runs it); the process
that started a private Airflow is its probe: a component that Airflow's own health has called
unhealthy (no heartbeat within its health check threshold, 30 s) in every look for
``limit`` seconds is killed, and started again like one that died. Nothing is lost by it:
a new triggerer takes the triggers over and trialflow's triggers re-attach to their trials.

Pure: what the health said, and when, in; the components to kill, out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Seconds a component may be reported unhealthy in every look before it counts as hung: a
#: healthy one heartbeats every 5 s and is reported unhealthy after 30 s without one, so
#: this is about two and a half minutes without a heartbeat.
HANG_SECONDS = 120.0
#: Seconds between two looks at Airflow's health.
LOOK_INTERVAL = 10.0
#: Seconds between two looks past which a streak starts again: nothing was seen in between
#: (no wait or call looked, or the api-server did not answer), so it may have recovered.
MAX_GAP = 60.0
#: Each watched component and its key in Airflow's health (GET /api/v2/monitor/health).
HEALTH_KEYS = {"scheduler": "scheduler", "triggerer": "triggerer", "dag-processor": "dag_processor"}


def unhealthy(health: Any) -> set[str]:
    """The components Airflow's health reports unhealthy; none where the answer says nothing
    about them: not a health answer, or the metadata database itself unreachable (then every
    component reads unhealthy, whatever it is doing)."""
    if not isinstance(health, Mapping):
        return set()
    database = health.get("metadatabase")
    if not isinstance(database, Mapping) or database.get("status") != "healthy":
        return set()
    found = set()
    for component, key in HEALTH_KEYS.items():
        entry = health.get(key)
        if isinstance(entry, Mapping) and entry.get("status") == "unhealthy":
            found.add(component)
    return found


@dataclass
class HangWatch:
    """Level-triggered: each look says which components read unhealthy now; one that read so
    in every look for ``limit`` seconds is hung. A look that finds it healthy ends its streak;
    so does its being named hung (it is started again: its next streak starts then), and so
    does a gap of more than ``max_gap`` seconds between two looks."""

    limit: float = HANG_SECONDS
    max_gap: float = MAX_GAP
    _since: dict[str, float] = field(default_factory=dict)
    _last: float | None = None

    def look(self, unhealthy_now: set[str], now: float) -> list[str]:
        """The components hung as of ``now``, in a stable order."""
        if self._last is not None and now - self._last > self.max_gap:
            self._since.clear()  # unseen in between: every streak starts again
        self._last = now
        for component in list(self._since):
            if component not in unhealthy_now:
                del self._since[component]
        hung = []
        for component in sorted(unhealthy_now):
            since = self._since.setdefault(component, now)
            if now - since >= self.limit:
                hung.append(component)
                del self._since[component]
        return hung
