"""The triggerer's in-process execution API, built as the triggerer starts instead of inside
the run that first needs it.

A trigger that asks Airflow anything (a connection kept in the metastore, a variable, the task
states trialflow's run watch reads) sends the request to the triggerer's supervisor, which
answers it through an execution API of its own, in process. Airflow 3.3 builds that API at the
first request, in the supervisor's main thread: 4.3-5.4 s of CPU on this project's two-core
machine (FastAPI's routes and Cadwyn's versioned models). Meanwhile the supervisor reads
nothing from the trigger runner, whose event loop then blocks writing its next log line to the
supervisor: every trigger of the triggerer stops. Measured in bench/thousand.py: at a run's
first ask of task states, "Triggerer's async thread was blocked for 5.00 seconds", no trial
started or ended for 4 s (bench/RESULTS.md). A triggerer restarted mid-run pays it again.

Here the API is built in a thread of the supervisor's process as it starts, with one request
through it, and Airflow's ``in_process_api_server`` then hands out that instance: the first
trigger's request finds it ready. The seam is Airflow's private module function, so it lives
here alone; an Airflow without it gets nothing done and keeps its own behaviour (a test fails
where the seam moved). Before the supervisor forks its trigger runner, the fork waits for the
build to end (a bounded wait): no thread of ours is half-way through an import in the child.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

#: How long a fork (the trigger runner's) or the first request waits for the build, at most.
READY_WAIT_SECONDS = 60.0
#: The address Airflow's supervisor gives its in-process client (the transport ignores it).
IN_PROCESS_URL = "http://in-process.invalid./"
#: The request that makes the API build itself: Airflow's own health route, which reads nothing.
WARM_ROUTE = "health/ping"

_started = False


class AheadBuild:
    """One build of the API in a thread, and the ``in_process_api_server`` that hands it out."""

    def __init__(self, make: Callable[[], Any]):
        self.make = make
        self.ready = threading.Event()
        self.built: Any = None

    def start(self) -> None:
        ready = self.ready  # the fork handler waits for this build's end, whatever comes later
        os.register_at_fork(before=lambda: ready.wait(READY_WAIT_SECONDS))
        threading.Thread(target=self._build, name="trialflow-execution-api", daemon=True).start()

    def in_process_api_server(self) -> Any:
        """The API built at start (waiting for it if the build is under way); Airflow's own
        where the build failed or took too long."""
        self.ready.wait(READY_WAIT_SECONDS)
        return self.built if self.built is not None else self.make()

    def _build(self) -> None:
        began = time.monotonic()
        try:
            import httpx

            api = self.make()
            with httpx.Client(transport=api.transport, base_url=IN_PROCESS_URL) as client:  # closing leaves the API up
                answer = client.get(WARM_ROUTE)
            if answer.status_code >= 500:
                raise RuntimeError(f"GET {WARM_ROUTE} answered {answer.status_code}")
            self.built = api
            log.info("trialflow: the triggerer's execution API was built ahead in %.1f s", time.monotonic() - began)
        except Exception as exc:  # Airflow builds its own at first use, as without trialflow
            log.warning("trialflow: the triggerer's execution API was not built ahead: %s", exc)
        finally:
            self.ready.set()


def in_triggerer(argv: Sequence[str]) -> bool:
    """True in ``airflow triggerer`` (its supervisor, where plugins load as it starts)."""
    return "triggerer" in argv[1:3]


def prepare_in_background() -> bool:
    """Start building the API in a thread and have Airflow's supervisor use it; False where this
    Airflow has no such seam (nothing changed) or it was started already in this process."""
    global _started
    if _started:
        return False
    try:
        from airflow.jobs import triggerer_job_runner
    except ImportError:
        return False
    if build_ahead(triggerer_job_runner) is None:
        return False
    _started = True
    return True


def build_ahead(runner_module: Any) -> AheadBuild | None:
    """Build the API of ``runner_module``'s ``in_process_api_server`` ahead and put the build's
    own in its place; None where the module has none."""
    original = getattr(runner_module, "in_process_api_server", None)
    if not callable(original):
        log.info("trialflow: this Airflow's triggerer has no in_process_api_server; its API is built at first use")
        return None
    build = AheadBuild(original)
    runner_module.in_process_api_server = build.in_process_api_server
    build.start()
    return build
