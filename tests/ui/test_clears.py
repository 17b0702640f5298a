"""A clear of a trial task, seen by the api-server's middleware (trialflow.ui.clears): which
trials a clear reset (pure, every case), the middleware passing the request and the answer on
untouched while it reads them, and the stop requests it writes in a real store."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from trialflow.tuning.asker import ask
from trialflow.ui.clears import (
    CLEARED,
    MAX_REQUEST_BYTES,
    ClearedTask,
    ClearedTrials,
    clear_route,
    cleared_tasks,
    record_clears,
)

TASKS = "/api/v2/dags/dag_a/clearTaskInstances"
RUN = "/api/v2/dags/dag_a/dagRuns/r1/clear"


def answer(*tis: dict) -> bytes:
    return json.dumps({"task_instances": list(tis), "total_entries": len(tis)}).encode()


def ti(task_id: str = "trial", map_index: int = 0, run_id: str = "r1") -> dict:
    return {"dag_id": "dag_a", "dag_run_id": run_id, "task_id": task_id, "map_index": map_index, "state": None}


REAL = json.dumps({"dry_run": False, "dag_run_id": "r1", "task_ids": [["trial", 0]], "only_failed": False}).encode()


@pytest.mark.parametrize(
    ("method", "path", "watched"),
    [
        ("POST", TASKS, True),
        ("POST", RUN, True),
        ("POST", "/airflow" + TASKS, True),  # under a base URL's path
        ("POST", TASKS + "/", True),
        ("GET", TASKS, False),
        ("PATCH", "/api/v2/dags/dag_a/dagRuns/r1/taskInstances/trial/0", False),
        ("POST", "/api/v2/dags/dag_a/clearTaskInstances/x", False),
        ("POST", "/api/v2/dags/dag_a/dagRuns/r1/clear/x", False),
        ("POST", "/trialflow/api/experiments/e1/stop", False),
        ("POST", "/api/v2/dags/" + "d" * 300 + "/clearTaskInstances", False),
    ],
)
def test_only_airflows_clear_routes_are_watched(method, path, watched):
    assert clear_route(method, path) is watched


@pytest.mark.parametrize(
    ("path", "request_body", "status", "response", "expected"),
    [
        (TASKS, REAL, 200, answer(ti()), [ClearedTask("dag_a", "r1", "trial", 0)]),
        # a task group's trial task, several of them, other tasks and unmapped ones left out
        (
            TASKS,
            REAL,
            200,
            answer(ti("tune.trial", 2), ti("tune.trial", 3, "r2"), ti("prepare", -1), ti("tune.end_experiment", -1)),
            [ClearedTask("dag_a", "r1", "tune.trial", 2), ClearedTask("dag_a", "r2", "tune.trial", 3)],
        ),
        (TASKS, REAL, 200, answer(ti("trial", -1)), []),  # the unmapped parent, not a trial
        (TASKS, REAL, 200, answer(ti("not_a_trial", 0)), []),
        # a dry run (Airflow's default when the key is absent) clears nothing
        (TASKS, json.dumps({"dry_run": True}).encode(), 200, answer(ti()), []),
        (TASKS, json.dumps({"task_ids": ["trial"]}).encode(), 200, answer(ti()), []),
        (TASKS, json.dumps({"dry_run": "false"}).encode(), 200, answer(ti()), []),
        # refused or failed: SQLite's "database is locked" 500, a 409 of prevent_running_task
        (TASKS, REAL, 500, answer(ti()), []),
        (TASKS, REAL, 409, answer(ti()), []),
        (TASKS, REAL, 403, b"", []),
        # bodies that are not what Airflow sends
        (TASKS, b"not json", 200, answer(ti()), []),
        (TASKS, b"[]", 200, answer(ti()), []),
        (TASKS, REAL, 200, b"{", []),
        (TASKS, REAL, 200, json.dumps({"task_instances": "x"}).encode(), []),
        (TASKS, REAL, 200, json.dumps({"task_instances": [1, None, {"task_id": "trial"}]}).encode(), []),
        (TASKS, REAL, 200, answer({**ti(), "map_index": "0"}), []),
        (TASKS, REAL, 200, answer({**ti(), "map_index": True}), []),
        (TASKS, REAL, 200, answer({**ti(), "dag_run_id": None}), []),
        # a whole DAG run cleared: every trial task of it, unless only its failed or new tasks
        (RUN, json.dumps({"dry_run": False}).encode(), 200, b"{}", [ClearedTask("dag_a", "r1", "", None)]),
        (RUN, json.dumps({"dry_run": False, "only_failed": True}).encode(), 200, b"{}", []),
        (RUN, json.dumps({"dry_run": False, "only_new": True}).encode(), 200, b"{}", []),
        (RUN, json.dumps({"dry_run": True}).encode(), 200, answer(ti()), []),
        (RUN, json.dumps({"dry_run": False}).encode(), 404, b"{}", []),
    ],
)
def test_the_trials_a_clear_reset(path, request_body, status, response, expected):
    assert cleared_tasks(path, request_body, status, response) == expected


def test_a_huge_answer_is_read_in_linear_time():
    """Ten times the tasks take about ten times as long (a quadratic read would take a hundred):
    compared with itself on the same machine, not against a wall-clock bound (a loaded CI
    machine took 2.1 s for 50,000 once)."""
    import time

    def best_of_three(count: int) -> float:
        body = answer(*(ti("trial", i) for i in range(count)))
        times = []
        for _ in range(3):
            started = time.perf_counter()
            found = cleared_tasks(TASKS, REAL, 200, body)
            times.append(time.perf_counter() - started)
            assert len(found) == count
        return min(times)

    small, large = best_of_three(5_000), best_of_three(50_000)
    assert large < 30 * small + 0.05, (small, large)


class App:
    """An ASGI app that reads the whole request and answers with a JSON body in two parts."""

    def __init__(self, status: int, body: bytes):
        self.status, self.body, self.received = status, body, b""

    async def __call__(self, scope, receive, send) -> None:
        while True:
            message = await receive()
            self.received += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        half = len(self.body) // 2
        await send({"type": "http.response.body", "body": self.body[:half], "more_body": True})
        await send({"type": "http.response.body", "body": self.body[half:]})


def call(middleware, path: str, parts: list[bytes], method: str = "POST") -> list[dict]:
    incoming = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    sent: list[dict] = []

    async def receive():
        return incoming.pop(0)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path}
    asyncio.run(middleware(scope, receive, send))
    return sent


def test_the_middleware_passes_the_clear_on_untouched_and_records_what_it_reset(monkeypatch):
    recorded: list[list[ClearedTask]] = []
    monkeypatch.setattr("trialflow.ui.clears.record_clears", lambda cleared: recorded.append(cleared) or 1)
    body = answer(ti("trial", 1))
    app = App(200, body)
    sent = call(ClearedTrials(app), TASKS, [REAL[:10], REAL[10:]])
    assert app.received == REAL  # the app read the request as sent, in its parts
    assert sent[0]["status"] == 200 and b"".join(m.get("body", b"") for m in sent[1:]) == body
    assert recorded == [[ClearedTask("dag_a", "r1", "trial", 1)]]
    # other routes and methods: not read at all
    recorded.clear()
    other = App(200, body)
    call(ClearedTrials(other), "/api/v2/dags/dag_a/dagRuns/r1/taskInstances/trial/1", [REAL], method="PATCH")
    call(ClearedTrials(other), TASKS, [REAL], method="GET")
    assert recorded == [] and other.received == REAL * 2


def test_a_request_over_the_bound_is_passed_on_and_not_read(monkeypatch):
    recorded = []
    monkeypatch.setattr("trialflow.ui.clears.record_clears", lambda cleared: recorded.append(cleared))
    big = REAL[:-1] + b', "note": "' + b"x" * MAX_REQUEST_BYTES + b'"}'
    app = App(200, answer(ti()))
    call(ClearedTrials(app), TASKS, [big[: len(big) // 2], big[len(big) // 2 :]])
    assert app.received == big and recorded == []


CONFIG = f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {sys.executable} -c "import time; time.sleep(60)"
trialCodeDirectory: .
trialConcurrency: 3
maxTrialNumber: 3
tuner: {{name: Random}}
trainingService: {{platform: local}}
"""


@pytest.mark.both_databases
def test_the_clears_write_the_stop_request_of_each_running_trial(store, tmp_path: Path, monkeypatch):
    """On a real store: a cleared trial task's trial is asked to stop with the clear's words; a
    trial already ended or already asked is left; a whole run's clear asks every running one."""
    from trialflow import steering
    from trialflow.config import load_config
    from trialflow.experiment import Experiment
    from trialflow.platforms.base import TrialStatus
    from trialflow.runs import start_run

    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "eclear", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    asked = [ask(store, "eclear", i, f"eclear-{i:04d}", experiment.algorithm, experiment.space) for i in range(3)]
    store.close(asked[2].storage_id, TrialStatus.SUCCEEDED)
    monkeypatch.setattr("trialflow.ui.access.action_store", lambda: store)
    assert record_clears([ClearedTask("dag_a", "r1", "trial", 0), ClearedTask("dag_a", "r1", "trial", 2)]) == 1
    assert steering.stop_requested(store, asked[0].storage_id) == CLEARED
    assert steering.stop_requested(store, asked[2].storage_id) is None  # it had ended
    # and the cleared tasks' waiting starts are held back (trialflow.steering.cleared_starts)
    from trialflow.steering.cleared_starts import read_marks

    assert set(read_marks(store, "eclear", "r1")) == {"0", "2"}
    assert record_clears([ClearedTask("dag_a", "r1", "trial", 0)]) == 0  # asked once
    assert record_clears([ClearedTask("dag_b", "r1", "trial", 1), ClearedTask("dag_a", "r9", "trial", 1)]) == 0
    assert record_clears([ClearedTask("dag_a", "r1", "", None)]) == 1  # the whole run: trial 1 is left
    assert steering.stop_requested(store, asked[1].storage_id) == CLEARED
    assert set(read_marks(store, "eclear", "r1")) == {"0", "2", "*"}


def test_a_store_that_fails_never_fails_the_persons_clear(monkeypatch):
    def broken():
        raise RuntimeError("the store is down")

    monkeypatch.setattr("trialflow.ui.access.action_store", broken)
    assert record_clears([ClearedTask("dag_a", "r1", "trial", 0)]) == 0
