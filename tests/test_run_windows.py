"""Run windows: the one module that knows how a DAG run's part of an experiment is kept."""

from __future__ import annotations

from trialflow.run_windows import RunWindow, RunWindows, key_of, run_id_of, windows_in
from trialflow.tuning.experiment_store import ExperimentStore, sqlite_url


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
    window = RunWindow(4, 3, 99.0, exists=True, counted_from=1.0, inputs={"a": 1}, secret_inputs=("a",))
    assert RunWindow.parse(window.stored(started_at=2.0)) == window
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
    neither undoes the other, on SQLite's concurrent writers (each merge is a compare-and-set)."""
    import threading

    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    store.open_experiment("ew")
    windows = RunWindows(store, "ew")
    for round_ in range(20):
        run_id = f"r{round_}"
        windows.put(run_id, RunWindow(0, 2, None, exists=True), started_at=1.0)
        barrier = threading.Barrier(2)

        def write(fields: dict, run_id: str = run_id, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            RunWindows(ExperimentStore(sqlite_url(tmp_path / "s.db")), "ew").merge({run_id: fields})

        threads = [
            threading.Thread(target=write, args=({"stopped": {"by": "ann"}},)),
            threading.Thread(target=write, args=({"deadline": 9.0},)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        window = windows.get(run_id)
        assert window.stopped == {"by": "ann"} and window.deadline == 9.0, (round_, window)
