"""The experiment pages' test setup: an experiment run under the session's Airflow, a
logged-in browser page, and the hostile name it carries."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx

from tests.helpers.airflow import Harness

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
