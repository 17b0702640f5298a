"""Trials reconciled with their tasks: whoever can see both sides closes the gap. No Airflow.

Airflow (the trial's task instance) and the store (the trial) each hold a trial's life, and the
events that keep them together can be missed at any instant: measured, a task marked failed
while it hands over from its worker to the triggerer reaches neither ``on_kill`` (the worker
has stopped following, the trigger never starts), and the trial then ran to its end while the
store said RUNNING forever. So, as a Kubernetes controller does, the state is also compared,
level-triggered: given what Airflow says of each trial task of a DAG run, a trial the store
still holds as running whose task has ended (failed, success, skipped, removed...) has nothing
following it, and is stopped through its platform and closed USER_CANCELED with what was seen.

The rule is one pure function (:func:`orphan_reason`); :func:`reconcile_run` applies it to one
run's trials. It is idempotent and safe when two callers act at once (the store's close keeps
the first outcome; a second platform stop of an ended job does nothing), so the end step, the
run's watch and anything else may call it whenever they like. A task that is still alive
(queued, running, deferred, up for retry) is left alone: it follows the trial, or its retry
re-attaches to it.

The store is also compared with the platforms: a stop closes its trial first and then stops
its job, and a stop that died between the two left its note (trialflow.experiment.job_stops);
:func:`finish_job_stops` stops those jobs, so a trial the store calls stopped has no job left
running on its platform.

Asking Airflow is the caller's part (the Airflow layer passes task states in); nothing here
imports Airflow.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optuna.exceptions import UpdateFinishedTrialError

from trialflow import steering
from trialflow.config.registry import is_host_bound
from trialflow.experiment import job_stops
from trialflow.experiment.job_stops import JOB_STOP_GRACE
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import Connections, TrialStatus
from trialflow.platforms.hosts import TrialOnAnotherHost, check_host
from trialflow.tuning.pbt import UNASKED_ATTR

if TYPE_CHECKING:
    from trialflow.experiment import Experiment
    from trialflow.store.experiment_store import ExperimentStore, TrialRecord

log = logging.getLogger(__name__)

#: Task instance states after which nothing follows the trial: no try of the task runs now or
#: later (a person who clears it makes a new try, which re-attaches to the trial).
TASK_ENDED = frozenset({"success", "failed", "skipped", "removed", "upstream_failed"})
#: Task instance states in which a try follows the trial, or will and re-attaches to it.
TASK_ALIVE = frozenset(
    {"scheduled", "queued", "running", "deferred", "up_for_retry", "up_for_reschedule", "restarting", "awaiting_input"}
)
#: Task instance states of a try that follows its trial now. The run's last wave: every trial
#: task not ended is in one of these (none waits to start).
TASK_FOLLOWING = frozenset({"running", "deferred"})
#: The first pause before asking Airflow again once the store says the last wave's trials ended
#: (their tasks end a moment after: the worker reports, the process exits); it doubles up to the
#: watch's poll while Airflow still says otherwise (a task that outlives its trial is asked about
#: less and less often, never in a tight loop).
EARLY_ASK_FIRST = 0.1
#: Seconds between two looks at the store while a watch waits for its next poll (the look
#: reads the store only in the run's last wave: see RunWatch.ask_early).
STORE_LOOK = 0.25
#: Seconds a watch waits, once every trial task has ended, for trials it cannot stop itself (a
#: local trial of another host) before it lets the run end.
LEFT_GRACE = 120.0
#: Seconds between two looks for stops left half done (trialflow.experiment.job_stops).
JOB_STOP_LOOK = 5.0
#: Who the history names for what reconciliation did.
RECONCILER = "trialflow"


def orphan_reason(task_state: str | None, *, run_over: bool, started: bool = True) -> str | None:
    """Why a trial the store still holds as running must be stopped now, or None to leave it.

    | task state                         | run over | verdict                               |
    |------------------------------------|----------|---------------------------------------|
    | ended (success, failed, skipped...)| any      | stop: "its task is <state>"           |
    | alive (queued, running, deferred...)| no      | leave: it follows or will re-attach   |
    | alive                              | yes      | stop: the run is over                 |
    | unknown (no answer, no such task)  | no       | leave: nothing is known yet           |
    | unknown                            | yes      | stop: the run is over                 |

    ``run_over``: the caller knows no task of the run follows its trials any more (the end step,
    which runs once every trial task has ended; a DAG run marked failed or success).
    ``started``: a job of the trial was submitted (it has a handle); one that never was did not
    run, and the verdict says so instead of "still ran" (the trial is closed FAILED, not
    cancelled: see :func:`outcome_of`)."""
    if task_state in TASK_ENDED:
        what = f"its task is {task_state}"
    elif run_over:
        what = "its DAG run is over"
    else:
        return None
    if not started:
        return f"{what} and no job of the trial ever started (reconciled by trialflow)"
    return f"{what} while the trial still ran (reconciled by trialflow)"


def outcome_of(started: bool) -> TrialStatus:
    """How the reconciler closes a trial: a job it stopped was cancelled (USER_CANCELED: a person
    or a run ended it); a trial whose job never started did not run at all, and a status that
    says "cancelled" would say something that did not happen: it failed to start (FAILED)."""
    return TrialStatus.USER_CANCELED if started else TrialStatus.FAILED


#: Seconds a trial task must have been seen ended before a watch that runs beside the trials
#: stops its trial: the task's own on_kill (a person's click) usually does it within a second or
#: two, and says better what happened ("its task was marked failed"). Airflow SIGKILLs a
#: worker's task 5 s after its SIGTERM, so an on_kill that has not acted by then never will.
ON_KILL_GRACE = 6.0


def overdue(
    states: Mapping[int, str | None], ended_since: dict[int, float], now: float, grace: float = ON_KILL_GRACE
) -> dict[int, str | None]:
    """The task states of those trial tasks that have been seen ended for ``grace`` seconds or
    more; ``ended_since`` (map index -> when first seen ended) is the watch's memory, updated
    here: a task seen alive again (cleared: a new try) is forgotten."""
    for map_index, state in states.items():
        if state in TASK_ENDED:
            ended_since.setdefault(map_index, now)
        else:
            ended_since.pop(map_index, None)
    return {i: states[i] for i, since in ended_since.items() if i in states and now - since >= grace}


#: Seconds a stop request (a kill, a stop, a click recorded by the api-server) may wait for the
#: trial's follower before the run's watch stops the trial itself. A follower acts within a poll
#: or two; a trial whose follower died at the wrong instant (a task cleared as it deferred is
#: terminated without on_kill, and its next try is scheduled seconds later) has none meanwhile.
STOP_REQUEST_GRACE = 2.0


def unanswered(requests: Mapping[int, object], now: float, grace: float = STOP_REQUEST_GRACE) -> dict[int, str]:
    """The stop requests (storage id -> the request as stored) made ``grace`` seconds or more
    before ``now`` (epoch seconds), with their reasons; a request that is no mapping, or whose
    time is not a finite number, counts from now (never acted on early)."""
    due = {}
    for storage_id, request in requests.items():
        if not isinstance(request, Mapping):
            continue
        at = request.get("at")
        if isinstance(at, bool) or not isinstance(at, int | float) or not now - grace >= at > now - 10 * 365 * 86400:
            continue
        due[storage_id] = str(request.get("reason") or "stopped")
    return due


@dataclass(frozen=True)
class Reconciled:
    """One trial reconciliation stopped, and why."""

    trial_index: int
    trial_id: str
    reason: str


def run_trials(experiment: Experiment, store: ExperimentStore, run_id: str) -> dict[int, TrialRecord]:
    """The run's trials the store holds as running, by the map index of their task."""
    window = experiment.window(store, run_id)
    if not window.count:
        return {}
    end = window.first_index + window.count
    return {
        trial.trial_index - window.first_index: trial
        for trial in store.active_trials(experiment.experiment_id)
        if window.first_index <= trial.trial_index < end
    }


async def reconcile_run(
    experiment: Experiment,
    store: ExperimentStore,
    run_id: str,
    task_states: Mapping[int, str | None],
    *,
    run_over: bool = False,
    connections: Connections | None = None,
) -> list[Reconciled]:
    """Stop and close every trial of run ``run_id`` that the store holds as running while its
    task (``task_states``: map index -> Airflow's state) has ended (see :func:`orphan_reason`).

    The stop request is written beside the trial first, so a follower that is still there (on
    the host a local trial lives on, which this caller may not be) cancels it at its next poll;
    then the store is closed and the job stopped on its platform. Returns what it stopped."""
    trials = await asyncio.to_thread(run_trials, experiment, store, run_id)
    if experiment.population_based:
        await asyncio.to_thread(settle_unasked, experiment, store, run_id, task_states)
    chosen = [
        (trial, reason)
        for map_index, trial in sorted(trials.items())
        if (reason := orphan_reason(task_states.get(map_index), run_over=run_over, started=bool(trial.handle)))
        is not None
    ]
    if not chosen:
        return []
    # A stop already asked for (a person's click the api-server recorded, a kill) says what
    # happened better than "its task is failed": the trial closes with its words, as its
    # follower would have (seen under load: a run marked failed was reconciled before the
    # followers acted, and its trials lost "DAG run ... is failed").
    requests = await asyncio.to_thread(store.running_attr, experiment.experiment_id, steering.STOP_REQUEST)
    # (a trial whose job never started keeps the reconciler's words, which say so)
    asked = {
        t.storage_id: r
        for t, _ in chosen
        if t.handle and (r := requested_reason(requests.get(t.storage_id))) is not None
    }
    # At once: each stop may wait out its trial's grace (5 s for one that traps SIGTERM).
    stopped = await asyncio.gather(
        *(
            _stop(experiment, store, t, asked.get(t.storage_id, reason), connections, requested=t.storage_id in asked)
            for t, reason in chosen
        )
    )
    return [
        Reconciled(t.trial_index, t.trial_id, asked.get(t.storage_id, reason))
        for (t, reason), ok in zip(chosen, stopped)
        if ok
    ]


def requested_reason(request: object) -> str | None:
    """The reason of a stop request as stored, None when there is none (not a mapping, or no
    reason in words)."""
    if not isinstance(request, Mapping):
        return None
    reason = request.get("reason")
    return reason if isinstance(reason, str) and reason else None


def settle_unasked(
    experiment: Experiment, store: ExperimentStore, run_id: str, task_states: Mapping[int, str | None]
) -> list[int]:
    """Population Based Training: trial indices of the run whose task ended without asking for
    a trial (a person marked it failed or success while it waited for its generation, or it was
    skipped) are recorded, so the next generation stops waiting for them (its plan leaves them
    out, as NNI's population went on without a failed member's slot). Returns those recorded."""
    ended = sorted(m for m, state in task_states.items() if state in TASK_ENDED)
    if not ended:
        return []
    first = experiment.window(store, run_id).first_index
    recorded = store.experiment_attr(experiment.experiment_id, UNASKED_ATTR) or []
    indices = [
        first + m
        for m in ended
        if first + m not in recorded and store.find_trial_id(experiment.experiment_id, first + m) is None
    ]
    if not indices:
        return []
    store.update_experiment_attr(
        experiment.experiment_id, UNASKED_ATTR, lambda old: sorted(set(old or []) | set(indices))
    )
    return indices


async def answer_stop_requests(
    experiment: Experiment,
    store: ExperimentStore,
    run_id: str,
    now: float,
    connections: Connections | None = None,
) -> list[Reconciled]:
    """Stop the run's trials whose stop request has waited STOP_REQUEST_GRACE seconds or more
    (``now``: epoch seconds) with nothing acting on it, as their follower would; the trial is
    closed with the request's own reason. Idempotent beside a follower that acts meanwhile."""
    requests = await asyncio.to_thread(store.running_attr, experiment.experiment_id, steering.STOP_REQUEST)
    due = unanswered(requests, now)
    if not due:
        return []
    trials = await asyncio.to_thread(run_trials, experiment, store, run_id)
    chosen = [(t, due[t.storage_id]) for _, t in sorted(trials.items()) if t.storage_id in due]
    stopped = await asyncio.gather(
        *(_stop(experiment, store, t, reason, connections, requested=True) for t, reason in chosen)
    )
    return [Reconciled(t.trial_index, t.trial_id, reason) for (t, reason), ok in zip(chosen, stopped) if ok]


async def finish_job_stops(
    experiment: Experiment,
    store: ExperimentStore,
    now: float,
    connections: Connections | None = None,
    grace: float = JOB_STOP_GRACE,
) -> list[Reconciled]:
    """Finish the stops left half done (trialflow.experiment.job_stops): every noted stop older
    than ``grace`` seconds (``now``: epoch seconds) has its job stopped again on its platform
    and its note cleared; one whose trial was never closed (its stopper died before the close)
    is stopped whole. A platform that refuses now leaves the note for the next pass. Returns
    what it finished."""
    due = job_stops.due_stops(await asyncio.to_thread(store.job_stops, experiment.experiment_id), now, grace)
    if not due:
        return []
    done = await asyncio.gather(
        *(_finish_job_stop(experiment, store, storage_id, stop, connections) for storage_id, stop in due.items())
    )
    return [r for r in done if r is not None]


async def _finish_job_stop(
    experiment: Experiment,
    store: ExperimentStore,
    storage_id: int,
    stop: job_stops.JobStop,
    connections: Connections | None,
) -> Reconciled | None:
    record = await asyncio.to_thread(store.trial, storage_id)
    if not record.handle:  # never submitted: there is no job (its close said so)
        await asyncio.to_thread(store.clear_job_stop, storage_id)
        return None
    service_index = int(record.service_index or 0)
    if is_host_bound(experiment.config.platform_names[service_index]):
        try:
            check_host(record.trial_id, record.handle)
        except TrialOnAnotherHost as exc:
            log.warning("trial %s: %s; its stop waits for its host", record.trial_id, exc)
            return None
    platform = experiment.platform(service_index, connections)
    try:
        if record.finished:
            await job_stops.stop_noted(platform, store, record.handle, storage_id, stop)
        else:  # its stopper died between the note and the close: the whole stop
            await trial_lifecycle.stop_trial(platform, store, record.handle, storage_id, stop.reason, stop.status)
    except Exception as exc:  # the platform unreachable now: the note stays for the next pass
        log.warning("trial %s: its job could not be stopped yet (%s); trying again later", record.trial_id, exc)
        return None
    what = f"trial {record.trial_index} ({record.trial_id}): its job was still to be stopped ({stop.reason})"
    log.warning("%s", what)
    await asyncio.to_thread(steering.record_action, store, experiment.experiment_id, RECONCILER, "reconcile", what)
    return Reconciled(record.trial_index, record.trial_id, stop.reason)


async def _stop(
    experiment: Experiment,
    store: ExperimentStore,
    trial: TrialRecord,
    reason: str,
    connections: Connections | None,
    requested: bool = False,
) -> bool:
    """Stop one trial through its platform and close it; ``requested``: its stop request is
    there already (written by whoever asked: it is kept as they wrote it)."""
    if not requested:
        request = steering.Request(RECONCILER, reason, time.time()).to_dict()
        try:
            await asyncio.to_thread(store.set_attrs, trial.storage_id, **{steering.STOP_REQUEST: request})
        except UpdateFinishedTrialError:
            return False  # closed meanwhile (by its follower, or another reconciler): nothing to do
    if not trial.handle:  # its task ended before the job was submitted: there is no job
        stopped = await asyncio.to_thread(store.close_first, trial.storage_id, outcome_of(False), reason)
    else:
        service_index = int(trial.service_index or 0)
        if is_host_bound(experiment.config.platform_names[service_index]):
            try:  # before the store is closed: a closed trial whose job runs on is the gap itself
                check_host(trial.trial_id, trial.handle)
            except TrialOnAnotherHost as exc:
                # A local trial of another host: its follower there acts on the stop request.
                log.warning("trial %s: %s; the stop request waits for its host", trial.trial_id, exc)
                return False
        platform = experiment.platform(service_index, connections)
        stopped = await trial_lifecycle.stop_trial(platform, store, trial.handle, trial.storage_id, reason)
    if stopped:
        log.warning("Trial %s: %s", trial.trial_id, reason)
        what = f"trial {trial.trial_index} ({trial.trial_id}): {reason}"
        await asyncio.to_thread(steering.record_action, store, experiment.experiment_id, RECONCILER, "reconcile", what)
    return stopped


class RunWatch:
    """The reconciler that runs beside one DAG run's trials (the Airflow layer's watch task feeds
    it what Airflow says of the trial tasks, every second or so).

    Each :meth:`observe` stops the trials whose task has been seen ended for ON_KILL_GRACE
    seconds (:func:`overdue`) and, every STOP_REQUEST_GRACE / 2 seconds, those whose stop
    request nothing answered for STOP_REQUEST_GRACE (:func:`answer_stop_requests`), and says
    whether the watch is over: every trial task has ended and no trial of the run is left
    running (closed by its follower, its on_kill or this watch); or LEFT_GRACE seconds have
    passed since with trials it could not stop (a local trial of another host: the end step's
    pass and their stop requests remain)."""

    def __init__(
        self, experiment: Experiment, store: ExperimentStore, run_id: str, connections: Connections | None = None
    ):
        self.experiment, self.store, self.run_id, self.connections = experiment, store, run_id, connections
        self.ended_since: dict[int, float] = {}
        self.all_ended_at: float | None = None
        self.reconciled: list[Reconciled] = []
        self.requests_seen_at: float | None = None
        self.job_stops_seen_at: float | None = None
        #: The last wave's tasks the store said had ended their trials, and when Airflow may be
        #: asked about them early next (see :meth:`ask_early`).
        self._early_for: frozenset[int] = frozenset()
        self._early_gap = EARLY_ASK_FIRST
        self._early_next = 0.0

    async def ask_early(self, states: Mapping[int, str | None], now: float, poll: float) -> bool:
        """True when Airflow is worth asking now, before the next poll: the run is in its last
        wave (``states``, Airflow's last answer, has no task waiting to start) and the store
        says every trial whose task was still alive has ended. A trial that ends on its worker
        wakes no trigger, and without this the run's end waited for the next poll (up to
        ``poll`` seconds: 1.7-2 s of a 5 s warm `trialflow run` on two cores, measured); the
        end step waits for this watch. Asked early again, the pause doubles up to ``poll``."""
        alive = frozenset(i for i, state in states.items() if state not in TASK_ENDED)
        if not alive or any(states[i] not in TASK_FOLLOWING for i in alive):
            return False
        if alive != self._early_for:
            self._early_for, self._early_gap, self._early_next = alive, EARLY_ASK_FIRST, 0.0
        if now < self._early_next:
            return False
        window = await asyncio.to_thread(self.experiment.window, self.store, self.run_id)
        indexes = [window.first_index + i for i in alive]
        if not await asyncio.to_thread(self.store.all_finished, self.experiment.experiment_id, indexes):
            return False
        self._early_next = now + self._early_gap
        self._early_gap = min(self._early_gap * 2, poll)
        return True

    async def observe(self, states: Mapping[int, str | None], now: float) -> bool:
        """One pass with the trial tasks' states (map index -> state); True when the watch is over."""
        due = overdue(states, self.ended_since, now)
        if due:
            self.reconciled += await reconcile_run(
                self.experiment, self.store, self.run_id, due, connections=self.connections
            )
        if self.requests_seen_at is None or now - self.requests_seen_at >= STOP_REQUEST_GRACE / 2:
            self.requests_seen_at = now
            self.reconciled += await answer_stop_requests(
                self.experiment, self.store, self.run_id, time.time(), self.connections
            )
        if self.job_stops_seen_at is None or now - self.job_stops_seen_at >= JOB_STOP_LOOK:
            self.job_stops_seen_at = now
            self.reconciled += await finish_job_stops(self.experiment, self.store, time.time(), self.connections)
        if not states or any(state not in TASK_ENDED for state in states.values()):
            self.all_ended_at = None
            return False
        self.all_ended_at = self.all_ended_at if self.all_ended_at is not None else now
        running = await asyncio.to_thread(run_trials, self.experiment, self.store, self.run_id)
        # a stop half done is a job that may still run: the watch stays for it too
        stopping = {} if running else await asyncio.to_thread(self.store.job_stops, self.experiment.experiment_id)
        if (running or stopping) and now - self.all_ended_at > LEFT_GRACE:
            log.warning(
                "trials %s are still running, %d still stopping; the end step takes over",
                sorted(t.trial_id for t in running.values()),
                len(stopping),
            )
            return True
        return not (running or stopping)
