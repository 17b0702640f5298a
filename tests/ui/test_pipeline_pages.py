"""Re-tuning on new data under the real scheduler: an experiment DAG scheduled on a data Asset
runs once per event (two events through Airflow's REST API), the second run's first trials are
the first run's top-k parameter sets, and the pages link the two experiments (checked in a
real Chromium)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.helpers.airflow import PY
from tests.helpers.airflow_controls import wait_for
from tests.helpers.pages import UiSetup, login
from tests.helpers.screens import shot
from trialflow.platforms.base import experiment_id_for
from trialflow.tuning.asker import ask

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
    # Airflow's own race: a parse in flight as the run ends (the callback parse of a task the
    # triggerer ended) writes the DAG's exceeds_max_non_backfill from the run it saw running,
    # and the next asset event waits for the next parse to heal it: 30 s by Airflow's default,
    # 10 min in the session's Airflow (seen in a full suite: no second run in 90 s). A parse
    # asked for now comes after that one.
    harness.reparse(dag_id)
    data_event(ui, 2)
    second = wait_for("the second run", lambda: [r for r in runs(ui, dag_id) if r["dag_run_id"] != first])[0][
        "dag_run_id"
    ]
    assert second.startswith("asset_triggered__")
    assert harness.wait(dag_id, second, timeout=180)[1] == "success"
    assert len(runs(ui, dag_id)) == 2  # one run per event

    first_id, second_id = experiment_id_for(dag_id, first), experiment_id_for(dag_id, second)
    old = [r for r in harness.store.trial_rows(first_id) if r.final_metric is not None]
    top2 = [r.parameters for r in sorted(old, key=lambda r: r.final_metric, reverse=True)[:2]]
    # "first" is the order the trials were asked in (Optuna's number), not their indexes: a
    # start in the triggerer takes the free slot whichever index its trigger is, so trial 1 may
    # run before trial 0 (seen in a full suite) and take the best set, which is still first.
    rows = harness.store.trial_rows(second_id)
    asked = sorted((harness.store.find_trial(second_id, r.trial_index) for r in rows), key=lambda t: t.number)
    assert [t.parameters for t in asked[:2]] == top2
    assert [(t.asked_by or {}).get("by") for t in asked] == ["retune", "retune", None, None, None]
    assert len(rows) == 5

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


SEVERAL = """\
from trialflow import trial
p = trial.get_next_parameter()
x, y = p["x"], p["y"]
# accuracy grows with x, and so does latency: the two conflict; size is a third cost
trial.report_final_result({"accuracy": round(x, 4), "latency": round(1 + 9 * x * x + y, 4), "size": round(1 + y, 4)})
"""


@pytest.mark.parametrize("count", [2, 3])
def test_the_pareto_front_of_two_or_three_objectives_on_the_page(browser, ui: UiSetup, count: int):
    from tests.helpers.pareto import brute_force
    from tests.helpers.screens import canvas_drawn

    harness = ui.harness
    objectives = "  - {metric: accuracy, mode: maximize}\n  - {metric: latency, mode: minimize}\n"
    objectives += "  - {metric: size, mode: minimize}\n" if count == 3 else ""
    config = (
        f"experimentName: accuracy against latency ({count})\n"
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}, y: {_type: uniform, _value: [0, 1]}}\n"
        f"trialCommand: {PY} t.py\ntrialConcurrency: 4\nmaxTrialNumber: 16\n"
        "tuner: {name: TPE, classArgs: {seed: 3}}\ntrainingService: {platform: local}\n"
        f"objectives:\n{objectives}"
    )
    dag_id, _ = harness.experiment(f"pareto{count}", config, {"t.py": SEVERAL})
    run_id, state = harness.run(dag_id)
    assert state == "success"
    experiment_id = experiment_id_for(dag_id, run_id)
    rows = harness.store.trial_rows(experiment_id)
    names = ["accuracy", "latency", "size"][:count]
    modes = ["maximize", "minimize", "minimize"][:count]
    points = [[r.final_metric_raw[n] for n in names] for r in rows]
    expected = sorted(rows[i].trial_index for i in brute_force(points, modes))
    summary = ui.get(f"experiments/{experiment_id}").json()
    assert sorted(r["trial_index"] for r in summary["pareto"]) == expected
    end = harness.xcom(dag_id, run_id, "end_experiment")
    assert sorted(p["trial_index"] for p in end["pareto"]) == expected
    published = harness.xcom(dag_id, run_id, "publish_best")
    assert sorted(p["trial_index"] for p in published["pareto"]) == expected
    assert [o["metric"] for o in published["objectives"]] == names
    assert "parameters" not in published  # issue 36 (3): no single best, a Pareto set to choose from
    listed = next(e for e in ui.get("experiments").json()["experiments"] if e["experiment_id"] == experiment_id)
    assert (listed["best"], listed["pareto_size"]) == (None, len(expected))

    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={experiment_id}")
    page.wait_for_selector("[data-testid=chart-pareto]", timeout=30000)
    assert canvas_drawn(page, "[data-testid=chart-pareto]")
    assert (
        page.locator("[data-testid=pareto-count]").inner_text()
        == f"{len(expected)} trial{'s' if len(expected) > 1 else ''}"
    )
    assert (
        "Objectives: accuracy (maximize) · latency (minimize)" in page.locator("[data-testid=pareto-list]").inner_text()
    )
    shot(page, f"pareto-{count}")
    page.click("[data-testid=tab-trials]")
    page.wait_for_selector("[data-testid=trial-row]", timeout=30000)
    marks = page.locator("[data-testid=pareto-mark]").all_inner_texts()
    assert sum(m == "◆" for m in marks) == len(expected)  # 16 trials: one page
    assert page.locator("[data-testid=objective-latency]").count() == 16
    shot(page, f"pareto-{count}-trials")
    assert not page.errors, page.errors


def test_two_thousand_trials_on_two_objectives_with_a_long_name_in_the_dark(browser, ui: UiSetup, tmp_path):
    """The Pareto chart and the header with 2,000 trials and a long experiment name, in the dark
    theme: drawn, the set counted as the API counts it, nothing overflowing the header. The first
    50 trials are written as trial tasks write them (asked, then finished); the other 1,950 are
    added in bulk as those rows (bench.seed: 2,000 asks took 148 s of the suite's time)."""
    import optuna

    from bench.seed import bulk_add
    from tests.helpers.screens import canvas_drawn
    from trialflow.config import load_config
    from trialflow.experiment import Experiment
    from trialflow.platforms.base import TrialStatus
    from trialflow.runs import start_run

    name = "accuracy against latency on the nightly re-labelled digits data, second attempt " * 2
    config = tmp_path / "config.yml"
    config.write_text(
        f"experimentName: {name.strip()}\n"
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}, y: {_type: uniform, _value: [0, 1]}}\n"
        "trialCommand: x\ntrialConcurrency: 8\nmaxTrialNumber: 2000\ntuner: {name: Random, classArgs: {seed: 1}}\n"
        "trainingService: {platform: local}\n"
        "objectives: [{metric: accuracy, mode: maximize}, {metric: latency, mode: minimize}]\n"
    )
    store = ui.harness.store
    experiment = Experiment(load_config(config), "epareto2000", tmp_path / "work")
    start_run(experiment, store, "it_pareto_big", "r1", {})

    def final(x: float, y: float) -> dict[str, float]:
        return {"accuracy": round(x, 4), "latency": round(1 + 9 * x * x + y, 4)}

    for i in range(50):
        asked = ask(store, "epareto2000", i, f"epareto2000-{i:04d}", experiment.algorithm, experiment.space)
        store.finish(asked.storage_id, TrialStatus.SUCCEEDED, final(asked.parameters["x"], asked.parameters["y"]), None)
    rng = random.Random(1)
    uniform = optuna.distributions.FloatDistribution(0, 1)
    trials = []
    for i in range(50, 2000):
        x, y = rng.random(), rng.random()
        result = final(x, y)
        trials.append(
            optuna.trial.create_trial(
                values=[result["accuracy"], result["latency"]],
                params={"x": x, "y": y},
                distributions={"x": uniform, "y": uniform},
                user_attrs={
                    "trial_index": i,
                    "trial_id": f"epareto2000-{i:04d}",
                    "parameters": {"x": x, "y": y},
                    "nni_status": "SUCCEEDED",
                    "final_metric": result,
                    "final_metric_extra": result,
                },
            )
        )
    bulk_add(store, "epareto2000", trials)
    pareto = ui.get("experiments/epareto2000").json()["pareto"]
    expected = len(pareto)
    data = ui.get("experiments/epareto2000/chart").json()
    assert data["sampled"] and data["total"] == 2000  # past the cap: a sample, the whole set in it
    assert {r["trial_index"] for r in pareto} <= {r["trial_index"] for r in data["trials"] if r["pareto"]}

    page = login(browser, ui, dark=True)
    page.goto(f"{ui.base}/plugin/trialflow?experiment=epareto2000")
    page.wait_for_selector("[data-testid=chart-pareto]", timeout=30000)
    assert canvas_drawn(page, "[data-testid=chart-pareto]")
    assert canvas_drawn(page, "[data-testid=chart-history]")
    assert page.locator("[data-testid=pareto-count]").inner_text() == f"{expected} trials"
    caption = page.locator("[data-testid=chart-pareto]").inner_text()
    assert f"{len(data['trials']):,} of 2,000 trials (the whole Pareto set)" in caption, caption
    history = page.locator("[data-testid=history-sampled]").inner_text()  # no best-so-far line here
    assert history.startswith(f"{len(data['trials']):,} of 2,000 trials drawn") and "best-so-far" not in history
    width = page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1")
    assert width, "the long name must wrap, not widen the page"
    shot(page, "pareto-2000-dark")
    assert not page.errors, page.errors


def test_past_a_thousand_trials_the_charts_draw_a_sample_and_say_so(browser, ui: UiSetup, tmp_path):
    """2,100 finished trials: the API sends 1,000 of them (the record setters, the best, the
    running ones and an even spread) with the running-at-once count over all 2,100, and the
    charts say what they drew. Here every trial beats the one before, so the page does not claim
    the best-so-far line is every trial's; a random order (one record in a few) would."""
    import optuna

    from bench.seed import bulk_add
    from tests.helpers.screens import canvas_drawn
    from trialflow.config import load_config
    from trialflow.experiment import Experiment
    from trialflow.runs import start_run

    config = tmp_path / "config.yml"
    config.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: x\ntrialConcurrency: 8\n"
        "maxTrialNumber: 2100\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    store = ui.harness.store
    experiment = Experiment(load_config(config), "esample2100", tmp_path / "work")
    start_run(experiment, store, "it_sample_big", "r1", {})
    now = datetime.now()
    trials = []
    for i in range(2100):
        trial = optuna.trial.create_trial(
            value=i / 2100,
            user_attrs={
                "trial_index": i,
                "trial_id": f"esample2100-{i:04d}",
                "parameters": {"x": i / 2100},
                "nni_status": "SUCCEEDED",
                "final_metric": i / 2100,
            },
        )
        trial.datetime_start, trial.datetime_complete = now - timedelta(seconds=2100 - i), now
        trials.append(trial)
    bulk_add(store, "esample2100", trials)

    data = ui.get("experiments/esample2100/chart").json()
    assert data["total"] == 2100 and data["sampled"] and len(data["trials"]) == 1000
    assert not data["whole_best_line"]  # 2,100 records, more than half the cap
    drawn = {r["trial_index"] for r in data["trials"]}
    assert set(range(1850, 2100)) <= drawn  # the best 250 (maximize)
    assert max(count for _, count in data["concurrency"]) == 2100  # every trial ran until now

    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment=esample2100")
    page.wait_for_selector("[data-testid=parallel-sampled]", timeout=30000)
    said = page.locator("[data-testid=parallel-sampled]").inner_text()
    assert said.startswith("1,000 of 2,100 trials drawn: every trial that set a new best, the best 250"), said
    history = page.locator("[data-testid=history-sampled]").inner_text()
    assert history.startswith("1,000 of 2,100 trials drawn") and "best-so-far line is every" not in history
    assert "the running count counts every trial" in page.locator("[data-testid=chart-timeline]").inner_text()
    # these trials reported no intermediate result: the curves' panel says so, not empty axes
    no_curves = page.locator("[data-testid=no-curves]")
    assert no_curves.inner_text() == "No trial has reported an intermediate result."
    assert page.locator("[data-testid=chart-curves] canvas").count() == 0
    for chart in ("chart-history", "chart-parallel", "chart-timeline"):
        assert canvas_drawn(page, f"[data-testid={chart}]"), chart
    shot(page, "sampled-2100")
    assert not page.errors, page.errors
