"""The experiment pages against the session's real Airflow (api-server with the plugin loaded):
one experiment run by the real scheduler, one from a DAG a limited user may not read, and a
headless Chromium (Debian's) driven by Playwright."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.airflow import PY, Harness
from trialflow.platforms.base import experiment_id_for

CHROMIUM = os.environ.get("TRIALFLOW_CHROMIUM", "/usr/bin/chromium")
XSS = '<img src=x onerror="window.__xss=1">'
TRIAL = """\
import random, sys, time
from trialflow import trial
p = trial.get_next_parameter()
index = trial.get_sequence_id()
lr = p["lr"]
for step in range(6):
    trial.report_intermediate_result(1 - (1 - 0.1 * step) * lr * 10)
    time.sleep(0.1)
if index == 3:
    sys.exit(2)
trial.report_final_result({"default": round(0.5 + lr + (0.1 if p["opt"]["_name"] == "adam" else 0), 6), "loss": 0.1})
"""


@dataclass
class UiSetup:
    harness: Harness
    dag_id: str
    run_id: str
    experiment_id: str
    private_id: str
    passwords: dict[str, str]

    @property
    def base(self) -> str:
        return self.harness.airflow.base_url

    def token(self, user: str) -> str:
        response = httpx.post(
            f"{self.base}/auth/token", json={"username": user, "password": self.passwords[user]}, timeout=10
        )
        response.raise_for_status()
        return response.json()["access_token"]

    def post(
        self, path: str, user: str | None = "trialflow", headers: dict[str, str] | None = None, **kwargs: Any
    ) -> httpx.Response:
        sent = {"Authorization": f"Bearer {self.token(user)}"} if user else {}
        return httpx.post(
            f"{self.base}/trialflow/api/{path}", headers={**sent, **(headers or {})}, timeout=30, **kwargs
        )

    def get(self, path: str, user: str | None = "trialflow", **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token(user)}"} if user else {}
        return httpx.get(f"{self.base}/trialflow/api/{path}", params=params, headers=headers, timeout=30)


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
    from tests.queries.test_queries import fill

    fill(harness.store, "eprivate1", dag_id="it_ui_private")
    passwords = json.loads((harness.airflow.home / "passwords.json").read_text())
    return UiSetup(harness, dag_id, run_id, experiment_id_for(dag_id, run_id), "eprivate1", passwords)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
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


def login(browser: Any, ui: UiSetup, user: str = "trialflow", dark: bool = False) -> Any:
    """A page logged in to Airflow through its own login form."""
    context = browser.new_context(
        viewport={"width": 1500, "height": 1100}, accept_downloads=True, color_scheme="dark" if dark else "light"
    )
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.goto(f"{ui.base}/auth/login/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", ui.passwords[user])
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: "/auth/login" not in url, timeout=30000)
    if dark:
        page.evaluate("localStorage.setItem('theme', 'dark')")
    return page
