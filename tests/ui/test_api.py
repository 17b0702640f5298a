"""The pages' data API on the real api-server, through Airflow's login and DAG permissions."""

from __future__ import annotations

import csv
import io

import httpx
import pytest

from tests.helpers.pages import XSS, UiSetup

pytestmark = pytest.mark.integration


def test_no_session_is_401_on_every_data_route(ui: UiSetup):
    for path in (
        "experiments",
        f"experiments/{ui.experiment_id}",
        f"experiments/{ui.experiment_id}/trials",
        f"experiments/{ui.experiment_id}/chart",
        f"experiments/{ui.experiment_id}/trials/0",
        f"experiments/{ui.experiment_id}/export.csv",
        f"experiments/{ui.experiment_id}/trials/2/intermediate.csv",
        "resolve?dag_id=x&run_id=y",
    ):
        assert ui.get(path, user=None).status_code == 401, path
    forged = httpx.get(
        f"{ui.base}/trialflow/api/experiments", headers={"Authorization": "Bearer not-a-token"}, timeout=10
    )
    assert forged.status_code in (401, 403)
    assert httpx.get(f"{ui.base}/trialflow/static/trialflow.js", timeout=10).status_code == 200  # code, no data


def test_a_user_sees_only_experiments_of_dags_they_may_read(ui: UiSetup):
    admin = {e["experiment_id"] for e in ui.get("experiments").json()["experiments"]}
    limited = {e["experiment_id"] for e in ui.get("experiments", user="limited").json()["experiments"]}
    assert {ui.experiment_id, ui.private_id} <= admin
    assert ui.experiment_id in limited and ui.private_id not in limited
    for path in (
        f"experiments/{ui.private_id}",
        f"experiments/{ui.private_id}/trials",
        f"experiments/{ui.private_id}/trials/0",
        f"experiments/{ui.private_id}/export.csv",
        f"experiments/{ui.private_id}/trials/0/intermediate.csv",
        f"experiments/{ui.private_id}/curves",
        f"experiments/{ui.private_id}/importance",
    ):
        assert ui.get(path, user="limited").status_code == 403, path
    assert ui.get("resolve", user="limited", dag_id="it_ui_private", run_id="r1").status_code == 403
    assert ui.get(f"experiments/{ui.private_id}").status_code == 200
    assert ui.get("experiments/no-such-experiment").status_code == 404


def test_list_and_summary_describe_the_run(ui: UiSetup):
    (row,) = [e for e in ui.get("experiments").json()["experiments"] if e["experiment_id"] == ui.experiment_id]
    assert row["name"] == f"{XSS} pages" and row["dag_id"] == ui.dag_id and row["state"] == "success"
    assert row["counts"] == {"SUCCEEDED": 7, "FAILED": 1} and row["tuner"] == "Random" and row["dag_exists"]
    (gone,) = [e for e in ui.get("experiments").json()["experiments"] if e["experiment_id"] == ui.private_id]
    assert gone["dag_exists"] is False and gone["state"] == "running"
    summary = ui.get(f"experiments/{ui.experiment_id}").json()
    assert summary["config"]["maxTrialNumber"] == 8 and summary["config"]["trialConcurrency"] == 3
    assert summary["best"]["metric"] == max(
        r["metric"] for r in ui.get(f"experiments/{ui.experiment_id}/trials", status="SUCCEEDED").json()["rows"]
    )
    assert summary["links"]["dag_run"].endswith(
        f"/dags/{ui.dag_id}/runs/{ui.run_id.replace(':', '%3A').replace('+', '%2B')}"
    )


def test_trials_sort_filter_search_and_page_on_the_server(ui: UiSetup):
    path = f"experiments/{ui.experiment_id}/trials"
    page = ui.get(path, limit=3, offset=3).json()
    assert page["total"] == 8 and [r["trial_index"] for r in page["rows"]] == [3, 4, 5]
    metrics = [r["metric"] for r in ui.get(path, sort="metric", desc="true").json()["rows"]]
    assert metrics[:7] == sorted(metrics[:7], reverse=True) and metrics[7] is None
    lrs = [r["parameters"]["lr"] for r in ui.get(path, sort="param:lr").json()["rows"]]
    assert lrs == sorted(lrs)
    failed = ui.get(path, status="FAILED").json()
    assert failed["total"] == 1 and failed["rows"][0]["trial_index"] == 3
    adam = ui.get(path, search="adam").json()["rows"]
    assert adam and all(r["parameters"]["opt"]["_name"] == "adam" for r in adam)
    assert ui.get(path, sort="; DROP TABLE trials").status_code == 422
    assert ui.get(path, limit=100000).status_code == 422


def test_trial_detail_links_curves_importance(ui: UiSetup):
    detail = ui.get(f"experiments/{ui.experiment_id}/trials/2").json()
    assert len(detail["intermediate"]) == 6 and detail["final_extra"] == {"loss": 0.1}
    labels = {link["label"]: link["href"] for link in detail["links"]}
    assert labels["Task instance"].endswith("/tasks/trial/mapped/2")
    assert labels["Platform"] == f"https://platform.example/jobs/{ui.experiment_id}/{ui.experiment_id}-0002"
    assert {part["name"] for part in detail["log"]} >= {"stdout", "stderr"}
    failed = ui.get(f"experiments/{ui.experiment_id}/trials/3").json()
    assert failed["status"] == "FAILED" and "exited with code 2" in failed["message"]
    curves = ui.get(f"experiments/{ui.experiment_id}/curves", trials="1,2").json()["curves"]
    assert [c["trial_index"] for c in curves] == [1, 2] and all(len(c["points"]) == 6 for c in curves)
    importance = ui.get(f"experiments/{ui.experiment_id}/importance").json()
    assert importance["trials"] == 7 and set(importance["importances"]) <= {"lr", "opt", "opt/momentum", "act"}


def test_exports_are_safe_for_spreadsheets(ui: UiSetup):
    response = ui.get(f"experiments/{ui.experiment_id}/export.csv")
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == 8
    for row in rows:
        for value in row.values():
            assert not value.startswith(("=", "+", "-", "@")), value
    raw = {
        r["trial_index"]: r["parameters"]["act"]
        for r in ui.get(f"experiments/{ui.experiment_id}/trials").json()["rows"]
    }
    for row in rows:
        act = raw[int(row["trial_index"])]
        assert row["param:act"] == ("'" + act if act.startswith("=") else act)
    data = ui.get(f"experiments/{ui.experiment_id}/export.json").json()
    assert len(data) == 8 and {t["trial_index"]: t["parameters"]["act"] for t in data} == raw  # exactly


def test_a_trials_every_intermediate_result_downloads_as_csv(ui: UiSetup):
    detail = ui.get(f"experiments/{ui.experiment_id}/trials/2").json()
    response = ui.get(f"experiments/{ui.experiment_id}/trials/2/intermediate.csv")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [[int(r["step"]), float(r["value"])] for r in rows] == detail["intermediate"]
    assert ui.get(f"experiments/{ui.experiment_id}/trials/999/intermediate.csv").status_code == 404


def test_trial_tasks_carry_trial_and_platform_links(ui: UiSetup):
    links = ui.harness.airflow.api(
        "GET", f"/dags/{ui.dag_id}/dagRuns/{ui.run_id}/taskInstances/trial/links", params={"map_index": 2}
    ).json()["extra_links"]
    assert links["Trial"].startswith("/plugin/trialflow?") and "map_index=2" in links["Trial"]
    assert links["Platform"] == f"https://platform.example/jobs/{ui.experiment_id}/{ui.experiment_id}-0002"
    resolved = ui.get("resolve", dag_id=ui.dag_id, run_id=ui.run_id, map_index=2).json()
    assert resolved == {
        "experiment_id": ui.experiment_id,
        "trial_index": 2,
        "experiments": [{"experiment_id": ui.experiment_id, "task_group": None, "name": f"{XSS} pages"}],
    }


@pytest.mark.parametrize(
    "path, params",
    [
        ("experiments/{id}/trials", {"offset": 10**19}),
        ("experiments/{id}/trials", {"offset": -1}),
        ("experiments/{id}/trials", {"indexes": "1," + "9" * 20}),
        ("experiments/{id}/trials/" + "9" * 20, {}),
        ("experiments/{id}/curves", {"trials": "9" * 20}),
        ("experiments/{id}/curves", {"trials": "-5"}),
        ("resolve", {"dag_id": "d", "run_id": "r", "map_index": 10**19}),
    ],
)
def test_numbers_too_large_for_the_store_are_422_not_500(ui: UiSetup, path, params):
    """Found by hostile input: these were OverflowErrors from the database driver (500)."""
    response = ui.get(path.format(id=ui.experiment_id), **params)
    assert response.status_code == 422, response.text
