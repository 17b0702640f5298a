"""Re-tuning on new data under the real scheduler: an experiment DAG scheduled on a data Asset
runs once per event (two events through Airflow's REST API), the second run's first trials are
the first run's top-k parameter sets, and the pages link the two experiments (checked in a
real Chromium)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import PY
from tests.integration.test_pipeline import wait_for
from tests.ui.conftest import UiSetup, login
from tests.ui.test_pages import shot
from trialflow.platforms.base import experiment_id_for

pytestmark = [pytest.mark.integration, pytest.mark.ui]

DATA = "it-data/digits"
TRIAL = """\
from trialflow import trial
p = trial.get_next_parameter()
trial.report_final_result(round(1 - (p["x"] - 0.2) ** 2, 6))
"""


def data_event(ui: UiSetup, version: int) -> None:
    api = ui.harness.airflow.api
    asset = next(a for a in api("GET", "/assets", params={"name_pattern": DATA}).json()["assets"] if a["name"] == DATA)
    response = api("POST", "/assets/events", json={"asset_id": asset["id"], "extra": {"version": version}})
    assert response.status_code == 200, response.text


def runs(ui: UiSetup, dag_id: str) -> list[dict[str, Any]]:
    response = ui.harness.airflow.api("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "run_after"})
    return list(response.json()["dag_runs"])


def test_a_data_event_re_tunes_from_the_previous_runs_best(browser, ui: UiSetup):
    harness = ui.harness
    config = (
        "experimentName: retuned on new data\nsearchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
        f"trialCommand: {PY} t.py\ntrialConcurrency: 1\nmaxTrialNumber: 5\n"
        "tuner: {name: TPE, classArgs: {seed: 1}}\ntrainingService: {platform: local}\n"
        "scheduledRuns: retune\nretuneTopK: 2\n"
    )
    dag_source = (
        "# airflow DAG\nfrom airflow.sdk import Asset\nfrom trialflow.dag import experiment_dag\n"
        f"dag = experiment_dag('{{CONFIG}}', dag_id='{{DAG_ID}}', poll_interval=0.3, schedule=[Asset({DATA!r})])\n"
    )
    dag_id, _ = harness.experiment("retune", config, {"t.py": TRIAL}, dag_source=dag_source)
    harness.airflow.wait_for_dag(dag_id, harness.dag_files[dag_id], timeout=90)
    harness.airflow.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()

    data_event(ui, 1)
    first = wait_for("the first run", lambda: runs(ui, dag_id))[0]["dag_run_id"]
    assert harness.wait(dag_id, first, timeout=180)[1] == "success"
    data_event(ui, 2)
    second = wait_for("the second run", lambda: [r for r in runs(ui, dag_id) if r["dag_run_id"] != first])[0][
        "dag_run_id"
    ]
    assert second.startswith("asset_triggered__")
    assert harness.wait(dag_id, second, timeout=180)[1] == "success"
    assert len(runs(ui, dag_id)) == 2  # one run per event

    first_id, second_id = experiment_id_for(dag_id, first), experiment_id_for(dag_id, second)
    old = [r for r in harness.store.trial_rows(first_id) if r["final_metric"] is not None]
    top2 = [r["parameters"] for r in sorted(old, key=lambda r: r["final_metric"], reverse=True)[:2]]
    new = sorted(harness.store.trial_rows(second_id), key=lambda r: r["trial_index"])
    assert [r["parameters"] for r in new[:2]] == top2
    assert len(new) == 5

    summary = ui.get(f"experiments/{second_id}").json()
    assert summary["retuned_from"] == {"experiment_id": first_id, "queued": 2, "dropped": 0}
    assert ui.get(f"experiments/{first_id}").json()["retuned_by"] == [second_id]
    start = harness.xcom(dag_id, second, "start_experiment")
    assert start["retuned_from"] == first_id

    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={second_id}")
    page.wait_for_selector("[data-testid=retune-links]", timeout=30000)
    text = page.locator("[data-testid=retune-links]").inner_text()
    assert first_id in text and "2 best parameter sets ran first here" in text
    shot(page, "retuned")
    page.click(f"[data-testid=retune-links] a:has-text('{first_id}')")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=retune-links]')?.innerText"
        f".includes('Re-tuned later by {second_id}')",
        timeout=30000,
    )
    assert f"experiment={first_id}" in page.url
    assert not page.errors, page.errors
