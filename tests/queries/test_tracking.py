"""Where an experiment and its trials are in MLflow, as the pages read it (trialflow.queries.
tracking): nothing for an untracked experiment, the runs' pages once made, only http(s) links
(a value in the store that is not one is never handed to a page), and the server's absence."""

from __future__ import annotations

import pytest

from tests.helpers.filled_store import fill
from trialflow.queries.experiments import experiment_summary
from trialflow.queries.trials import trial_detail, trials_page
from trialflow.tracking.outbox import Outbox
from trialflow.tracking.sync import AWAY_ATTR

pytestmark = pytest.mark.both_databases


def test_an_untracked_experiment_has_no_links(store):
    fill(store, "eq1")
    assert experiment_summary(store.engine, "eq1")["mlflow"] is None
    assert {row["mlflow_url"] for row in trials_page(store.engine, "eq1")["rows"]} == {None}


def test_the_runs_pages_once_made_and_only_http(store):
    fill(store, "eq1")
    outbox = Outbox(store.engine, store.study_id("eq1"))
    for key, url in [
        ("experiment", "http://mlflow:5000/#/experiments/1/runs/p"),
        ("0", "https://mlflow:5000/#/experiments/1/runs/a"),
        ("1", "javascript:alert(1)"),
        ("2", None),
    ]:
        assert outbox.claim(key)
        if url is not None:
            outbox.made(key, f"run-{key}", url)
    summary = experiment_summary(store.engine, "eq1")
    assert summary["mlflow"] == {"run_url": "http://mlflow:5000/#/experiments/1/runs/p", "away": None}
    links = {row["trial_index"]: row["mlflow_url"] for row in trials_page(store.engine, "eq1")["rows"]}
    assert links[0] == "https://mlflow:5000/#/experiments/1/runs/a"
    assert links[1] is None and links[2] is None and links[3] is None
    assert trial_detail(store.engine, "eq1", 0)["mlflow_url"] == links[0]


def test_a_server_away_is_said(store):
    fill(store, "eq1")
    store.set_experiment_attrs("eq1", {AWAY_ATTR: {"since": 1000.0, "error": "refused " + "x" * 1000}})
    away = experiment_summary(store.engine, "eq1")["mlflow"]
    assert away["run_url"] is None and away["away"]["since"] == 1000.0
    assert len(away["away"]["error"]) <= 300
