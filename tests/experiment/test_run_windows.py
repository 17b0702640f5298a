"""Run windows: the one module that knows how a DAG run's part of an experiment is kept."""

from __future__ import annotations

import pytest

from trialflow.experiment.run_windows import (
    EXPERIMENT_DEADLINE_REASON,
    Refusal,
    RunWindow,
    RunWindows,
    key_of,
    run_id_of,
    windows_in,
)
from trialflow.store.experiment_store import ExperimentStore, sqlite_url


def test_keys_name_their_run_and_nothing_else():
    assert run_id_of(key_of("manual__2026-11-26T04:00:00+00:00")) == "manual__2026-11-26T04:00:00+00:00"
    assert run_id_of("runs") is None and run_id_of("limits") is None
    attrs = {key_of("a"): {"first_index": 0, "count": 2}, key_of("b"): "not a window", "dag_id": "d"}
    assert windows_in(attrs) == {"a": RunWindow(0, 2, None, exists=True)}


def test_a_window_maps_its_tasks_to_trial_indexes():
    window = RunWindow(10, 3, None, exists=True)
    assert [window.trial_index(i) for i in (-1, 0, 2, 3)] == [None, 10, 12, None]
    assert window.holds(10) and window.holds(12) and not window.holds(13) and window.end_index == 13


def test_duration_counts_from_its_start_or_the_run_it_continues():
    assert RunWindow.parse({"first_index": 0, "started_at": 5.0}).counted_from == 5.0
    assert RunWindow.parse({"first_index": 0, "started_at": 5.0, "counted_from": 1.0}).counted_from == 1.0
    assert RunWindow.parse(None) == RunWindow()


def test_a_window_is_stored_as_it_reads_back():
    from tests.helpers.sealing import FernetSealer, sealed_with

    window = RunWindow(4, 3, 99.0, exists=True, counted_from=1.0, inputs={"a": 1, "b": "x"}, secret_inputs=("a",))
    with sealed_with(FernetSealer()):
        stored = window.stored(started_at=2.0)
        assert RunWindow.parse(stored) == window
    assert stored["inputs"]["b"] == "x" and set(stored["inputs"]["a"]) == {"__trialflow_sealed__"}
    fresh = RunWindow(0, 2, None, exists=True)  # counts from its start when nothing else is said
    assert RunWindow.parse(fresh.stored(started_at=2.0)).counted_from == 2.0


def test_changes_keep_what_else_a_window_holds(tmp_path, store):
    store.open_experiment("ew")
    windows = RunWindows(store, "ew")
    windows.put("r1", RunWindow(0, 2, None, exists=True, counted_from=100.0), started_at=100.0)
    windows.put("r2", RunWindow(2, 2, None, exists=True), started_at=200.0)
    windows.mark_stopped(["r1", "never"], {"by": "a", "action": "stop run"})
    moved = windows.move_deadlines(50.0, now=300.0)
    assert store.experiment_attr("ew", key_of("r1"))["stopped"] == {"by": "a", "action": "stop run"}
    assert {run_id: w.deadline for run_id, w in moved.items()} == {"r1": 150.0, "r2": 250.0}
    assert not windows.has("never")
    windows.mark_ended("r2", 3.0)
    windows.mark_ended("missing", 3.0)
    assert windows.get("r1").over and windows.get("r2").ended == 3.0 and not windows.has("missing")
    assert windows.get("r2").first_index == 2 and windows.get("r2").deadline == 250.0


def test_a_stop_and_a_deadline_move_at_once_both_stay(tmp_path):
    """Two writers of one run's window at the same instant (a person's stop, a duration change):
    neither undoes the other, on SQLite's concurrent writers (each mutator's merge is a
    compare-and-set), through the mutators the steering actions call."""
    import threading

    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    store.open_experiment("ew")
    windows = RunWindows(store, "ew")
    for round_ in range(20):
        run_id = f"r{round_}"
        windows.put(run_id, RunWindow(0, 2, None, exists=True), started_at=1.0)
        barrier = threading.Barrier(2)

        def stop(run_id: str = run_id, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            RunWindows(ExperimentStore(sqlite_url(tmp_path / "s.db")), "ew").mark_stopped([run_id], {"by": "ann"})

        def move(barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            RunWindows(ExperimentStore(sqlite_url(tmp_path / "s.db")), "ew").move_deadlines(8.0, now=0.0)

        threads = [threading.Thread(target=stop), threading.Thread(target=move)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        window = windows.get(run_id)
        assert window.stopped == {"by": "ann"} and window.deadline == 9.0, (round_, window)


def _never_asked(index: int) -> bool:
    return False


def test_admission_no_window_is_not_owned():
    refused = RunWindow().admission(0, None, _never_asked)
    assert refused is not None and not refused.owned and "start step" in refused.reason


@pytest.mark.parametrize("stopped", [None, {"by": "ann", "reason": "enough"}, {"by": "ann"}])
@pytest.mark.parametrize("deadline", [None, 50.0, 150.0])
@pytest.mark.parametrize("limit", [None, 11, 12])
@pytest.mark.parametrize("map_index", [0, 1, 2])
@pytest.mark.parametrize("asked", [False, True])
def test_admission_is_total(stopped, deadline, limit, map_index, asked):
    """Every combination: beyond the run's count skips; a trial asked before re-attaches
    whatever else holds; otherwise a stop, then a changed maxTrialNumber, then the deadline
    says why it skips (the order the messages were chosen in); else it starts."""
    window = RunWindow(10, 2, deadline, stopped=stopped, exists=True)
    refused = window.admission(map_index, limit, lambda index: asked, now=100.0)
    index = 10 + map_index
    if map_index >= 2:
        assert refused is not None and refused.owned and "holds 2 trial(s)" in refused.reason
    elif asked or not (stopped or (limit is not None and index >= limit) or (deadline is not None and deadline <= 100)):
        assert refused is None
    elif stopped:
        assert refused == Refusal(stopped.get("reason", "the run was stopped"))
    elif limit is not None and index >= limit:
        assert refused == Refusal(f"maxTrialNumber is {limit} (changed while the experiment ran)")
    else:
        assert refused == Refusal(EXPERIMENT_DEADLINE_REASON)


def test_the_store_is_asked_about_a_trial_only_when_it_matters():
    asked: list[int] = []

    def record(index: int) -> bool:
        asked.append(index)
        return False

    assert RunWindow(10, 2, None, exists=True).admission(1, None, record) is None
    assert asked == []  # nothing forbids a start: no lookup
    RunWindow(10, 2, 1.0, exists=True).admission(1, None, record, now=5.0)
    assert asked == [11]
