"""Driving Airflow's own buttons as the Grid does (PATCH a task instance, clear) and waiting for
what a person expects to follow: shared by the tests of Airflow's controls, the cluster's fault
suite and the pages' tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.helpers.airflow import PY, Harness
from trialflow.platforms.base import experiment_id_for
from trialflow.platforms.local import process_alive
from trialflow.store.results import TrialRow

SLEEPER = (
    "import os, time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
    "open(os.environ['LAUNCHES'], 'a').write(os.environ['NNI_TRIAL_JOB_ID'] + '\\n')\n"
    "time.sleep(60)\ntrial.report_final_result(p['x'])\n"
)


def config(trials: int, concurrency: int) -> str:
    return (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: LAUNCHES={{launches}} {PY} t.py\n"
        f"trialConcurrency: {concurrency}\nmaxTrialNumber: {trials}\ntuner: {{name: Random}}\n"
        "trainingService: {platform: local}\n"
    )


def sleeper_dag(
    harness: Harness,
    name: str,
    defer_after: float,
    trials: int = 1,
    concurrency: int = 1,
    start_trials_in: str = "worker",
):
    """An experiment of sleeping trials; by default started by workers (``defer_after`` is the
    worker's hand-off), ``start_trials_in="triggerer"`` for the triggered start's own."""
    folder = harness.root / "experiments" / name
    launches = folder / "launches"
    text = config(trials, concurrency).replace("{launches}", str(launches))
    dag_args = f"defer_after={defer_after}, start_trials_in={start_trials_in!r}"
    dag_id, _ = harness.experiment(name, text, {"t.py": SLEEPER}, dag_args=dag_args)
    harness.airflow.wait_for_dag(dag_id, harness.dag_files[dag_id], timeout=90)
    return dag_id, launches


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90, why: Callable[[], str] | None = None) -> Any:
    """``check()``'s first true value within ``timeout`` s; else TimeoutError, saying what was
    seen at the end (``why()``) where the caller can tell it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise TimeoutError(f"waited {timeout} s for {what}" + (f"; seen: {why()}" if why is not None else ""))


def running_pids(harness: Harness, dag_id: str, run_id: str, states: set[str], count: int) -> dict[int, int]:
    """Once ``count`` trial tasks are in ``states`` and their processes run: map index -> pid."""

    def ready() -> dict[int, int] | None:
        # A deferred task counts once a triggerer runs its trigger (marked before that, Airflow
        # has no trigger to call on_kill on: the end step's sweep is the net, tested apart).
        tis = [
            ti
            for ti in harness.tis(dag_id, run_id)
            if ti["state"] in states and (ti["state"] != "deferred" or ti.get("triggerer_job"))
        ]
        if len(tis) < count:
            return None
        pids = {}
        for ti in tis:
            record = harness.store.find_trial(experiment_id_for(dag_id, run_id), ti["map_index"])
            handle = (record.handle if record else None) or {}
            if "pid" not in handle or not process_alive(int(handle["pid"])):
                return None
            pids[ti["map_index"]] = int(handle["pid"])
        return pids

    return wait_for(f"{count} trial(s) {sorted(states)}", ready, 120)


def gone(pids: dict[int, int], timeout: float = 20) -> float:
    started = time.monotonic()
    wait_for("the trials' processes to end", lambda: not any(process_alive(p) for p in pids.values()), timeout)
    return time.monotonic() - started


def patch_ti(harness: Harness, dag_id: str, run_id: str, map_index: int, state: str, task_id: str = "trial") -> None:
    """Mark one task instance as the Grid does (clicked again while refused, see ``click_until_taken``)."""
    path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}"
    response = click_until_taken(lambda: harness.airflow.api("PATCH", path, json={"new_state": state}))
    assert response.status_code == 200 or _got_through_before(response, state), response.text


def click_until_taken(click: Callable[[], Any], tries: int = 20) -> Any:
    """A person's click through the REST API, clicked again while Airflow's SQLite metadata
    answers 500 "database is locked" or 409 (a concurrent writer); the last answer."""
    for _ in range(tries):
        response = click()
        if response.status_code < 500 and not _worth_retrying(response):
            break
        time.sleep(0.1)
    return response


def store_row(harness: Harness, dag_id: str, run_id: str, index: int) -> TrialRow:
    return next(r for r in harness.rows(dag_id, run_id) if r.trial_index == index)


def mark_failed_across_the_hand_off(
    airflow: Any, store_url: str, dag_id: str, run_id: str, offsets: list[float], action: str = "failed"
) -> tuple[dict[int, dict[str, Any]], dict[int, float]]:
    """Mark trial task i failed (``action`` "clear": clear it) ``offsets[i]`` seconds after its
    trial's handle reaches the store (its worker starts following it then), each from a thread
    of its own, through the REST API as the Grid does. Returns the trials' handles and how late
    each click got through."""
    import threading

    from trialflow.store.experiment_store import ExperimentStore

    experiment_id = experiment_id_for(dag_id, run_id)
    clicked: dict[int, float] = {}
    refused: dict[int, str] = {}
    handles: dict[int, dict[str, Any]] = {}

    def click(index: int, at: float) -> None:
        time.sleep(max(0.0, at - time.monotonic()))
        if action == "clear":
            body = {"dry_run": False, "dag_run_id": run_id, "task_ids": [["trial", index]], "only_failed": False}
            response = click_until_taken(lambda: airflow.api("POST", f"/dags/{dag_id}/clearTaskInstances", json=body))
        else:
            path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/trial/{index}"
            response = click_until_taken(lambda: airflow.api("PATCH", path, json={"new_state": action}))
        if response.status_code == 200 or _got_through_before(response, action):
            clicked[index] = time.monotonic() - at
        else:
            refused[index] = f"{response.status_code} {response.text[:300]}"

    clickers = []
    deadline = time.monotonic() + 240
    store = ExperimentStore(store_url)
    while len(handles) < len(offsets):  # polled every 50 ms
        assert time.monotonic() < deadline, _why_not_started(airflow, store, dag_id, run_id, experiment_id, handles)
        for index in range(len(offsets)):
            if index in handles:
                continue
            try:
                record = store.find_trial(experiment_id, index) if store.experiment_exists(experiment_id) else None
            except Exception:  # the store busy with the trials' own writes: look again in 50 ms
                record = None
            if record is not None and record.handle:  # submitted: its follower starts now
                handles[index] = record.handle
                thread = threading.Thread(target=click, args=(index, time.monotonic() + offsets[index]))
                thread.start()
                clickers.append(thread)
        time.sleep(0.05)
    for thread in clickers:
        thread.join(60)
    assert not refused and len(clicked) == len(offsets), (refused, clicked)
    return handles, clicked


def _why_not_started(
    airflow: Any, store: Any, dag_id: str, run_id: str, experiment_id: str, handles: dict[int, Any]
) -> str:
    """The failure's picture: what each trial task and each stored trial was in, and the run."""
    try:
        return _picture(airflow, store, dag_id, run_id, experiment_id, handles)
    except Exception as error:  # the picture must not hide the failure
        return f"only {len(handles)} trials started ({sorted(handles)}); no picture: {error!r}"


def _picture(airflow: Any, store: Any, dag_id: str, run_id: str, experiment_id: str, handles: dict[int, Any]) -> str:
    tis = [
        (ti["map_index"], ti["state"], ti["try_number"], ti.get("triggerer_job") is not None)
        for ti in airflow.task_instances(dag_id, run_id)
        if ti["task_id"] == "trial"
    ]
    rows = [(r.trial_index, r.status, (r.message or "")[:80]) for r in store.trial_rows(experiment_id)]
    runs = airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}").json().get("state")
    return f"only {len(handles)} trials started ({sorted(handles)}); run {runs}; tis {sorted(tis)}; store {rows}"


def _worth_retrying(response: Any) -> bool:
    """A refusal a person clicks again for: concurrent clears on SQLite's metadata collide on
    a task instance history row (409 "Unique constraint violation"), as a 500 "database is
    locked" does."""
    return response.status_code == 409 and "Unique constraint violation" in response.text


def _got_through_before(response: Any, action: str) -> bool:
    """A retried mark whose earlier try went through after all (its answer was a 500 that
    committed): Airflow says the task is already in that state."""
    return response.status_code == 409 and f"already in {action} state" in response.text


def all_closed(harness: Harness, dag_id: str, run_id: str, timeout: float = 60) -> list[TrialRow]:
    """The run's trials once none of them is WAITING or RUNNING in the store."""

    def closed() -> list[TrialRow] | None:
        rows = harness.rows(dag_id, run_id)
        return rows if rows and all(r.status not in ("RUNNING", "WAITING") for r in rows) else None

    return wait_for("every trial closed in the store", closed, timeout)


# A trial that traps SIGTERM (to save a checkpoint, say) and starts a child in a session of its
# own that ignores it too; both write their pids into the trial's folder.
STUBBORN = (
    "import os, signal, subprocess, sys, time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'], start_new_session=True)\n"
    "open(os.path.join(os.environ['NNI_OUTPUT_DIR'], 'pids'), 'w').write(f'{os.getpid()} {child.pid}\\n')\n"
    "open(os.environ['LAUNCHES'], 'a').write(os.environ['NNI_TRIAL_JOB_ID'] + '\\n')\n"
    "time.sleep(300)\ntrial.report_final_result(p['x'])\n"
)


@dataclass
class HandOffStops:
    """What ``stop_across_the_hand_off`` saw: the run, its trials once closed, how late each
    click got through, and how long after the last click every process was gone."""

    dag_id: str
    run_id: str
    rows: list[TrialRow]
    clicked: dict[int, float]
    gone_in: float


def stop_across_the_hand_off(
    harness: Harness,
    name: str,
    offsets: list[float],
    action: str,
    defer_after: float,
    gone_within: float,
    start_trials_in: str = "worker",
) -> HandOffStops:
    """Run one STUBBORN trial per offset (all at once), click ``action`` on each trial task at
    its offset around the hand-off (mark_failed_across_the_hand_off), and wait until every
    trial's processes (its setsid child included) are gone within ``gone_within`` seconds of
    the last click, every trial is closed in the store and the run has ended; each trial must
    have started once. ``start_trials_in``: the DAG's (ExperimentOptions): "triggerer" moves
    the hand-off inside the trigger, from its start to its follow."""
    from pathlib import Path

    folder = harness.root / "experiments" / name
    launches = folder / "launches"
    text = config(len(offsets), len(offsets)).replace("{launches}", str(launches))
    dag_args = f"defer_after={defer_after}, start_trials_in={start_trials_in!r}"
    dag_id, _ = harness.experiment(name, text, {"t.py": STUBBORN}, dag_args=dag_args)
    harness.airflow.wait_for_dag(dag_id, harness.dag_files[dag_id], timeout=90)
    run_id = harness.airflow.trigger(dag_id)
    handles, clicked = mark_failed_across_the_hand_off(
        harness.airflow, harness.store_url, dag_id, run_id, offsets, action=action
    )
    last_click = time.monotonic()

    def pids_of(handle: dict[str, Any]) -> list[int]:
        path = Path(handle["trial_dir"]) / "pids"
        ready = wait_for(f"{path}", lambda: path.exists() and path.read_text().endswith("\n") and path.read_text(), 30)
        return [int(handle["pid"]), *map(int, ready.split())]

    pids = {index: pids_of(handle) for index, handle in handles.items()}
    left = max(1.0, gone_within - (time.monotonic() - last_click))
    wait_for(
        "every trial's processes to end", lambda: not any(process_alive(p) for ps in pids.values() for p in ps), left
    )
    gone_in = time.monotonic() - last_click
    rows = all_closed(harness, dag_id, run_id, timeout=max(1.0, gone_within - gone_in))
    harness.wait(dag_id, run_id, 180)
    assert sorted(launches.read_text().split()) == sorted(r.trial_id for r in rows)  # each started once
    return HandOffStops(dag_id, run_id, rows, clicked, gone_in)
