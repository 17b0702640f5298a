"""The pages' data routes write their JSON in one pass: the same document FastAPI's own path
wrote, a non-finite number null instead of a 500 (trialflow.ui.json_body)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Response
from fastapi.testclient import TestClient

from trialflow.ui.json_body import json_body

PAYLOAD: dict[str, Any] = {
    "trials": [
        {"trial_index": i, "metric": i / 3, "parameters": {"lr": 1e-4 * i, "opt": {"_name": "sgd"}}, "ok": i % 2 == 0}
        for i in range(50)
    ],
    "started": datetime(2026, 11, 27, 13, 7, tzinfo=UTC),
    "tags": ("a", "b"),
    "none": None,
    "text": "<img src=x onerror=alert(1)> é \u2028",
    "big": 2**63 + 1,
}


def client() -> TestClient:
    app = FastAPI()

    @app.get("/fastapi")
    def through_fastapi() -> dict[str, Any]:
        return PAYLOAD

    @app.get("/one-pass")
    def one_pass() -> Response:
        return json_body(PAYLOAD)

    @app.get("/nan")
    def nan() -> Response:
        return json_body({"metric": math.nan, "best": math.inf, "low": -math.inf})

    return TestClient(app)


def test_the_same_document_as_fastapis_own_path():
    http = client()
    ours, theirs = http.get("/one-pass"), http.get("/fastapi")
    assert ours.status_code == theirs.status_code == 200
    assert ours.headers["content-type"] == "application/json"
    assert ours.json() == theirs.json()


def test_a_number_that_is_not_finite_is_null():
    answer = client().get("/nan")
    assert answer.status_code == 200 and answer.json() == {"metric": None, "best": None, "low": None}
