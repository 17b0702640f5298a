"""An editor's hostile requests to a running experiment's steering routes, through the real
api-server and scheduler (issue 37, items 3 to 6 and 9): a duration built to backtrack, odd
numbers, a top-level ``_name``, an oversized body, a hundred and one added trials, a forged
``X-Forwarded-Host``; then the experiment is stopped and its waiting trials are dropped."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.helpers.airflow import PY
from tests.helpers.airflow_controls import wait_for
from trialflow.limits import MAX_ACTION_BODY, MAX_WAITING_TRIALS
from trialflow.platforms.base import experiment_id_for

pytestmark = pytest.mark.integration

SLEEPER = "import time\nfrom trialflow import trial\ntrial.get_next_parameter()\ntime.sleep(240)\n"


class Editor:
    """An editor of every public DAG, with a bearer token (as a script or curl would be)."""

    def __init__(self, harness: Any, experiment_id: str):
        self.base = f"{harness.airflow.base_url}/trialflow/api/experiments/{experiment_id}"
        passwords = json.loads((harness.airflow.home / "passwords.json").read_text())
        token = httpx.post(
            f"{harness.airflow.base_url}/auth/token",
            json={"username": "editor", "password": passwords["editor"]},
            timeout=10,
        ).json()["access_token"]
        self.headers = {"Authorization": f"Bearer {token}"}

    def send(self, method: str, path: str, timeout: float = 15, **kwargs: Any) -> httpx.Response:
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return httpx.request(method, f"{self.base}{path}", headers=headers, timeout=timeout, **kwargs)


def test_hostile_steering_requests_are_refused_quickly_and_change_nothing(harness):
    config = (
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}, opt: {_type: choice, _value: [{_name: sgd}, adam]}}\n"
        f"trialCommand: {PY} t.py\ntrialConcurrency: 1\nmaxTrialNumber: 2\ntuner: {{name: Random}}\n"
        "trainingService: {platform: local}\n"
    )
    dag_id, run_id = harness.start("hostile_steering", config, {"t.py": SLEEPER})
    experiment_id = experiment_id_for(dag_id, run_id)
    store = harness.store
    wait_for(
        "the first trial running",
        lambda: (
            any(r.status == "RUNNING" for r in store.trial_rows(experiment_id))
            if store.experiment_exists(experiment_id)
            else False
        ),
        120,
    )
    editor = Editor(harness, experiment_id)
    before = (store.experiment_attr(experiment_id, "limits"), store.waiting_count(experiment_id))

    # 4. A duration built to backtrack: refused by its length at once (61 s of the api-server's
    # CPU before), and Airflow's own health route was never held up.
    started = time.monotonic()
    probe = editor.send("PATCH", "/limits", json={"maxExperimentDuration": "1" + " " * 100_000 + "x"})
    assert probe.status_code == 413 and "request body is over" in probe.json()["detail"], probe.text[:300]
    long = editor.send("PATCH", "/limits", json={"maxExperimentDuration": "1" + " " * 60_000 + "x"})
    assert long.status_code == 422 and "at most 64 characters" in long.json()["detail"], long.text[:300]
    assert time.monotonic() - started < 10

    # 5. Odd numbers: a 422 naming the key, never a 500.
    for key in ("trialConcurrency", "maxTrialNumber", "maxExperimentDuration"):
        for odd in ("²", "¹²", "1" * 5000, 10**400):
            response = editor.send("PATCH", "/limits", json={key: odd})
            assert response.status_code == 422, (key, str(odd)[:20], response.status_code, response.text[:200])
            assert response.json()["detail"].startswith(f"{key}: expected"), response.text[:300]
    point = {"x": 0.5, "opt": {"_name": "sgd"}}
    huge = editor.send("POST", "/trials", json={"parameters": {**point, "x": 10**400}})
    assert huge.status_code == 422 and huge.json()["detail"].startswith("parameters.x: expected a number")

    # 3. A top-level _name is not a parameter, whatever it holds.
    deep: list = []
    for _ in range(500):
        deep = [deep]
    for planted in (deep, "y" * 50_000):
        response = editor.send("POST", "/trials", json={"parameters": {**point, "_name": planted}})
        assert response.status_code == 422, response.text[:300]
        assert response.json()["detail"].startswith("parameters._name: not in the search space")
    oversized = editor.send("POST", "/trials", json={"parameters": {**point, "_name": "z" * MAX_ACTION_BODY}})
    assert oversized.status_code == 413 and "request body is over" in oversized.json()["detail"]
    # issue 64, 8: a key named twice in one object is refused, not the last one kept silently
    twice = '{"x": {"_type": "uniform", "_value": [0, 1]}, "x": {"_type": "uniform", "_value": [5, 9]}}'
    dup = editor.send("PUT", "/search-space", content=twice, headers={"Content-Type": "application/json"})
    assert dup.status_code == 422 and "'x' appears twice in one object" in dup.json()["detail"], dup.text[:300]
    assert (store.experiment_attr(experiment_id, "limits"), store.waiting_count(experiment_id)) == before

    # 6. A cap on waiting trials; each answer a count, not the queue.
    sizes = []
    for i in range(MAX_WAITING_TRIALS):
        added = editor.send("POST", "/trials", json={"parameters": {**point, "x": i / MAX_WAITING_TRIALS}})
        assert added.status_code == 200, added.text[:300]
        assert added.json()["waiting"] == i + 1
        sizes.append(len(added.content))
    assert max(sizes) < 2 * min(sizes)  # did not grow with the queue (3 KB -> 147 KB before)
    full = editor.send("POST", "/trials", json={"parameters": point})
    assert full.status_code == 422 and f"at most {MAX_WAITING_TRIALS} asked-for trials" in full.json()["detail"]
    assert store.waiting_count(experiment_id) == MAX_WAITING_TRIALS

    # 9. X-Forwarded-Host from the client is not trusted: a page elsewhere cannot name itself.
    forged = editor.send(
        "POST",
        "/stop",
        headers={"Origin": "https://evil.example", "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"},
    )
    assert forged.status_code == 403 and "cross-origin" in forged.json()["detail"]
    assert harness.airflow.dag_run_state(dag_id, run_id) == "running"

    # The experiment ends (stopped): its hundred waiting trials are dropped and said so.
    assert editor.send("POST", "/stop").status_code == 200
    _, state = harness.wait(dag_id, run_id, 180)
    assert state in ("success", "failed")
    assert store.waiting_count(experiment_id) == 0
    history = editor.send("GET", "/history").json()["actions"]
    dropped = [h for h in history if h["action"] == "drop waiting trials"]
    assert len(dropped) == 1 and f"{MAX_WAITING_TRIALS} asked-for" in dropped[0]["detail"]
