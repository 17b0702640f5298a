"""Trials reconciled with their tasks (trialflow.runs.reconcile), without Airflow: the rule, and its
application to real trial processes on SQLite and PostgreSQL, with two reconcilers at once."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.stoppers import StopperDies
from trialflow import steering
from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import TrialStatus
from trialflow.platforms.event_loop import run_sync
from trialflow.platforms.local import process_alive
from trialflow.runs import start_run
from trialflow.runs.reconcile import RECONCILER, TASK_ALIVE, TASK_ENDED, orphan_reason, reconcile_run
from trialflow.tuning.asker import ask

#: The trials run on a store on SQLite and on PostgreSQL (``store``, through ``running``).
pytestmark = pytest.mark.both_databases

# A trial that traps SIGTERM to save a checkpoint and never stops for it.
CONFIG = f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {sys.executable} -c "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
trialCodeDirectory: .
trialConcurrency: 3
maxTrialNumber: 3
tuner: {{name: Random}}
trainingService: {{platform: local}}
"""

#: Every state Airflow 3.3 gives a task instance, and no state at all.
ALL_STATES = sorted(TASK_ENDED | TASK_ALIVE) + [None]


@pytest.mark.parametrize("started", [True, False])
@pytest.mark.parametrize("run_over", [False, True])
@pytest.mark.parametrize("state", ALL_STATES)
def test_the_rule_is_total(state, run_over, started):
    reason = orphan_reason(state, run_over=run_over, started=started)
    if state in TASK_ENDED:
        assert reason is not None and f"its task is {state}" in reason
    elif run_over:
        assert reason is not None and "DAG run is over" in reason
    else:
        assert reason is None  # a live task follows the trial, or its retry re-attaches
    if reason is not None:  # what was seen: a trial that never started did not "still run"
        assert ("while the trial still ran" in reason) is started
        assert ("no job of the trial ever started" in reason) is not started


def test_the_ended_and_alive_states_cover_airflows_own():
    from airflow.utils.state import TaskInstanceState

    assert {s.value for s in TaskInstanceState} == TASK_ENDED | TASK_ALIVE


@pytest.fixture
def running(store, tmp_path: Path, monkeypatch):
    """An experiment whose run r1 has three running trials (map indexes 0, 1, 2); a stop's
    grace is 1 s (they ignore SIGTERM)."""
    monkeypatch.setattr("trialflow.platforms.local.KILL_GRACE_SECONDS", 1.0)
    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "ereconcile", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    started = [trial_lifecycle.start_trial(experiment, store, "r1", i) for i in range(3)]
    yield experiment, store, started
    left = [s for s in started if s.handle and process_alive(s.handle["pid"])]  # what the test left running

    async def stop_all() -> None:  # at once: each waits out its 1 s grace
        await asyncio.gather(*(s.platform.cancel(s.handle, TrialStatus.USER_CANCELED, "test over") for s in left))

    run_sync(stop_all())


@pytest.mark.slow
def test_a_trial_whose_task_ended_is_stopped_and_closed_and_the_others_run_on(running):
    experiment, store, started = running
    states = {0: "failed", 1: "running", 2: "deferred"}
    done = asyncio.run(reconcile_run(experiment, store, "r1", states))
    assert [d.trial_index for d in done] == [0]
    assert not process_alive(started[0].handle["pid"])  # SIGTERM ignored: ended by the KILL
    assert all(process_alive(s.handle["pid"]) for s in started[1:])
    record = store.trial(started[0].record.storage_id)
    assert record.status == TrialStatus.USER_CANCELED and "its task is failed" in record.message
    # whoever still follows the trial sees the stop request at its next poll
    assert steering.stop_requested(store, started[0].record.storage_id) == record.message
    assert [h["by"] for h in steering.history(store, "ereconcile") if h["action"] == "reconcile"] == [RECONCILER]
    # a second pass finds nothing to do
    assert asyncio.run(reconcile_run(experiment, store, "r1", states)) == []
    # the run over (the end step): the rest are stopped too
    done = asyncio.run(reconcile_run(experiment, store, "r1", {}, run_over=True))
    assert sorted(d.trial_index for d in done) == [1, 2]
    assert store.active_trials("ereconcile") == []


@pytest.mark.slow
def test_two_reconcilers_at_once_stop_each_trial_once(running):
    experiment, store, started = running
    results: list[list] = []
    barrier = threading.Barrier(2)

    def reconcile() -> None:
        barrier.wait()
        results.append(asyncio.run(reconcile_run(experiment, store, "r1", {0: "success", 1: "skipped", 2: "failed"})))

    threads = [threading.Thread(target=reconcile) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(d.trial_index for r in results for d in r) == [0, 1, 2]  # each closed by one of them
    deadline = time.monotonic() + 15
    while any(process_alive(s.handle["pid"]) for s in started):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert {store.trial(s.record.storage_id).status for s in started} == {TrialStatus.USER_CANCELED}
    lines = [h for h in steering.history(store, "ereconcile") if h["action"] == "reconcile"]
    assert len(lines) == 3


@pytest.mark.slow
def test_a_trial_that_ended_on_its_own_keeps_its_outcome(running):
    experiment, store, started = running
    store.close(started[0].record.storage_id, TrialStatus.SUCCEEDED)
    assert [d.trial_index for d in asyncio.run(reconcile_run(experiment, store, "r1", {0: "failed"}))] == []
    assert store.trial(started[0].record.storage_id).status == TrialStatus.SUCCEEDED


@pytest.mark.slow
def test_another_runs_trials_are_left_alone(running):
    experiment, store, started = running
    assert asyncio.run(reconcile_run(experiment, store, "r2", {0: "failed"}, run_over=True)) == []
    assert all(process_alive(s.handle["pid"]) for s in started)


def test_a_watch_waits_for_on_kill_before_it_acts():
    """A task seen ended is handed to the reconciler only after ON_KILL_GRACE seconds (its own
    on_kill usually stops the trial first); one seen alive again (cleared) is forgotten."""
    from trialflow.runs.reconcile import ON_KILL_GRACE, overdue

    seen: dict[int, float] = {}
    assert overdue({0: "failed", 1: "running"}, seen, 100.0) == {}
    assert overdue({0: "failed", 1: "success"}, seen, 100.0 + ON_KILL_GRACE - 0.1) == {}
    assert overdue({0: "failed", 1: "success"}, seen, 100.0 + ON_KILL_GRACE) == {0: "failed"}
    assert overdue({0: "queued", 1: "success"}, seen, 200.0) == {1: "success"}  # 0 was cleared
    assert overdue({0: "failed", 1: "success"}, seen, 200.0) == {1: "success"}  # 0 starts again


@pytest.mark.slow
def test_the_watch_stops_orphans_after_the_grace_and_ends_when_nothing_runs(running):
    from trialflow.runs.reconcile import ON_KILL_GRACE, RunWatch

    experiment, store, started = running
    watch = RunWatch(experiment, store, "r1")
    t = 1000.0
    assert not asyncio.run(watch.observe({0: "failed", 1: "running", 2: "deferred"}, t))
    assert watch.reconciled == [] and process_alive(started[0].handle["pid"])  # on_kill's turn first
    assert not asyncio.run(watch.observe({0: "failed", 1: "running", 2: "deferred"}, t + ON_KILL_GRACE))
    assert [r.trial_index for r in watch.reconciled] == [0]
    ended = {0: "failed", 1: "success", 2: "skipped"}
    # every task ended, two trials still running in the store: not over until they are closed
    assert not asyncio.run(watch.observe(ended, t + 10))
    assert not asyncio.run(watch.observe(ended, t + 10 + ON_KILL_GRACE - 0.5))
    assert asyncio.run(watch.observe(ended, t + 10 + ON_KILL_GRACE)) is True
    assert sorted(r.trial_index for r in watch.reconciled) == [0, 1, 2]
    assert store.active_trials("ereconcile") == []


@pytest.mark.slow
def test_the_watch_asks_airflow_early_once_the_last_waves_trials_ended_in_the_store(running):
    """A trial that ends on its worker wakes no trigger: the watch looks at the store between
    two polls and asks Airflow early once every trial whose task it last saw alive has ended
    there, again only after a pause that doubles up to the poll."""
    from trialflow.runs.reconcile import EARLY_ASK_FIRST, RunWatch

    experiment, store, started = running
    watch = RunWatch(experiment, store, "r1")
    wave = {0: "running", 1: "deferred", 2: "success"}
    t, poll = 1000.0, 2.0
    assert not asyncio.run(watch.ask_early(wave, t, poll))  # trials 0 and 1 run in the store
    store.close(started[0].record.storage_id, TrialStatus.SUCCEEDED)
    assert not asyncio.run(watch.ask_early(wave, t, poll))  # 1 still runs
    store.close(started[1].record.storage_id, TrialStatus.FAILED)
    # not the last wave: a task waits to start (its trial may not be asked yet)
    for waiting in ("queued", "scheduled", None, "up_for_retry"):
        assert not asyncio.run(watch.ask_early({**wave, 2: waiting}, t, poll))
    assert not asyncio.run(watch.ask_early({0: "success", 1: "failed", 2: "success"}, t, poll))  # nothing alive
    asked = [u for u in (t + k * 0.05 for k in range(200)) if asyncio.run(watch.ask_early(wave, u, poll))]
    gaps = [b - a for a, b in zip(asked, asked[1:], strict=False)]
    wanted = [min(EARLY_ASK_FIRST * 2**k, poll) for k in range(len(gaps))]  # 0.1, 0.2, ... 1.6, 2, 2
    assert asked[0] == t and len(gaps) > 6
    assert all(w - 1e-6 <= g <= w + 0.05 + 1e-6 for g, w in zip(gaps, wanted, strict=True))  # looked every 0.05 s
    # another set of alive tasks starts over with the first pause
    assert asyncio.run(watch.ask_early({0: "running", 1: "success", 2: "success"}, t + 10.01, poll))
    assert asyncio.run(watch.ask_early({0: "running", 1: "success", 2: "success"}, t + 10.01 + EARLY_ASK_FIRST, poll))


@pytest.mark.slow
def test_a_trial_not_asked_yet_is_not_finished_in_the_store(running):
    experiment, store, started = running
    first = experiment.window(store, "r1").first_index
    store.close(started[-1].record.storage_id, TrialStatus.SUCCEEDED)
    # the highest closed, the lower ones still running: not every one has finished
    assert not store.all_finished("ereconcile", [first, first + 1, first + 2])
    assert store.all_finished("ereconcile", [first + 2]) and store.all_finished("ereconcile", [])
    for s in started:
        store.close(s.record.storage_id, TrialStatus.SUCCEEDED)
    assert store.all_finished("ereconcile", [first, first + 1, first + 2])
    assert not store.all_finished("ereconcile", [first, first + 3])  # index 3: no trial yet


@pytest.mark.slow
def test_an_ask_that_died_before_its_claim_is_no_trial_and_is_closed_as_abandoned(store, tmp_path, monkeypatch):
    """Issue 46, 0: a trial task killed between Optuna's commit of its new trial and the claim of
    its trial index left a row no task asked for; the end step's reconciliation took it for
    trial ``number`` and closed it USER_CANCELED (13 rows for 12 trials in the upgrade test)."""
    monkeypatch.setattr("trialflow.platforms.local.KILL_GRACE_SECONDS", 1.0)
    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "eabandoned", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})

    def killed_before_the_claim(*args, **kwargs):
        raise SystemExit("the worker died")

    with monkeypatch.context() as dying:
        dying.setattr(store.storage, "write_params", killed_before_the_claim)
        with pytest.raises(SystemExit):
            trial_lifecycle.start_trial(experiment, store, "r1", 0)  # Optuna's trial number 0
    started = [trial_lifecycle.start_trial(experiment, store, "r1", i) for i in range(3)]  # the retry, then 1, 2
    assert [r.trial_index for r in store.trial_rows("eabandoned")] == [0, 1, 2]
    assert sorted(t.trial_index for t in store.active_trials("eabandoned")) == [0, 1, 2]
    for s in started:
        store.close(s.record.storage_id, TrialStatus.SUCCEEDED)
    ended = {0: "success", 1: "success", 2: "success"}
    done = asyncio.run(reconcile_run(experiment, store, "r1", ended, run_over=True))
    assert done == []  # the dead ask is not taken for trial 0 and closed USER_CANCELED

    async def stop_all() -> None:
        await asyncio.gather(*(s.platform.cancel(s.handle, TrialStatus.USER_CANCELED, "test over") for s in started))

    run_sync(stop_all())
    rows = store.trial_rows("eabandoned")
    assert [(r.trial_index, r.status) for r in rows] == [(i, "SUCCEEDED") for i in range(3)]
    assert store.close_abandoned_asks("eabandoned", older_than=3600) == 0  # too young to be dead
    assert store.close_abandoned_asks("eabandoned", older_than=0) == 1
    assert store.close_abandoned_asks("eabandoned", older_than=0) == 0
    frozen = store.storage.get_all_trials(store.study_id("eabandoned"), deepcopy=False)
    assert [t.state.name for t in frozen if t.user_attrs.get("abandoned_ask")] == ["FAIL"]
    assert len(store.trial_rows("eabandoned")) == 3


@pytest.mark.parametrize(
    ("request_", "due"),
    [
        ({"by": "Airflow", "reason": "stopped from Airflow: its task was cleared", "at": 90.0}, True),
        ({"reason": "killed by ann", "at": 101.0 - 2.0}, True),  # exactly the grace
        ({"reason": "x", "at": 99.5}, False),  # younger than the grace: its follower's turn
        ({"reason": "x", "at": 200.0}, False),  # from the future (another host's clock)
        ({"reason": "x", "at": "100"}, False),
        ({"reason": "x", "at": True}, False),
        ({"reason": "x", "at": float("nan")}, False),
        ({"reason": "x", "at": -1e300}, False),
        ({"reason": "x"}, False),
        ("not a mapping", False),
        (None, False),
    ],
)
def test_a_stop_request_is_answered_by_the_watch_only_after_its_grace(request_, due):
    from trialflow.runs.reconcile import unanswered

    found = unanswered({7: request_}, now=101.0)
    assert (7 in found) is due
    if due:
        assert found[7] == request_.get("reason")


@pytest.mark.slow
def test_the_watch_answers_a_stop_request_that_no_follower_acted_on(running):
    """Issue 46, 1: a task cleared as it deferred was terminated without on_kill, and its next
    try is scheduled seconds later: the api-server's stop request waited with nobody to act on
    it. The watch acts after STOP_REQUEST_GRACE, with the request's own reason; a younger
    request is left to the follower."""
    from trialflow.runs.reconcile import RunWatch

    experiment, store, started = running
    cleared = {"by": "Airflow", "reason": "stopped from Airflow: its task was cleared", "at": time.time() - 3}
    store.set_attrs(started[0].record.storage_id, **{steering.STOP_REQUEST: cleared})
    fresh = {"by": "ann", "reason": "killed by ann", "at": time.time() + 30}
    store.set_attrs(started[1].record.storage_id, **{steering.STOP_REQUEST: fresh})
    watch = RunWatch(experiment, store, "r1")
    alive = {0: "scheduled", 1: "running", 2: "deferred"}  # Airflow says every task is alive
    assert not asyncio.run(watch.observe(alive, 1000.0))
    assert [(r.trial_index, r.reason) for r in watch.reconciled] == [(0, cleared["reason"])]
    assert not process_alive(started[0].handle["pid"])
    assert all(process_alive(s.handle["pid"]) for s in started[1:])
    record = store.trial(started[0].record.storage_id)
    assert (record.status, record.message) == (TrialStatus.USER_CANCELED, cleared["reason"])
    assert store.trial_attr(started[0].record.storage_id, steering.STOP_REQUEST) == cleared  # kept as written
    assert not asyncio.run(watch.observe(alive, 1000.5))  # within half the grace: not read again
    assert len(watch.reconciled) == 1


def test_a_trial_whose_job_never_started_is_closed_failed_saying_so(store, tmp_path):
    """Issue 46, 3: a trial asked for but never submitted (its task failed first: an input the
    command line could not carry) was closed USER_CANCELED, "its task is failed while the trial
    still ran", though nothing ran."""
    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "enever", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    asked = ask(store, "enever", 0, "enever-0000", experiment.algorithm, experiment.space)
    done = asyncio.run(reconcile_run(experiment, store, "r1", {0: "failed"}))
    assert [d.reason for d in done] == [
        "its task is failed and no job of the trial ever started (reconciled by trialflow)"
    ]
    record = store.trial(asked.storage_id)
    assert (record.status, record.message) == (TrialStatus.FAILED, done[0].reason)


def test_a_pbt_member_whose_task_ended_unasked_is_not_waited_for(tmp_path, store):
    """A person marks a waiting second-generation task failed: it never asks, so nothing of it is
    in the store. The watch's reconcile records its index, and the third generation plans from
    the members that ran instead of waiting for ever."""
    from trialflow.trial.protocol import Metric
    from trialflow.tuning.pbt import UNASKED_ATTR, PopulationNotReady

    (tmp_path / "c.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: 'true'\ntrialConcurrency: 2\n"
        "maxTrialNumber: 6\ntuner: {name: PBTTuner, classArgs: {population_size: 2}}\n"
        "trainingService: {platform: local}\n"
    )
    experiment = Experiment(load_config(tmp_path / "c.yml"), "epbtrec", tmp_path / "work")
    start_run(experiment, store, "dag_pr", "r1", {})

    def ran(index: int, value: float) -> None:
        asked = ask(store, "epbtrec", index, f"epbtrec-{index}", experiment.algorithm, experiment.space, None, 0)
        store.record_metrics(asked.storage_id, [Metric("FINAL", 0, value)])
        store.close(asked.storage_id, TrialStatus.SUCCEEDED, None)

    ran(0, 0.5)
    ran(1, 0.7)
    ran(3, 0.9)  # index 2's task was marked failed while it waited: it never asked
    with pytest.raises(PopulationNotReady, match=r"trial indices 2\)"):
        ask(store, "epbtrec", 4, "epbtrec-4", experiment.algorithm, experiment.space, None, 0)
    states = {0: "success", 1: "success", 2: "failed", 3: "success", 4: "up_for_reschedule", 5: "up_for_reschedule"}
    run_sync(reconcile_run(experiment, store, "r1", states))
    assert store.experiment_attr("epbtrec", UNASKED_ATTR) == [2]
    child = ask(store, "epbtrec", 4, "epbtrec-4", experiment.algorithm, experiment.space, None, 0)
    assert child.record.lineage is not None and child.record.lineage.parent_index == 3  # the one that ran
    run_sync(reconcile_run(experiment, store, "r1", states))  # again: nothing more recorded
    assert store.experiment_attr("epbtrec", UNASKED_ATTR) == [2]


@pytest.mark.slow
def test_a_trial_a_person_stopped_closes_with_their_words_when_the_reconciler_acts_first(running):
    """Loaded run 5: a DAG run marked failed was reconciled (the run over) before the trials'
    followers acted on the api-server's stop requests, and a trial closed "its task is failed
    while the trial still ran" instead of what the person did. The request's words stand."""
    experiment, store, started = running
    clicked = {
        "by": "Airflow",
        "reason": "stopped from Airflow: its task was marked failed; DAG run r1 is failed",
        "at": time.time(),
    }
    store.set_attrs(started[0].record.storage_id, **{steering.STOP_REQUEST: clicked})
    done = asyncio.run(reconcile_run(experiment, store, "r1", {0: "failed", 1: "failed"}, run_over=True))
    assert {d.trial_index: d.reason for d in done}[0] == clicked["reason"]
    first, second = (store.trial(s.record.storage_id) for s in started[:2])
    assert (first.status, first.message) == (TrialStatus.USER_CANCELED, clicked["reason"])
    assert store.trial_attr(started[0].record.storage_id, steering.STOP_REQUEST) == clicked  # kept as written
    assert "its task is failed while the trial still ran" in second.message  # nobody asked: the rule's words


def _wait_dead(pid: int, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while process_alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_stop_that_dies_after_the_close_is_finished_by_the_watch(running):
    """The gap CI met on Kubeflow: a trial closed USER_CANCELED whose job ran on. The stop's
    note outlives it; the run's watch stops the real process after the grace, clears the note,
    says so in the history, and ends only then."""
    from trialflow.experiment.job_stops import JOB_STOP_GRACE
    from trialflow.runs.reconcile import JOB_STOP_LOOK, RunWatch, finish_job_stops

    experiment, store, started = running
    dying, sid = started[0], started[0].record.storage_id
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(trial_lifecycle.stop_trial(StopperDies(), store, dying.handle, sid, "its task was marked failed"))
    assert store.trial(sid).status == TrialStatus.USER_CANCELED
    assert process_alive(dying.handle["pid"])  # the gap: closed, and still running
    assert list(store.job_stops("ereconcile")) == [sid]
    # within the grace the note is its stopper's (a stop waits out its trial's own grace)
    assert asyncio.run(finish_job_stops(experiment, store, time.time())) == []
    # a whole stop that completes leaves no note
    assert asyncio.run(
        trial_lifecycle.stop_trial(started[1].platform, store, started[1].handle, started[1].record.storage_id, "x")
    )
    assert list(store.job_stops("ereconcile")) == [sid]
    store.close(started[2].record.storage_id, TrialStatus.SUCCEEDED)  # ended on its own: no note
    watch = RunWatch(experiment, store, "r1")
    ended = {0: "failed", 1: "failed", 2: "success"}
    # every task ended, no trial running in the store, but a stop half done: not over
    assert not asyncio.run(watch.observe(ended, 1000.0))
    assert process_alive(dying.handle["pid"])
    later = time.time() + JOB_STOP_GRACE
    done = asyncio.run(finish_job_stops(experiment, store, later))
    assert [d.trial_index for d in done] == [0]
    _wait_dead(dying.handle["pid"])
    assert store.job_stops("ereconcile") == {}
    record = store.trial(sid)  # the outcome the first stop recorded stands
    assert record.status == TrialStatus.USER_CANCELED and record.message == "its task was marked failed"
    lines = [h for h in steering.history(store, "ereconcile") if h["action"] == "reconcile"]
    assert len(lines) == 1 and "its job was still to be stopped" in lines[0]["detail"], lines
    assert asyncio.run(watch.observe(ended, 1000.0 + JOB_STOP_LOOK)) is True


@pytest.mark.slow
def test_a_stop_that_dies_before_the_close_is_done_whole_from_its_note(running):
    """Noted, then nothing: the trial still runs in the store and on its machine. The note says
    a stop was asked; the reconciler does all of it, with the note's status and words."""
    from trialflow.experiment import job_stops
    from trialflow.runs.reconcile import finish_job_stops

    experiment, store, started = running
    sid = started[1].record.storage_id
    asyncio.run(job_stops.note(store, sid, TrialStatus.EARLY_STOPPED, "the assessor stopped it"))
    assert asyncio.run(finish_job_stops(experiment, store, time.time() + job_stops.JOB_STOP_GRACE))
    _wait_dead(started[1].handle["pid"])
    record = store.trial(sid)
    assert record.status == TrialStatus.EARLY_STOPPED and record.message == "the assessor stopped it"
    assert store.job_stops("ereconcile") == {}
    assert all(process_alive(s.handle["pid"]) for s in (started[0], started[2]))


def test_the_end_step_finishes_a_stop_half_done_at_once(running):
    """The end step (every task ended): the trials still running are stopped, and a stop left
    half done a moment ago has its job stopped at once, not after the watch's grace."""
    from trialflow.runs import end_run

    experiment, store, started = running
    sid = started[2].record.storage_id
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(trial_lifecycle.stop_trial(StopperDies(), store, started[2].handle, sid, "stopped"))
    ended = asyncio.run(end_run(experiment, store, "dag_a", "r1", {}, {0: "failed", 1: "failed", 2: "failed"}))
    assert sorted(r.trial_index for r in ended.reconciled) == [0, 1, 2]
    for s in started:
        _wait_dead(s.handle["pid"])
    assert store.job_stops("ereconcile") == {}
    assert store.trial(sid).message == "stopped"
