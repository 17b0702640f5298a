"""A run's state as trialflow's waits read it (trialflow.cli.dag_run_calls): from the runs' list
filtered by the run's id, the exact id picked from what the pattern matched, the run's own
address where the list does not name it. Airflow's answers are recorded shapes; every wait of
the suite reads a real one."""

from __future__ import annotations

from typing import Any

import httpx

from trialflow.cli.dag_run_calls import DagRunCalls


class _Answers(DagRunCalls):
    def __init__(self, runs: list[dict[str, Any]], list_status: int = 200):
        self.runs, self.list_status = runs, list_status
        self.asked: list[tuple[str, dict]] = []

    def check_alive(self) -> None:
        pass

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        self.asked.append((path, kwargs.get("params") or {}))
        if path.endswith("/dagRuns"):
            return httpx.Response(self.list_status, json={"dag_runs": self.runs, "total_entries": len(self.runs)})
        return httpx.Response(200, json={"dag_run_id": path.rsplit("/", 1)[1], "state": "running"})


def test_the_exact_run_is_picked_from_what_its_pattern_matched():
    calls = _Answers(
        [
            {"dag_run_id": "manualX_1", "state": "failed"},  # "_" matched any character
            {"dag_run_id": "manual__1", "state": "success"},
        ]
    )
    assert calls.dag_run_state("d", "manual__1") == "success"
    assert calls.asked == [("/dags/d/dagRuns", {"run_id_pattern": "manual__1", "limit": 100})]


def test_the_runs_own_address_answers_where_the_list_does_not_name_it():
    for calls in (_Answers([{"dag_run_id": "other", "state": "failed"}]), _Answers([], list_status=422)):
        assert calls.dag_run_state("d", "scheduled__2026-12-07T00:00:00+00:00") == "running"
        assert calls.asked[-1][0] == "/dags/d/dagRuns/scheduled__2026-12-07T00%3A00%3A00%2B00%3A00"
