"""A trial started where its task waits, not in a worker: its turn, then its start. No Airflow.

A trial task that starts in the triggerer (trialflow.triggers.trial_start) runs the same start
as a worker's (trialflow.lifecycle.trial_lifecycle.start_trial: admission, the ask, the
launch), in a thread, once the run has a free slot of trialConcurrency
(trialflow.lifecycle.start_slots: Airflow holds no limit over such tasks). While it waits it holds
nothing but a coroutine: no worker, no process. What decides lives here; the trigger only
turns the outcome into Airflow's events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from trialflow.blocking import in_start_thread, in_thread
from trialflow.lifecycle import start_slots
from trialflow.lifecycle.trial_lifecycle import StartedTrial, TrialNotStarted, TrialWaits
from trialflow.steering import cleared_starts
from trialflow.store.concurrency_changes import limits_key, read_concurrency

if TYPE_CHECKING:
    from trialflow.experiment import Experiment
    from trialflow.store.experiment_store import ExperimentStore

log = logging.getLogger(__name__)

#: Seconds between looks for a free slot (a trial ends, or a person raises trialConcurrency).
SLOT_POLL_INTERVAL = 0.5
#: Seconds between asks of a trial that waits for its generation or its advisor.
WAIT_INTERVAL = 5.0


class StartSuperseded(Exception):
    """Another start of the same trial task, of a later try, waits in this process: this one
    ends without a turn.

    Airflow 3.3 can run a trigger of a try that is over beside the try that replaced it: when a
    trigger's last event and a clear of its task cross (the event is dropped, the cleared task
    instance keeps the trigger's id while its state is empty, and Airflow's clean-up, which
    compares ``state != 'deferred'``, skips an empty state), the triggerer starts that trigger
    again, with the old try, next to the new try's trigger (seen in a full run: both waited for
    trial 0's turn, the old one took it and the new one waited forever). Of two waiting starts
    of one trial the later try is the task's; what the other yields reaches no task instance."""


def concurrency(experiment: Experiment, store: ExperimentStore, dag_id: str, group: str | None) -> int:
    """trialConcurrency now: as a person changed it for the running experiment, else the config's."""
    changed = read_concurrency(store.engine, limits_key(dag_id, group))
    return changed if changed is not None else int(experiment.config.trial_concurrency)


class Turns:
    """The starts of one run waiting in this process (one triggerer), and the one look that
    hands them slots: every SLOT_POLL_INTERVAL, or at once when a trial of the run ends here
    (``poke``), one read of the run's trials and one compare-and-set for all of them, lowest
    index first. A thousand waiting starts cost the store what one does."""

    def __init__(
        self,
        experiment: Experiment,
        store: ExperimentStore,
        run_id: str,
        limit: Callable[[], int],
        poll_interval: float,
    ):
        self.experiment, self.store, self.run_id = experiment, store, run_id
        self.limit, self.poll_interval = limit, poll_interval
        self.waiting: dict[int, asyncio.Future[None]] = {}
        #: When each waiting start began waiting (a clear after it holds it back: cleared_starts).
        self.since: dict[int, float] = {}
        #: The try of the task each waiting start belongs to (see StartSuperseded).
        self.attempts: dict[int, int] = {}
        self.looking: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()

    async def turn(self, index: int, attempt: int = 0) -> None:
        """Return once trial ``index``'s start holds a slot. ``attempt``: the try of the task
        starting it; of two starts of one index waiting here, the earlier try raises
        StartSuperseded, and of two of the same try the one that waited first (a trial is
        started by one start at a time, and none waits forever)."""
        earlier = self.waiting.get(index)
        if earlier is not None and not earlier.done():
            if self.attempts.get(index, 0) > attempt:
                raise StartSuperseded(f"try {self.attempts[index]} of its task waits for trial {index}'s turn")
            earlier.set_exception(StartSuperseded(f"try {attempt} of its task waits for trial {index}'s turn"))
        granted = asyncio.get_running_loop().create_future()
        self.waiting[index] = granted
        self.since[index] = time.time()
        self.attempts[index] = attempt
        if self.looking is None or self.looking.done():
            self.looking = asyncio.ensure_future(self._look())
        self.wake.set()
        try:
            await granted
        finally:
            if self.waiting.get(index) is granted:
                del self.waiting[index]
                self.since.pop(index, None)
                self.attempts.pop(index, None)

    async def _look(self) -> None:
        experiment_id = self.experiment.experiment_id
        while self.waiting:
            self.wake.clear()
            try:
                window = await in_thread(self.experiment.window, self.store, self.run_id)
                allowed = await in_thread(self.limit)
                marks = await in_thread(cleared_starts.read_marks, self.store, experiment_id, self.run_id)
                held = cleared_starts.held(marks, dict(self.since), time.time())  # Airflow cancels them
                indexes = sorted(i for i in self.waiting if i not in held)
                granted = await in_thread(
                    start_slots.claim_many, self.store, experiment_id, self.run_id, window, indexes, allowed
                )
            except Exception as exc:  # the store busy or away: look again, the starts wait
                log.warning("run %s: looking for free trial slots failed: %s", self.run_id, exc)
                granted = []
            for index in granted:
                future = self.waiting.pop(index, None)
                self.since.pop(index, None)
                self.attempts.pop(index, None)
                if future is not None and not future.done():
                    future.set_result(None)
                else:  # its start was stopped while the look took its slot: nothing will ask
                    await in_thread(start_slots.release, self.store, experiment_id, self.run_id, index)
            if self.waiting:
                try:
                    await asyncio.wait_for(self.wake.wait(), self.poll_interval)
                except TimeoutError:
                    pass


#: The runs' waiting starts in this process, by event loop, store, experiment and run.
_TURNS: dict[tuple[int, str, str, str], Turns] = {}


def turns_of(
    experiment: Experiment, store: ExperimentStore, run_id: str, limit: Callable[[], int], poll_interval: float
) -> Turns:
    for stale in [k for k, t in _TURNS.items() if not t.waiting and (t.looking is None or t.looking.done())]:
        del _TURNS[stale]  # runs with no start waiting here (a later start makes its own again)
    key = (id(asyncio.get_running_loop()), repr(store), experiment.experiment_id, run_id)
    turns = _TURNS.get(key)
    if turns is None:
        turns = _TURNS[key] = Turns(experiment, store, run_id, limit, poll_interval)
    return turns


def poke(experiment_id: str, run_id: str) -> None:
    """A trial of the run ended here: its waiting starts look for a slot now, not at the next look."""
    loop = id(asyncio.get_running_loop())
    for (at, _, experiment, run), turns in list(_TURNS.items()):
        if at == loop and experiment == experiment_id and run == run_id:
            turns.wake.set()


async def start_in_turn(
    experiment: Experiment,
    store: ExperimentStore,
    run_id: str,
    map_index: int,
    limit: Callable[[], int],
    start: Callable[[], StartedTrial],
    poll_interval: float = SLOT_POLL_INTERVAL,
    wait_interval: float = WAIT_INTERVAL,
    launching: Callable[[asyncio.Future[StartedTrial]], None] | None = None,
    attempt: int = 0,
) -> StartedTrial:
    """Wait for a slot of ``limit()`` (read at each look, in a thread), then ``start()`` in a
    thread. The waiting starts of a run in this process share one look (:class:`Turns`).

    A run that no longer starts trials (stopped, past its deadline, no such index) needs no
    slot: ``start()`` says why (TrialNotStarted, TrialCannotRun). A trial that waits (PBT's
    generation, an advisor) gives its slot back and asks again after ``wait_interval``; so does
    one not started. A trial asked holds its slot by itself (trialflow.lifecycle.start_slots).
    Raises what ``start()`` raises, but TrialWaits.

    ``launching`` is handed each start's future as it begins: a thread cannot be interrupted,
    so whoever stops the task waits for that start to end and stops what it launched, where
    a start still waiting for its slot is simply cancelled (nothing was asked or launched).
    ``attempt``: the try of the task starting it (StartSuperseded)."""
    while True:
        window = await in_thread(experiment.window, store, run_id)
        index = window.trial_index(map_index)
        if index is None or window.over or window.expired():
            return await _started(start, launching)
        await turns_of(experiment, store, run_id, limit, poll_interval).turn(index, attempt)
        try:
            return await _started(start, launching)
        except (TrialWaits, TrialNotStarted) as exc:
            # Nothing was asked: the slot goes back at once. A start that asked keeps its
            # slot's entry until a claim sees its trial (see start_slots: given back before,
            # a claim that read the trials just before the ask would count it nowhere).
            await in_thread(start_slots.release, store, experiment.experiment_id, run_id, index)
            if isinstance(exc, TrialNotStarted):
                raise
        await asyncio.sleep(wait_interval)


async def _started(
    start: Callable[[], StartedTrial], launching: Callable[[asyncio.Future[StartedTrial]], None] | None
) -> StartedTrial:
    future: asyncio.Future[StartedTrial] = asyncio.ensure_future(in_start_thread(start))
    if launching is not None:
        launching(future)
    return await asyncio.shield(future)  # a cancelled waiter leaves the start to end (see launching)
