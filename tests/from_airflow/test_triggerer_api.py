"""The triggerer's in-process execution API built as it starts (trialflow.from_airflow.triggerer_api):
Airflow's supervisor gets the built instance, a fork waits for the build, the seam is where
Airflow keeps it."""

from __future__ import annotations

import inspect
import os
from types import SimpleNamespace

from trialflow.from_airflow.triggerer_api import build_ahead, in_triggerer


def test_only_the_triggerer_builds_it():
    assert in_triggerer(["/venv/lib/python3.11/site-packages/airflow/__main__.py", "triggerer"])
    assert in_triggerer(["/venv/bin/airflow", "triggerer", "--capacity", "2000"])
    for argv in (["airflow", "scheduler"], ["airflow", "api-server"], ["airflow", "dag-processor"], ["airflow"]):
        assert not in_triggerer(argv)


def test_airflows_supervisor_builds_its_client_where_trialflow_hands_the_api_over():
    """The seam: the supervisor's make_client calls the module's in_process_api_server by name
    at each call. An Airflow that moves it fails here, not silently slower."""
    from airflow.jobs import triggerer_job_runner

    assert callable(triggerer_job_runner.in_process_api_server)
    assert "in_process_api_server()" in inspect.getsource(triggerer_job_runner.TriggerRunnerSupervisor.make_client)


def test_the_supervisors_client_gets_the_api_built_ahead_and_a_fork_waits_for_it():
    """Airflow's real in-process API, built ahead on a stand-in of the triggerer's module (the
    real module keeps its own for the rest of the session): a fork made while it builds (as the
    supervisor forks its trigger runner) waits for the build; the client made as the supervisor
    makes it then uses that very API, and it answers."""
    from airflow.jobs import triggerer_job_runner
    from airflow.sdk.api.client import Client

    runner = SimpleNamespace(in_process_api_server=triggerer_job_runner.in_process_api_server)
    build = build_ahead(runner)
    assert build is not None and not build.ready.is_set()  # building in its thread
    pid = os.fork()
    if pid == 0:
        os._exit(0 if build.ready.is_set() else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the fork did not wait for the build"
    assert build.built is not None, "nothing was built"
    api = runner.in_process_api_server()
    assert api is build.built and runner.in_process_api_server() is api
    # as TriggerRunnerSupervisor.make_client makes it
    client = Client(base_url=None, token="", dry_run=True, transport=api.transport)
    client.base_url = "http://in-process.invalid./"
    assert client.get("health/ping").status_code == 200


def test_a_failed_build_leaves_airflows_own_at_first_use():
    made: list[int] = []

    def airflows_own() -> object:
        made.append(1)
        if len(made) == 1:
            raise RuntimeError("no database")  # the build's try
        return "built at first use"

    runner = SimpleNamespace(in_process_api_server=airflows_own)
    build = build_ahead(runner)
    assert build is not None and build.ready.wait(10)
    assert build.built is None
    assert runner.in_process_api_server() == "built at first use"


def test_an_airflow_without_the_seam_is_left_alone():
    runner = SimpleNamespace()
    assert build_ahead(runner) is None and not hasattr(runner, "in_process_api_server")
