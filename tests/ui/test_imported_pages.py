"""An experiment imported from the real NNI 3.0 in the pages (issue 40, 1), in Chromium."""

from __future__ import annotations

import pytest

from tests.helpers.pages import UiSetup, login
from tests.helpers.screens import canvas_drawn, shot
from trialflow.nni_history import read_experiment
from trialflow.nni_import import import_experiment

pytestmark = [pytest.mark.integration, pytest.mark.ui, pytest.mark.nni]


def test_an_imported_nni_experiment_shows_its_trials(browser, ui: UiSetup, nni_folder):
    nni = read_experiment(nni_folder)
    done = import_experiment(ui.harness.store, nni, ui.dag_id, experiment_id=f"nni-pages-{nni.experiment_id}")
    summary = ui.get(f"experiments/{done.experiment_id}").json()
    assert summary["dag_id"] == ui.dag_id and summary["counts"] == {"SUCCEEDED": 4}
    rows = ui.get(f"experiments/{done.experiment_id}/trials").json()["rows"]
    assert sorted(r["metric"] for r in rows) == sorted(t.final["default"] for t in nni.trials)
    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={done.experiment_id}")
    page.wait_for_selector("[data-testid=summary]", timeout=30000)
    assert done.experiment_id in page.locator("[data-testid=experiment-page]").inner_text()
    assert canvas_drawn(page, "[data-testid=chart-history]")
    shot(page, "imported-nni")
    assert not page.errors, page.errors
