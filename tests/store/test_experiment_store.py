from __future__ import annotations

import math
import multiprocessing
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.platforms.base import TrialStatus
from trialflow.store.experiment_store import ExperimentStore, safe_url, sqlite_url
from trialflow.store.results import best_row
from trialflow.trial.protocol import Metric
from trialflow.tuning.asker import ask, judge, should_stop

SPACE = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}, "k": {"_type": "choice", "_value": [1, 2, 3]}})
TPE = AlgorithmConfig(name="TPE", class_args={"optimize_mode": "maximize", "seed": 3})


def test_ask_is_idempotent_per_trial_index(store):
    store.open_experiment("exp")
    study = "exp"
    first = ask(store, study, 4, "exp-0004", TPE, SPACE)
    again = ask(store, study, 4, "exp-0004", TPE, SPACE)
    assert (again.number, again.parameters, again.resumed) == (first.number, first.parameters, True)
    assert len(optuna.load_study(study_name=study, storage=store.storage).trials) == 1


def test_seeded_trials_differ_from_each_other_and_reproduce(tmp_path):
    def params(db: str) -> list[dict]:
        s = ExperimentStore(sqlite_url(tmp_path / db))
        s.open_experiment("exp")
        study = "exp"
        return [ask(s, study, i, f"t{i}", TPE, SPACE).parameters for i in range(4)]

    a, b = params("a.db"), params("b.db")
    assert a == b
    assert len({p["x"] for p in a}) == 4


def test_grid_search_visits_every_point_once(store):
    grid = AlgorithmConfig(name="GridSearch", class_args={"seed": 1})
    space = parse_search_space(
        {"a": {"_type": "choice", "_value": [1, 2, 3]}, "b": {"_type": "randint", "_value": [0, 2]}}
    )
    store.open_experiment("grid")
    study = "grid"
    seen = []
    for i in range(6):
        asked = ask(store, study, i, f"g{i}", grid, space)
        store.finish(asked.storage_id, TrialStatus.SUCCEEDED, float(i))
        seen.append((asked.parameters["a"], asked.parameters["b"]))
    assert sorted(seen) == [(a, b) for a in (1, 2, 3) for b in (0, 1)]


def test_finish_maps_nni_outcomes_to_optuna_states(store):
    store.open_experiment("exp")
    study = "exp"
    cases = {
        0: (TrialStatus.SUCCEEDED, {"default": 0.7, "loss": 0.3}, TrialState.COMPLETE),
        1: (TrialStatus.EARLY_STOPPED, None, TrialState.PRUNED),
        2: (TrialStatus.FAILED, None, TrialState.FAIL),
        3: (TrialStatus.SUCCEEDED, float("nan"), TrialState.FAIL),
        4: (TrialStatus.SUCCEEDED, None, TrialState.FAIL),
        5: (TrialStatus.USER_CANCELED, None, TrialState.FAIL),
    }
    ids = {}
    for index, (status, final, _) in cases.items():
        ids[index] = ask(store, study, index, f"t{index}", TPE, SPACE).storage_id
        store.finish(ids[index], status, final)
    for index, (status, _, state) in cases.items():
        frozen = store.storage.get_trial(ids[index])
        assert frozen.state == state, index
        assert frozen.user_attrs["nni_status"] == status.value
    assert store.storage.get_trial(ids[0]).value == 0.7
    assert store.storage.get_trial(ids[0]).user_attrs["final_metric_extra"] == {"loss": 0.3}
    assert store.storage.get_trial(ids[3]).user_attrs["message"] == "the final result (nan) is not a finite number"
    assert store.storage.get_trial(ids[4]).user_attrs["message"] == "no final result reported"
    # a second finish (a retried task) leaves a finished trial alone
    store.finish(ids[0], TrialStatus.FAILED, None)
    assert store.storage.get_trial(ids[0]).state == TrialState.COMPLETE


def test_intermediate_results_are_idempotent_per_sequence(store):
    store.open_experiment("exp")
    study = "exp"
    sid = ask(store, study, 0, "t0", TPE, SPACE).storage_id
    metrics = [
        Metric("PERIODICAL", 0, 0.1),
        Metric("PERIODICAL", 1, {"default": 0.2, "x": 1}),
        Metric("PERIODICAL", 2, float("nan")),
        Metric("FINAL", 0, 0.9),
    ]
    store.record_metrics(sid, metrics)
    store.record_metrics(sid, metrics[:2])  # re-read after a restart
    frozen = store.storage.get_trial(sid)
    assert frozen.intermediate_values == {0: 0.1, 1: 0.2}
    assert frozen.user_attrs["final_metric"] == 0.9


def test_a_checkpoint_record_is_no_result(store):
    """A record of a checkpoint is no point of the curve (the follower keeps the checkpoint, or
    says it was ignored where the experiment keeps none: tests/experiment/test_keeping.py)."""
    store.open_experiment("exp")
    sid = ask(store, "exp", 0, "t0", TPE, SPACE).storage_id
    skipped = store.record_metrics(
        sid,
        [
            Metric("PERIODICAL", 0, 0.1),
            Metric("CHECKPOINT", 1, {"folder": "checkpoints/000000001"}),
            Metric("PERIODICAL", 1, 0.2),
        ],
    )
    assert store.storage.get_trial(sid).intermediate_values == {0: 0.1, 1: 0.2}
    assert skipped == []


def test_rows_and_best_respect_optimize_mode(store):
    store.open_experiment("exp")
    study = "exp"
    for i, value in enumerate([0.5, 0.9, 0.1]):
        store.finish(ask(store, study, i, f"t{i}", TPE, SPACE).storage_id, TrialStatus.SUCCEEDED, value)
    store.finish(ask(store, study, 3, "t3", TPE, SPACE).storage_id, TrialStatus.SUCCEEDED, float("inf"))
    rows = store.trial_rows("exp")
    assert [r.trial_index for r in rows] == [0, 1, 2, 3]
    assert rows[3].final_metric is None
    assert best_row(rows, "maximize").trial_index == 1
    assert best_row(rows, "minimize").trial_index == 2


def test_safe_url_hides_passwords():
    assert "hunter2" not in safe_url("postgresql://u:hunter2@db/x")
    assert "***" in safe_url("postgresql://u:hunter2@db/x")


def _worker(url: str, index: int) -> None:
    store = ExperimentStore(url)
    store.open_experiment("load")
    study = "load"
    asked = ask(store, study, index, f"t{index}", TPE, SPACE)
    for step in range(25):
        store.record_metrics(asked.storage_id, [Metric("PERIODICAL", step, step / 25)])
    store.finish(asked.storage_id, TrialStatus.SUCCEEDED, index / 10)


@pytest.mark.slow
def test_many_processes_write_at_once_without_losing_anything(tmp_path):
    url = sqlite_url(tmp_path / "load.db")
    ExperimentStore(url).open_experiment("load")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(url, i)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    rows = ExperimentStore(url).trial_rows("load")
    assert [r.trial_index for r in rows] == list(range(8))
    assert all(r.intermediate_count == 25 and r.status == "SUCCEEDED" for r in rows)
    assert sorted(r.final_metric for r in rows) == [i / 10 for i in range(8)]
    assert not any(math.isnan(r.final_metric) for r in rows)


def _ask_same_index(url: str, index: int, barrier_path: str) -> None:
    store = ExperimentStore(url)
    store.open_experiment("race")
    study = "race"
    while not Path(barrier_path).exists():  # start together
        pass
    asked = ask(store, study, index, f"t{index}", TPE, SPACE)
    Path(barrier_path + f".{asked.storage_id}.{multiprocessing.current_process().pid}").write_text(
        repr(asked.parameters)
    )


@pytest.mark.slow
def test_racing_asks_for_one_index_agree_on_one_trial(tmp_path):
    """Two attempts of one trial (a zombie and its retry) ask at the same moment: the database's
    unique index lets one trial win, and both get its parameters."""
    url = sqlite_url(tmp_path / "race.db")
    ExperimentStore(url).open_experiment("race")
    barrier = str(tmp_path / "go")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_ask_same_index, args=(url, 5, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    Path(barrier).write_text("")
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    answers = {f.read_text() for f in tmp_path.glob("go.*")}
    assert len(answers) == 1, answers
    store = ExperimentStore(url)
    rows = store.trial_rows("race")
    assert [r.trial_index for r in rows] == [5]  # losers are hidden from rows
    winner = store.find_trial("race", 5)
    assert repr(winner.parameters) in answers
    trials = optuna.load_study(study_name="race", storage=store.storage).trials
    assert sum(1 for t in trials if "superseded_by" in t.user_attrs) == len(trials) - 1


def test_find_trial_is_an_index_lookup(store):
    store.open_experiment("exp")
    study = "exp"
    ids = {i: ask(store, study, i, f"t{i}", TPE, SPACE).storage_id for i in (0, 7, 3)}
    assert {i: store.find_trial_id(study, i) for i in (0, 7, 3)} == ids
    assert store.find_trial_id(study, 1) is None
    store.open_experiment("other")
    other = "other"
    assert store.find_trial_id(other, 0) is None  # per study


def test_should_stop_asks_the_pruner_about_running_trials_only(store):
    import optuna

    pruner = optuna.pruners.MedianPruner(n_startup_trials=0)
    store.open_experiment("exp")
    study = "exp"
    good = ask(store, study, 0, "t0", TPE, SPACE)
    store.record_metrics(good.storage_id, [Metric("PERIODICAL", s, 0.9) for s in range(3)])
    store.finish(good.storage_id, TrialStatus.SUCCEEDED, 0.9)
    bad = ask(store, study, 1, "t1", TPE, SPACE)
    assert should_stop(store, study, bad.storage_id, pruner) is False  # nothing reported yet
    store.record_metrics(bad.storage_id, [Metric("PERIODICAL", s, 0.1) for s in range(3)])
    assert should_stop(store, study, bad.storage_id, pruner) is True
    fine = ask(store, study, 2, "t2", TPE, SPACE)
    store.record_metrics(fine.storage_id, [Metric("PERIODICAL", s, 0.95) for s in range(3)])
    assert should_stop(store, study, fine.storage_id, pruner) is False
    store.finish(bad.storage_id, TrialStatus.EARLY_STOPPED)
    assert should_stop(store, study, bad.storage_id, pruner) is False  # already over


def test_a_backlog_of_results_is_judged_step_by_step_as_nni_judged_each_result(store):
    """A trigger that starts late finds dozens of results at once: judged at the newest alone,
    Medianstop compared the trial at a step no finished trial had reached (no median) and let a
    bad trial run to its end (a fresh Airflow's triggerer, measured). Each step is judged."""
    import optuna

    from trialflow.tuning import assessors
    from trialflow.tuning.assessors import JUDGED_STEPS

    pruner = optuna.pruners.MedianPruner(n_startup_trials=0, n_warmup_steps=2)  # Medianstop, start_step 3
    store.open_experiment("exp")
    for index in (0, 1):
        good = ask(store, "exp", index, f"t{index}", TPE, SPACE)
        store.record_metrics(good.storage_id, [Metric("PERIODICAL", s, 0.9) for s in range(6)])
        store.finish(good.storage_id, TrialStatus.SUCCEEDED, 0.9)
    bad = ask(store, "exp", 2, "t2", TPE, SPACE)
    store.record_metrics(bad.storage_id, [Metric("PERIODICAL", s, 0.1) for s in range(40)])
    frozen = store.storage.get_trial(bad.storage_id)
    study = optuna.load_study(study_name="exp", storage=store.storage)
    assert pruner.prune(study, frozen) is False  # Optuna's own look, at step 39 alone
    judgment = judge(store, "exp", bad.storage_id, pruner)
    assert judgment.stop_at == 2 and judgment.judged_through == 2  # the first step it is judged at
    assert should_stop(store, "exp", bad.storage_id, pruner) is True
    # steps judged before are not judged again: past step 5 no finished trial has a median
    assert judge(store, "exp", bad.storage_id, pruner, after=5) == assessors.Judgment(None, 39)
    assert judge(store, "exp", bad.storage_id, pruner, after=39) == assessors.Judgment(None, 39)

    # a long backlog: the earliest steps and the newest, never more than JUDGED_STEPS
    looked: list[int] = []

    class Counting(optuna.pruners.BasePruner):
        def prune(self, study, trial) -> bool:
            looked.append(trial.last_step)
            assert trial.intermediate_values == {s: 0.1 for s in range(trial.last_step + 1)}
            return False

    long = ask(store, "exp", 3, "t3", TPE, SPACE)
    store.record_metrics(long.storage_id, [Metric("PERIODICAL", s, 0.1) for s in range(100)])
    assert judge(store, "exp", long.storage_id, Counting(), after=9) == assessors.Judgment(None, 99)
    assert looked == [*range(10, 10 + JUDGED_STEPS - 1), 99]


def test_hyperband_rungs_written_from_a_backlog_are_those_of_one_result_at_a_time(store):
    """Hyperband's pruner writes the value a trial completed each rung with while it judges;
    a backlog judged step by step must leave the rungs and the verdict one result at a time
    leaves (each step judged with the rungs the steps before it wrote)."""
    import optuna

    def run(study: str, batch: bool) -> tuple[int | None, dict]:
        pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2)
        store.open_experiment(study)
        for index, value in enumerate((0.9, 0.8)):  # two finished trials to compete with
            done = ask(store, study, index, f"{study}{index}", TPE, SPACE)
            store.record_metrics(done.storage_id, [Metric("PERIODICAL", s, value) for s in range(9)])
            store.finish(done.storage_id, TrialStatus.SUCCEEDED, value)
        judged = ask(store, study, 2, f"{study}2", TPE, SPACE)
        curve = [0.95, 0.95, 0.7, 0.85, 0.6, 0.5, 0.5, 0.4, 0.3]
        stop_at, after = None, None
        if batch:
            store.record_metrics(judged.storage_id, [Metric("PERIODICAL", s, v) for s, v in enumerate(curve)])
            stop_at = judge(store, study, judged.storage_id, pruner).stop_at
        else:
            for step, value in enumerate(curve):
                store.record_metrics(judged.storage_id, [Metric("PERIODICAL", step, value)])
                judgment = judge(store, study, judged.storage_id, pruner, after=after)
                after = judgment.judged_through
                if judgment.stop_at is not None:
                    stop_at = judgment.stop_at
                    break
        attrs = store.storage.get_trial(judged.storage_id).system_attrs
        return stop_at, {k: v for k, v in attrs.items() if k.startswith("completed_rung_")}

    one_by_one, backlog = run("hb_single", batch=False), run("hb_batch", batch=True)
    assert one_by_one[1], "the curve completed a rung"
    assert backlog == one_by_one


def test_curvefitting_judges_the_counts_a_backlog_passes_over(store):
    """Curvefitting judges at start_step results and every gap after: a batch that jumps past
    those counts was never judged."""
    from trialflow.tuning.assessors import judge
    from trialflow.tuning.curvefitting import CurveFittingPruner

    pruner = CurveFittingPruner(epoch_num=20, start_step=6, threshold=0.95, gap=100)
    store.open_experiment("cf")
    good = ask(store, "cf", 0, "c0", TPE, SPACE)
    store.record_metrics(good.storage_id, [Metric("PERIODICAL", s, 0.9 + s / 1000) for s in range(20)])
    store.finish(good.storage_id, TrialStatus.SUCCEEDED, 0.95)
    bad = ask(store, "cf", 1, "c1", TPE, SPACE)
    store.record_metrics(bad.storage_id, [Metric("PERIODICAL", s, 0.05 + s / 1000) for s in range(9)])
    import optuna

    frozen = store.storage.get_trial(bad.storage_id)
    study = optuna.load_study(study_name="cf", storage=store.storage)
    assert pruner.prune(study, frozen) is False  # nine results: not a count it judges at
    assert judge(pruner, study, frozen, None).stop_at == 5  # the sixth result's step


def test_dict_finals_keep_their_other_keys_in_rows(store):
    store.open_experiment("exp")
    study = "exp"
    asked = ask(store, study, 0, "t0", TPE, SPACE)
    store.finish(asked.storage_id, TrialStatus.SUCCEEDED, {"default": 0.8, "loss": 0.2, "epochs": 3})
    row = store.trial_rows("exp")[0]
    assert row.final_metric == 0.8
    assert row.final_extra == {"loss": 0.2, "epochs": 3}


def test_a_plain_postgresql_url_uses_the_installed_driver():
    from trialflow.store.experiment_store import with_installed_driver

    url = with_installed_driver("postgresql://u:s3cret@db.example:5432/exp")
    assert url == "postgresql+psycopg://u:s3cret@db.example:5432/exp"  # psycopg 3 (the postgres extra)
    assert with_installed_driver("postgresql+psycopg2://u@h/x") == "postgresql+psycopg2://u@h/x"
    assert with_installed_driver("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


def test_a_trial_that_can_never_launch_is_failed_in_one_write_and_a_stop_that_came_first_stands(store):
    store.open_experiment("exp")
    unlaunched = ask(store, "exp", 0, "t0", TPE, SPACE).storage_id
    statements: list[str] = []

    def executed(conn, cursor, statement, *rest):
        statements.append(statement)

    sa.event.listen(store.storage.engine, "before_cursor_execute", executed)
    try:
        store.fail_unlaunched(unlaunched, "trialGpuNumber 3 can never fit on this machine")
    finally:
        sa.event.remove(store.storage.engine, "before_cursor_execute", executed)
    record = store.trial(unlaunched)
    assert (record.status, record.finished, record.message) == (
        TrialStatus.FAILED,
        True,
        "trialGpuNumber 3 can never fit on this machine",
    )
    assert store.storage.get_trial(unlaunched).state == TrialState.FAIL
    # nothing read first: no result to look for (a close reads the trial, its values included)
    assert not any(s.lstrip().upper().startswith("SELECT") and "trial_values" in s for s in statements)
    stopped = ask(store, "exp", 1, "t1", TPE, SPACE).storage_id
    store.close(stopped, TrialStatus.USER_CANCELED, "stopped by ann")
    store.fail_unlaunched(stopped, "code over the limits")  # the stop came first: it stands
    assert (store.trial(stopped).status, store.trial(stopped).message) == (TrialStatus.USER_CANCELED, "stopped by ann")


def test_the_records_an_ask_and_a_close_return_are_what_the_store_then_holds(store):
    """They are built without reading the trial back; a read must agree field for field."""
    store.open_experiment("exp")
    asked = ask(store, "exp", 0, "exp-0000", TPE, SPACE)
    assert asked.record == store.trial(asked.storage_id)
    assert ask(store, "exp", 0, "exp-0000", TPE, SPACE).record == asked.record  # a retry reads it
    store.set_status(asked.storage_id, TrialStatus.RUNNING)
    store.record_metrics(
        asked.storage_id, [Metric("PERIODICAL", 0, 0.5), Metric("FINAL", 1, {"default": 0.7, "loss": 2})]
    )
    closed = store.close(asked.storage_id, TrialStatus.SUCCEEDED, "done")
    assert closed == store.trial(asked.storage_id)
    assert (closed.status, closed.final, closed.message, closed.finished) == (
        TrialStatus.SUCCEEDED,
        {"default": 0.7, "loss": 2},
        "done",
        True,
    )
    assert store.close(asked.storage_id, TrialStatus.FAILED, "late").status == TrialStatus.SUCCEEDED  # first stands
    other = ask(store, "exp", 1, "exp-0001", TPE, SPACE)
    unreported = store.close(other.storage_id, TrialStatus.SUCCEEDED)  # succeeded without a final result
    assert unreported == store.trial(other.storage_id) and unreported.message == "no final result reported"
    frozen = store.storage.get_trial(other.storage_id)
    assert frozen.state == TrialState.FAIL


def test_an_experiment_attribute_is_read_alone(store):
    store.open_experiment("exp")
    store.set_experiment_attrs("exp", {"run:a": {"first_index": 4}, "other": [1, "x"]})
    assert store.experiment_attr("exp", "run:a") == {"first_index": 4}
    assert store.experiment_attr("exp", "other") == [1, "x"]
    assert store.experiment_attr("exp", "missing") is None


@pytest.mark.both_databases
def test_a_stops_note_is_kept_per_trial_read_by_experiment_and_cleared(store):
    """A stop's note (trialflow.experiment.job_stops) on a finished trial too: one row per trial,
    a second note replaces the first, another experiment's notes and look-alike keys are not
    read, and a cleared note is gone."""
    for name in ("notes", "other"):
        store.open_experiment(name)
    a, b = (ask(store, "notes", i, f"t{i}", TPE, SPACE).storage_id for i in (0, 1))
    c = ask(store, "other", 0, "o0", TPE, SPACE).storage_id
    store.finish(a, TrialStatus.USER_CANCELED, None, "marked failed")
    store.note_job_stop(a, {"status": "USER_CANCELED", "at": 1.0})
    store.note_job_stop(a, {"status": "USER_CANCELED", "at": 2.0})
    store.note_job_stop(b, {"status": "EARLY_STOPPED", "at": 3.0})
    store.note_job_stop(c, {"status": "USER_CANCELED", "at": 4.0})
    store.set_experiment_attrs("notes", {"job_stop:x": 1, "job_stop:" + "9" * 40: 2, "job_stopz": 3})
    assert store.job_stops("notes") == {
        a: {"status": "USER_CANCELED", "at": 2.0},
        b: {"status": "EARLY_STOPPED", "at": 3.0},
    }
    store.clear_job_stop(a)
    store.clear_job_stop(a)  # twice: nothing to clear
    assert store.job_stops("notes") == {b: {"status": "EARLY_STOPPED", "at": 3.0}}
    assert store.job_stops("other") == {c: {"status": "USER_CANCELED", "at": 4.0}}


def test_a_stops_note_is_written_where_the_database_has_no_upsert(store, monkeypatch):
    """MySQL, SQLite before 3.24: Optuna's own write of the study attribute, the same result."""
    monkeypatch.setattr(type(store.storage), "_upsert", lambda self: None)
    store.open_experiment("plain")
    sid = ask(store, "plain", 0, "p0", TPE, SPACE).storage_id
    store.note_job_stop(sid, {"at": 1.0})
    store.note_job_stop(sid, {"at": 2.0})
    assert store.job_stops("plain") == {sid: {"at": 2.0}}


@pytest.mark.both_databases
def test_two_stops_of_one_trial_note_it_at_once(store):
    """Two stoppers (the reconciler and a trigger's on_kill) note one trial in the same instant:
    neither fails (measured before: a unique-key error on PostgreSQL failed one stop)."""
    import threading

    store.open_experiment("race")
    sids = [ask(store, "race", i, f"r{i}", TPE, SPACE).storage_id for i in range(15)]
    errors: list[BaseException] = []

    def note(sid: int, barrier: threading.Barrier, n: int) -> None:
        barrier.wait()
        try:
            store.note_job_stop(sid, {"n": n})
        except BaseException as exc:  # what the test reports
            errors.append(exc)

    for sid in sids:
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=note, args=(sid, barrier, n)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert errors == []
    assert sorted(store.job_stops("race")) == sids


@pytest.mark.both_databases
def test_many_intermediate_results_are_stored_in_one_batch_exactly_once(store, monkeypatch):
    """A batch is one transaction of multi-row upserts: all of it or none of it, and a batch
    read again (a cursor lost in a crash mid-batch) overwrites its own rows instead of adding."""
    store.open_experiment("ingest")
    sid = ask(store, "ingest", 0, "t0", TPE, SPACE).storage_id
    monkeypatch.setattr(type(store.storage), "INTERMEDIATE_BATCH", 1000)  # several statements per batch
    first = [Metric("PERIODICAL", s, s / 10) for s in range(12_345)]
    store.record_metrics(sid, first)
    store.record_metrics(sid, first[-2345:] + [Metric("PERIODICAL", s, s / 10) for s in range(12_345, 13_000)])
    values = store.storage.get_trial(sid).intermediate_values
    assert len(values) == 13_000 and values[12_999] == 1299.9 and values[0] == 0.0

    # a batch that fails half-way (the database refuses its last row) leaves nothing of itself
    broken = [Metric("PERIODICAL", s, 1.0) for s in range(13_000, 15_000)] + [Metric("PERIODICAL", 2**64, 1.0)]
    with pytest.raises((OverflowError, sa.exc.DBAPIError, optuna.exceptions.StorageInternalError)):
        store.record_metrics(sid, broken)
    assert len(store.storage.get_trial(sid).intermediate_values) == 13_000

    store.finish(sid, TrialStatus.SUCCEEDED, 0.5)
    # A closed trial takes no more (a stop came before its follower's read), and says so.
    assert store.record_metrics(sid, [Metric("PERIODICAL", 20_000, 1.0)]) == [
        "1 intermediate result(s) came after the trial was closed"
    ]
    assert 20_000 not in store.storage.get_trial(sid).intermediate_values
    store.set_status(sid, TrialStatus.RUNNING)  # nothing written: it keeps its outcome
    assert store.trial(sid).status == TrialStatus.SUCCEEDED


@pytest.mark.both_databases
def test_each_result_keeps_the_time_it_first_reached_the_store(store, monkeypatch):
    """Issue 64, 2: MLflow got every step stamped with the trial's launch time (points 1 ms
    apart though reported 1.5 s apart). The store keeps when each step's result came: the
    first reading's time, which a re-read after a restart does not move, a batch in one
    transaction with its values; a batch the database refuses leaves no time either."""
    from trialflow.store import experiment_store as module

    store.open_experiment("stamps")
    sid = ask(store, "stamps", 0, "t0", TPE, SPACE).storage_id
    clock = iter([1_000.0, 1_001.5, 1_003.0])
    monkeypatch.setattr(module.time, "time", lambda: next(clock))
    store.record_metrics(sid, [Metric("PERIODICAL", 0, 0.1), Metric("PERIODICAL", 1, 0.2)])
    store.record_metrics(sid, [Metric("PERIODICAL", 1, 0.2), Metric("PERIODICAL", 2, 0.3)])  # 1 read again
    store.record_metrics(sid, [Metric("PERIODICAL", 3, float("nan")), Metric("FINAL", 0, 0.9)])  # no step kept
    assert store.result_times(sid) == {0: 1_000.0, 1: 1_000.0, 2: 1_001.5}
    assert store.result_times(sid, after_step=0) == {1: 1_000.0, 2: 1_001.5}
    monkeypatch.setattr(module.time, "time", lambda: 2_000.0)
    with pytest.raises((OverflowError, sa.exc.DBAPIError, optuna.exceptions.StorageInternalError)):
        store.record_metrics(sid, [Metric("PERIODICAL", 4, 1.0), Metric("PERIODICAL", 2**64, 1.0)])
    assert 4 not in store.result_times(sid)
    other = ask(store, "stamps", 1, "t1", TPE, SPACE).storage_id
    assert store.result_times(other) == {}  # another trial's steps are its own


@pytest.mark.parametrize("store", ["sqlite", "postgresql"], indirect=True)
def test_a_status_written_while_a_stop_closes_the_trial_never_undoes_the_close(store):
    """A follower writing a trial's status (a restart's WAITING) races a stop closing it: the
    close always stands. The check and the write were two statements, and a close committed
    between them was overwritten (seen under load: a stopped trial left finished but WAITING)."""
    import threading

    store.open_experiment("exp")
    for index in range(20):
        sid = ask(store, "exp", index, f"t{index}", TPE, SPACE).storage_id
        closed = threading.Event()

        def follower(sid: int = sid, closed: threading.Event = closed) -> None:
            while not closed.is_set():
                store.set_status(sid, TrialStatus.WAITING, restarts=[])

        writer = threading.Thread(target=follower)
        writer.start()
        store.close_first(sid, TrialStatus.USER_CANCELED, "stopped by ann")
        closed.set()
        writer.join(10)
        record = store.trial(sid)
        assert record.finished and record.status == TrialStatus.USER_CANCELED, (index, record.status)
