"""The experiment pages against the session's real Airflow (api-server with the plugin loaded):
one experiment run by the real scheduler, one from a DAG a limited user may not read, and a
headless Chromium (Debian's) driven by Playwright."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.airflow import PY, Harness
from tests.helpers.pages import CHROMIUM, TRIAL, XSS, UiSetup
from trialflow.platforms.base import experiment_id_for


@pytest.fixture(scope="session")
def ui(harness: Harness) -> UiSetup:
    config = f"""\
experimentName: '{XSS} pages'
searchSpace:
  lr: {{_type: loguniform, _value: [0.001, 0.1]}}
  opt:
    _type: choice
    _value:
      - {{_name: sgd, momentum: {{_type: uniform, _value: [0, 0.9]}}}}
      - {{_name: adam}}
  act: {{_type: choice, _value: ['=cmd|calc', '{XSS}', relu]}}
trialCommand: {PY} trial.py
trialConcurrency: 3
maxTrialNumber: 8
tuner: {{name: Random, classArgs: {{seed: 3}}}}
trainingService:
  platform: local
  trialWebUrl: "https://platform.example/jobs/{{experiment_id}}/{{trial_id}}"
"""
    dag_id, _ = harness.experiment("ui_public", config, {"trial.py": TRIAL})
    run_id, state = harness.run(dag_id)
    assert state == "success"
    from tests.helpers.filled_store import fill

    fill(harness.store, "eprivate1", dag_id="it_ui_private")
    passwords = json.loads((harness.airflow.home / "passwords.json").read_text())
    return UiSetup(harness, dag_id, run_id, experiment_id_for(dag_id, run_id), "eprivate1", passwords)


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """Chromium, driven by Playwright's sync API for the pages' tests, stopped when they end.
    Not for the whole session: Playwright's sync API runs its asyncio loop in this thread, and
    while it is up every later ``asyncio.run()`` of the process fails ("cannot be called from a
    running event loop"): under pytest-xdist, the worker that ran the pages' tests failed five
    tests it ran after them (measured 2026-12-03)."""
    playwright = pytest.importorskip("playwright.sync_api", reason="Playwright for Python (the dev group) is needed")
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not found at {CHROMIUM} (Debian package chromium; .ci/run installs it)")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-quic",
            ],
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(autouse=True)
def _pages_closed_after_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Close every browser context a test opened when it ends. They stayed open until the
    session's end, and each open page went on polling the session's api-server (Airflow's UI
    and a running experiment's page refresh by themselves): some thirty by the last page test,
    beside the Airflow every later test waits on."""
    yield
    if "browser" in request.fixturenames:
        for context in list(request.getfixturevalue("browser").contexts):
            context.close()
