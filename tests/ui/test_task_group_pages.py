"""Experiment task groups in the pages and actions, against the real api-server and Chromium
(issue 39): the run tab offers each group's experiment, a trial's link opens its own group's
trial, and steering one group's experiment leaves the other's alone."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.airflow_controls import wait_for
from tests.helpers.groups import groups_dag
from tests.helpers.pages import UiSetup, login
from tests.helpers.screens import canvas_drawn, shot
from tests.ui.test_actions import most_at_once
from trialflow.experiment import LIMITS_ATTR
from trialflow.platforms.base import experiment_id_for
from trialflow.store.concurrency_changes import limits_key, read_concurrency

pytestmark = [pytest.mark.integration, pytest.mark.ui]


@pytest.fixture(scope="module")
def groups_run(ui: UiSetup) -> tuple[str, str]:
    dag_id, _ = groups_dag(ui.harness, "group_pages")
    run_id, state = ui.harness.run(dag_id, timeout=400)
    assert state == "success"
    return dag_id, run_id


def test_the_run_tab_offers_both_experiments_of_the_run(browser, ui: UiSetup, groups_run):
    dag_id, run_id = groups_run
    ids = {g: experiment_id_for(dag_id, run_id, g) for g in ("tune_fn", "tune_script")}
    resolved = ui.get("resolve", dag_id=dag_id, run_id=run_id).json()
    assert [(e["task_group"], e["experiment_id"]) for e in resolved["experiments"]] == sorted(ids.items())
    page = login(browser, ui)
    page.goto(f"{ui.base}/dags/{dag_id}/runs/{run_id}/plugin/trialflow-run")
    page.wait_for_selector("[data-testid=run-experiments]", timeout=30000)
    choice = page.locator("[data-testid=run-experiments]").inner_text()
    assert "2 experiments" in choice and ids["tune_fn"] in choice and ids["tune_script"] in choice
    page.wait_for_selector("[data-testid=summary]", timeout=30000)
    assert ids["tune_fn"] in page.locator("[data-testid=experiment-page]").inner_text()
    assert canvas_drawn(page, "[data-testid=chart-history]")
    shot(page, "run-tab-two-groups")
    page.click("[data-testid=run-experiment-tune_script]")
    page.wait_for_function(
        f"document.querySelector('[data-testid=experiment-page]')?.innerText.includes('{ids['tune_script']}')",
        timeout=30000,
    )
    assert "script trials" in page.locator("[data-testid=experiment-name]").inner_text()
    assert page.locator("[data-testid=task-group]").inner_text() == "tune_script"
    assert canvas_drawn(page, "[data-testid=chart-history]")
    shot(page, "run-tab-two-groups-second")
    # the nav list names each experiment's group
    page.goto(f"{ui.base}/dags/{dag_id}/plugin/trialflow-dag")
    page.wait_for_selector("[data-testid=experiment-row]", timeout=30000)
    listed = page.locator("[data-testid=experiment-list]").inner_text()
    assert "tune_fn" in listed and "tune_script" in listed
    assert not page.errors, page.errors


def test_a_trial_link_opens_its_own_groups_trial(browser, ui: UiSetup, groups_run):
    dag_id, run_id = groups_run
    links = ui.harness.airflow.api(
        "GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/tune_script.trial/links", params={"map_index": 1}
    ).json()["extra_links"]
    assert "task_id=tune_script.trial" in links["Trial"]
    page = login(browser, ui)
    page.goto(ui.base + links["Trial"])
    page.wait_for_selector("[data-testid=trial-page]", timeout=30000)
    assert f"experiment={experiment_id_for(dag_id, run_id, 'tune_script')}" in page.url
    page.click("[data-testid=link-Task\\ instance]")
    page.wait_for_url(lambda url: "/tasks/tune_script.trial/mapped/1" in url, timeout=15000)
    assert not page.errors, page.errors


# make test-extended (106 s in the suite): a changed limit reaching only its own group is
# tests/test_task_group.py::test_a_changed_concurrency_reaches_only_its_own_group, and the route
# raising a running experiment's concurrency under the real scheduler is tests/ui/test_actions.py::
# test_raising_concurrency_from_the_page_runs_four_at_once_in_the_same_run.
@pytest.mark.extended
def test_steering_one_group_leaves_the_other_untouched(ui: UiSetup):
    harness = ui.harness
    # each script trial stays until three have run at once (bounded): the limit's effect, whatever
    # the machine's speed (4 s sleeps saw two at once on a loaded machine, 2026-12-01)
    dag_id, folder = groups_dag(harness, "group_steering", script_trials=6, hold=3)
    harness.airflow.wait_for_dag(dag_id, harness.dag_files[dag_id], timeout=90)
    run_id = harness.airflow.trigger(dag_id)
    script, function = (experiment_id_for(dag_id, run_id, g) for g in ("tune_script", "tune_fn"))
    stamps = folder / "stamps"
    wait_for("two script trials running", lambda: stamps.exists() and stamps.read_text().count("start") >= 2, 120)
    response = httpx.patch(
        f"{ui.base}/trialflow/api/experiments/{script}/limits",
        json={"trialConcurrency": 3},
        headers={"Authorization": f"Bearer {ui.token('editor')}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert read_concurrency(harness.store.engine, limits_key(dag_id, "tune_script")) == 3
    assert read_concurrency(harness.store.engine, limits_key(dag_id, "tune_fn")) is None
    assert read_concurrency(harness.store.engine, dag_id) is None
    _, state = harness.wait(dag_id, run_id, 400)
    assert state == "success"
    assert most_at_once(stamps) == 3  # the steered group ran three at once
    assert harness.store.experiment_attr(function, LIMITS_ATTR) is None
    assert ui.get(f"experiments/{function}").json()["config"]["trialConcurrency"] == 2
    assert ui.get(f"experiments/{script}").json()["changed"] == {"trialConcurrency": 3}
    # its end step put the group's row back: the next run starts from the config's 2
    assert read_concurrency(harness.store.engine, limits_key(dag_id, "tune_script")) is None
