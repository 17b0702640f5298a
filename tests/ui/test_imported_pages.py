"""An experiment imported from the real NNI 3.0 in the pages (issue 40, 1), in Chromium."""

from __future__ import annotations

import pytest

from tests.helpers.nni_run import export_files
from tests.helpers.pages import UiSetup, login
from tests.helpers.screens import canvas_drawn, shot
from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.nni_history import read_experiment, read_result_file
from trialflow.runs import start_run
from trialflow.seeding.nni_import import import_experiment

pytestmark = [pytest.mark.integration, pytest.mark.ui, pytest.mark.nni]


def test_an_imported_nni_experiment_shows_its_trials(browser, ui: UiSetup, nni_folder, tmp_path):
    nni = read_experiment(nni_folder)
    done = import_experiment(ui.harness.store, nni, ui.dag_id, experiment_id=f"nni-pages-{nni.experiment_id}")
    summary = ui.get(f"experiments/{done.experiment_id}").json()
    assert summary["dag_id"] == ui.dag_id and summary["counts"] == {"SUCCEEDED": 4}
    rows = ui.get(f"experiments/{done.experiment_id}/trials").json()["rows"]
    assert sorted(r["metric"] for r in rows) == sorted(t.final["default"] for t in nni.trials)
    # the same trials, parameters and metrics as NNI's own export (where NNI paired them right)
    exported = read_result_file(export_files(nni_folder)[0], nni.config).trials
    swapped = {t.trial_job_id for t in nni.trials if t.event_parameter_id is not None}
    shown = {(r["trial_index"]): r for r in rows}
    by_job = {t.trial_job_id: i for i, t in enumerate(nni.trials)}
    assert {t.trial_job_id for t in exported} == set(by_job)
    for trial in exported:
        if trial.trial_job_id not in swapped:
            row = shown[by_job[trial.trial_job_id]]
            assert row["parameters"] == pytest.approx(trial.parameters)
            assert row["metric"] == pytest.approx(trial.final["default"])
    page = login(browser, ui)
    page.goto(f"{ui.base}/plugin/trialflow?experiment={done.experiment_id}")
    page.wait_for_selector("[data-testid=summary]", timeout=30000)
    assert done.experiment_id in page.locator("[data-testid=experiment-page]").inner_text()
    assert canvas_drawn(page, "[data-testid=chart-history]")
    assert f"Imported from NNI experiment {nni.experiment_id}" in page.get_by_test_id("imported-from").inner_text()
    shot(page, "imported-nni")
    # a new experiment of the DAG warm-started from it: the pages link the two both ways
    config = tmp_path / "warm.yml"
    config.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}, k: {_type: choice, _value: [a, b]}}\n"
        "trialCommand: python3 t.py\ntrialConcurrency: 1\nmaxTrialNumber: 4\n"
        "tuner: {name: TPE, classArgs: {optimize_mode: maximize, seed: 3}}\n"
        f"trainingService: {{platform: local}}\nwarmStart: {{experiment: {done.experiment_id}}}\n"
    )
    warm = Experiment(load_config(config), "e-warm-from-nni", tmp_path / "work")
    start_run(warm, ui.harness.store, ui.dag_id, "manual__warm", {})
    page.goto(f"{ui.base}/plugin/trialflow?experiment={warm.experiment_id}")
    link = page.get_by_test_id("warm-started-from")
    link.wait_for(timeout=30000)
    assert "its tuner learnt from 4 of its results" in link.inner_text()
    shot(page, "warm-started-from-nni")
    link.get_by_role("link", name=done.experiment_id).click()
    page.get_by_test_id("warm-started-by").wait_for(timeout=30000)
    assert warm.experiment_id in page.get_by_test_id("warm-started-by").inner_text()
    assert not page.errors, page.errors
    # the list marks it, and the lineage reads in the dark theme too
    dark = login(browser, ui, dark=True)
    dark.goto(f"{ui.base}/plugin/trialflow?experiment={done.experiment_id}")
    dark.get_by_test_id("warm-started-by").wait_for(timeout=30000)
    assert canvas_drawn(dark, "[data-testid=chart-timeline]")
    shot(dark, "imported-nni-dark")
    dark.goto(f"{ui.base}/plugin/trialflow")
    dark.get_by_test_id("list-imported").first.wait_for(timeout=30000)
    assert f"imported from NNI {nni.experiment_id}" in dark.get_by_test_id("list-imported").first.inner_text()
    shot(dark, "experiments-imported-dark")
    assert not dark.errors, dark.errors
