"""Attach to a home's live private Airflow, or start it for the others; leave it, last one out
stopping it unless it is kept (trialflow.cli.home_airflow says what is shared and why).

``joined(airflow, keep)`` holds the home's lock while the caller starts what it must: a second
`trialflow run` of the home waits for the first's start, then attaches instead of starting a
second Airflow on the same database. ``leave(airflow)`` is the other end.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

from trialflow.cli import home_airflow
from trialflow.cli.embedded import EmbeddedAirflow, EmbeddedAirflowError
from trialflow.cli.home_airflow import Proc, Running


def answers(port: int) -> bool:
    """The api-server of ``port`` says it is healthy (within 3 s)."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def kill_leftovers(running: Running) -> None:
    """What is left of a stale Airflow: each component's whole process group (the scheduler's
    LocalExecutor workers outlive a scheduler that was killed alone), found by process group
    and start time, so a pid the system has since given to another process is left alone.
    Trials run in sessions of their own and stay: the next run re-attaches them."""
    leaders = {proc.pid: proc.started for proc in running.components.values()}
    for process in psutil.process_iter(["pid", "create_time"]):
        try:
            group = os.getpgid(process.info["pid"])
        except (ProcessLookupError, PermissionError):
            continue
        if group in leaders and process.info["create_time"] >= leaders[group] - 0.01:
            try:
                os.kill(process.info["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@contextmanager
def joined(airflow: EmbeddedAirflow, keep: bool = False) -> Iterator[bool]:
    """Attach ``airflow`` to the home's live Airflow (yields True: nothing to start), or yield
    False, under the home's lock, for the caller to start it; once started it is recorded
    (``keep``: it stays up after its last user). A live Airflow of another DAGs folder is
    replaced when nobody uses or keeps it, else refused, saying whose it is."""
    me = home_airflow.me()
    with home_airflow.locked(airflow.home):
        running = home_airflow.read(airflow.home)
        if running is not None and running.alive() and answers(running.port):
            if Path(running.dags_folder) == airflow.dags_folder.resolve():
                airflow.adopt(running.port, running.components)
                running.users = [*running.live_users(), me]
                running.keep = running.keep or keep
                home_airflow.write(airflow.home, running)
                yield True
                return
            users = running.live_users()
            if users or running.keep:
                who = f"{len(users)} run(s) (pid {', '.join(str(u.pid) for u in users)})" if users else "`trialflow up`"
                raise EmbeddedAirflowError(
                    f"the private Airflow of {airflow.home.parent} is up for DAGs folder {running.dags_folder}, "
                    f"kept by {who}; wait for it, or `trialflow down --home {airflow.home.parent}`"
                )
        if running is not None:
            kill_leftovers(running)
            keep = keep or running.keep  # a kept Airflow that crashed is kept once replaced
        home_airflow.forget(airflow.home)
        yield False
        components = {name: Proc.of(p.pid) for name, p in airflow.processes.items()}
        home_airflow.write(
            airflow.home, Running(airflow.port, components, str(airflow.dags_folder.resolve()), keep, [me])
        )


def leave(airflow: EmbeddedAirflow, keep: bool = False) -> bool:
    """This run is done with the home's Airflow: stop it when no other run uses it and nobody
    keeps it (``keep``: this run asks to keep it). True when it was stopped."""
    me = home_airflow.me()
    with home_airflow.locked(airflow.home):
        running = home_airflow.read(airflow.home)
        if running is None or running.port != airflow.port:
            airflow.stop()  # never recorded (its start failed): whatever this run started
            return True
        running.users = [u for u in running.live_users() if u != me]
        running.keep = running.keep or keep
        if running.users or running.keep:
            home_airflow.write(airflow.home, running)
            airflow.processes.clear()  # they run on, in sessions of their own
            return False
        home_airflow.forget(airflow.home)
        airflow.stop()
        return True


def adopt_running(airflow: EmbeddedAirflow) -> Running | None:
    """The home's live Airflow, adopted by ``airflow`` (`trialflow down`, `trialflow ui`); None
    when none is up (a stale record is cleaned away)."""
    with home_airflow.locked(airflow.home):
        running = home_airflow.read(airflow.home)
        if running is None:
            return None
        if not running.alive():
            kill_leftovers(running)
            home_airflow.forget(airflow.home)
            return None
        airflow.adopt(running.port, running.components)
        return running


def up(airflow: EmbeddedAirflow) -> bool:
    """`trialflow up`: the home's Airflow started and kept (True), or kept if it was up (False)."""
    with joined(airflow, keep=True) as attached:
        if not attached:
            airflow.migrate()
            airflow.start()
            airflow.wait_serving()
            airflow.warm_up()
            airflow.wait_healthy()
    leave(airflow, keep=True)  # `up` itself is not one of its users
    return not attached


def down(airflow: EmbeddedAirflow) -> str:
    """`trialflow down`: stop the home's Airflow now, unless runs use it (then it stops after the
    last one). Says which: "stopped", "in use by N run(s)", "not up"."""
    with home_airflow.locked(airflow.home):
        running = home_airflow.read(airflow.home)
        if running is None:
            return "not up"
        if not running.alive():
            kill_leftovers(running)
            home_airflow.forget(airflow.home)
            return "not up (what was left of a stopped one is cleaned away)"
        users = running.live_users()
        if users:
            running.keep = False
            running.users = users
            home_airflow.write(airflow.home, running)
            return (
                f"in use by {len(users)} run(s) (pid {', '.join(str(u.pid) for u in users)}): it stops after the last"
            )
        airflow.adopt(running.port, running.components)
        home_airflow.forget(airflow.home)
        airflow.stop()
        return "stopped"
