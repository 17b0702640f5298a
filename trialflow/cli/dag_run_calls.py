"""What a caller asks of a running Airflow over its REST API, in its own terms: wait for a DAG
to be parsed (or fail on its import error), trigger, clear or fail a run, read a run's state,
conf, task instances, logs and Human-in-the-loop details. Written against one ``api`` call and
one ``check_alive`` (a component that died fails the wait at once, not at its timeout), so the
private Airflow (trialflow.cli.embedded) and its process management stay apart."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx


class EmbeddedAirflowError(RuntimeError):
    """The private Airflow failed to do what was asked (said with its logs' folder where known)."""


class DagRunCalls:
    """The run-level calls; a subclass answers ``api`` and ``check_alive``."""

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        raise NotImplementedError

    def check_alive(self) -> None:
        raise NotImplementedError

    def wait_for_dag(self, dag_id: str, dag_file: Path | None = None, timeout: float = 120.0) -> None:
        """Wait until the DAG is parsed; fail fast if its file (when given) has an import error."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if self.api("GET", f"/dags/{dag_id}").status_code == 200:
                return
            errors = [
                e
                for e in self.api("GET", "/importErrors").json().get("import_errors", [])
                if dag_file is not None and Path(e.get("filename", "")).name == dag_file.name
            ]
            if errors:
                raise EmbeddedAirflowError(
                    "the experiment DAG failed to import:\n" + "\n".join(e.get("stack_trace", "") for e in errors)
                )
            time.sleep(0.5)
        raise EmbeddedAirflowError(f"DAG {dag_id} did not appear in {timeout:.0f} s")

    def wait_for_fresh_dag(self, dag_id: str, dag_file: Path, changed_at: float, timeout: float = 120.0) -> None:
        """An Airflow already up (a shared home's): wait until ``dag_id`` is parsed from what its
        files hold since ``changed_at`` (epoch seconds: the newest of the DAG file and the config
        it reads). A DAG parsed after that is used at once; an older one is re-parsed on request
        (the dag-processor would otherwise come to it within its 5 s interval)."""
        deadline = time.monotonic() + timeout
        asked = False
        while time.monotonic() < deadline:
            self.check_alive()
            response = self.api("GET", f"/dags/{dag_id}/details")
            if response.status_code == 200:
                details = response.json()
                parsed = details.get("last_parsed_time")
                if parsed and datetime.fromisoformat(str(parsed).replace("Z", "+00:00")).timestamp() > changed_at:
                    return
                if not asked and details.get("file_token"):
                    self.api("PUT", f"/parseDagFile/{details['file_token']}")
                    asked = True
            else:
                self.wait_for_dag(dag_id, dag_file, timeout=max(1.0, deadline - time.monotonic()))
            time.sleep(0.2)
        raise EmbeddedAirflowError(f"DAG {dag_id} was not parsed again in {timeout:.0f} s")

    def dags_of_file(self, dag_file: Path, timeout: float = 120.0) -> list[str]:
        """The ids of the DAGs that ``dag_file`` (in the DAGs folder) defines, once parsed; fail
        fast, with Airflow's trace, if it has an import error."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            dags = self.api("GET", "/dags", params={"limit": 100}).json().get("dags", [])
            found = [str(d["dag_id"]) for d in dags if Path(str(d.get("fileloc") or "")).name == dag_file.name]
            if found:
                return found
            errors = [
                e
                for e in self.api("GET", "/importErrors").json().get("import_errors", [])
                if Path(e.get("filename", "")).name == dag_file.name
            ]
            if errors:
                raise EmbeddedAirflowError(
                    f"{dag_file.name} failed to import:\n" + "\n".join(e.get("stack_trace", "") for e in errors)
                )
            time.sleep(0.5)
        raise EmbeddedAirflowError(f"no DAG of {dag_file.name} appeared in {timeout:.0f} s")

    def runs_since(self, dag_id: str, since: datetime) -> list[dict[str, Any]]:
        """The runs of ``dag_id`` queued after ``since`` (aware), oldest first."""
        response = self.api("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "run_after", "limit": 100})
        if response.status_code == 404:
            return []
        response.raise_for_status()
        return [
            r
            for r in response.json().get("dag_runs", [])
            if r.get("queued_at") and datetime.fromisoformat(str(r["queued_at"]).replace("Z", "+00:00")) >= since
        ]

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None, run_id: str | None = None) -> str:
        """A new run of ``dag_id``. The run id is chosen here (unless given), in Airflow's own
        form for a manual run, so a trigger whose answer was lost is asked again safely: the
        second ask finds the run the first one made (409) instead of starting another experiment."""
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        run_id = run_id or f"manual__{datetime.now(UTC).isoformat()}"
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf or {}}
        response = self.api("POST", f"/dags/{dag_id}/dagRuns", json=body, repeatable=True)
        if response.status_code == 409 and self.run_conf(dag_id, run_id) == (conf or {}):
            return run_id
        if response.status_code >= 300:
            raise EmbeddedAirflowError(f"triggering {dag_id} failed: {response.status_code} {response.text}")
        return str(response.json()["dag_run_id"])

    def latest_run(self, dag_id: str) -> str | None:
        """The newest run of ``dag_id``, if any (what `trialflow run` resumes)."""
        response = self.api("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "-run_after", "limit": 1})
        if response.status_code == 404:
            return None
        response.raise_for_status()
        runs = response.json().get("dag_runs", [])
        return str(runs[0]["dag_run_id"]) if runs else None

    def run_conf(self, dag_id: str, run_id: str) -> dict[str, Any] | None:
        """A run's conf; None when there is no such run."""
        response = self.api("GET", f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return dict(response.json().get("conf") or {})

    def clear_run(self, dag_id: str, run_id: str, only_failed: bool = False) -> None:
        """Clear the tasks of a run (``only_failed``: those that failed) so they run again;
        trialflow's tasks then resume their experiment. Clearing a trial task that is running
        or deferred stops its trial (the task's on_kill), as a person's clear should: resuming
        after a crash clears before the triggerer is up (see runner.py), or only what failed."""
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        response = self.api(
            "POST", f"/dags/{dag_id}/dagRuns/{run_id}/clear", json={"dry_run": False, "only_failed": only_failed}
        )
        if response.status_code >= 300:
            raise EmbeddedAirflowError(f"clearing {dag_id} {run_id} failed: {response.status_code} {response.text}")

    def fail_run(self, dag_id: str, run_id: str) -> None:
        """Mark a run failed (Ctrl-C of a run on a shared Airflow, which goes on running): its
        tasks stop and it starts no more trials."""
        self.api("PATCH", f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}", json={"state": "failed"})

    def dag_run_state(self, dag_id: str, run_id: str) -> str:
        """A run's state, asked of the runs' list filtered by its id. Airflow 3.3 answers one run
        with the DAG versions its task instances ran, found by loading every task instance of
        the run and its history, where the list reads them in one query: a run of 1,000 trials
        polled each second (the waits of `trialflow run`, the tests, the benches) was 20 % of
        the api-server's py-spy samples (bench/RESULTS.md). The run's own address answers where the list
        does not name it (a pattern matching over a hundred runs)."""
        response = self.api("GET", f"/dags/{dag_id}/dagRuns", params={"run_id_pattern": run_id, "limit": 100})
        if response.status_code == 200:
            for run in response.json().get("dag_runs", []):
                if run.get("dag_run_id") == run_id:
                    return str(run.get("state"))
        return str(self.api("GET", f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}").json().get("state"))

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> list[Any]:
        """A task try's log as Airflow serves it (masked by its secrets masker): its entries,
        structured (``{"event": ..., "level": ...}``) or plain text; [] when there is none."""
        response = self.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/logs/{try_number}",
            params={"map_index": map_index, "full_content": True},
            headers={"Accept": "application/json"},
        )
        if response.status_code >= 300:
            return []
        content = response.json().get("content") or []
        return list(content) if isinstance(content, list) else str(content).splitlines()

    def hitl_details(self, dag_id: str, run_id: str) -> dict[str, Any]:
        """The run's human-in-the-loop tasks (Airflow's ``hitlDetails``: approvals and choices)."""
        path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/hitlDetails"
        response = self.api("GET", path, params={"limit": 100})
        response.raise_for_status()
        answer = response.json()
        return answer if isinstance(answer, dict) else {}

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of the run (the API gives at most 100 per page)."""
        found: list[dict[str, Any]] = []
        while True:
            response = self.api(
                "GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100, "offset": len(found)}
            )
            page = list(response.json().get("task_instances", []))
            found += page
            if len(page) < 100:
                return found


#: Where migrated empty databases are kept, one per Airflow install (see ``database_template``).
