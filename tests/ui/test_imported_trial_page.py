"""An imported NNI trial's page says what NNI recorded (issue 46, 8, 9), in Chromium: times NNI
never recorded read "unknown", the parameters are NNI's tuner's (no "added" badge), and the log
is said to have stayed with NNI instead of sending the reader to a task log that does not exist."""

from __future__ import annotations

import json

import pytest

from tests.helpers.pages import UiSetup, login
from tests.helpers.screens import shot
from trialflow.nni_history import read_experiment
from trialflow.seeding.nni_import import import_experiment

pytestmark = [pytest.mark.integration, pytest.mark.ui]


def test_an_imported_trials_page_says_what_nni_recorded(browser, ui: UiSetup, tmp_path):
    from tests.security.test_nni_databases import database

    waiting = json.dumps({"parameter_id": 1, "parameters": {"x": 0.75}})
    folder = database(tmp_path, rows={"TrialJobEvent": [(5000, "T2", "WAITING", waiting, "/l", 1, None, "e")]})
    done = import_experiment(ui.harness.store, read_experiment(folder), ui.dag_id, experiment_id="nni-page-times")
    rows = ui.get(f"experiments/{done.experiment_id}/trials").json()["rows"]
    assert [(r["imported"], r["parameter_source"], r["added_by"]) for r in rows] == [(True, "algorithm", None)] * 2
    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={done.experiment_id}")
    page.wait_for_selector("[data-testid=summary]", timeout=30000)
    assert page.get_by_test_id("added-by-hand").count() == 0
    page.goto(f"{ui.base}/plugin/trialflow?experiment={done.experiment_id}&trial=1")
    page.get_by_test_id("trial-page").wait_for(timeout=30000)
    assert page.get_by_test_id("trial-started").inner_text() == "unknown"
    assert page.get_by_test_id("trial-duration").inner_text() == "unknown"
    assert page.get_by_test_id("parameter-source").inner_text() == "NNI's tuner"
    assert "ran in NNI, not in Airflow" in page.get_by_test_id("imported-log").inner_text()
    assert page.get_by_test_id("link-Task log").count() == 0
    shot(page, "imported-trial-unknown-times")
    page.goto(f"{ui.base}/plugin/trialflow?experiment={done.experiment_id}&trial=0")
    page.get_by_test_id("trial-page").wait_for(timeout=30000)
    assert page.get_by_test_id("trial-duration").inner_text() == "1s"  # NNI's own 2.0 s .. 3.0 s
    assert not page.errors, page.errors
