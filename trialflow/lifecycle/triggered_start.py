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
from collections.abc import Callable
from typing import TYPE_CHECKING

from trialflow.lifecycle import start_slots
from trialflow.lifecycle.trial_lifecycle import StartedTrial, TrialNotStarted, TrialWaits
from trialflow.store.concurrency_changes import limits_key, read_concurrency

if TYPE_CHECKING:
    from trialflow.experiment import Experiment
    from trialflow.store.experiment_store import ExperimentStore

#: Seconds between looks for a free slot (a trial ends, or a person raises trialConcurrency).
SLOT_POLL_INTERVAL = 0.5
#: Seconds between asks of a trial that waits for its generation or its advisor.
WAIT_INTERVAL = 5.0


def concurrency(experiment: Experiment, store: ExperimentStore, dag_id: str, group: str | None) -> int:
    """trialConcurrency now: as a person changed it for the running experiment, else the config's."""
    changed = read_concurrency(store.engine, limits_key(dag_id, group))
    return changed if changed is not None else int(experiment.config.trial_concurrency)


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
) -> StartedTrial:
    """Wait for a slot of ``limit()`` (read again at each look, in a thread), then ``start()``
    in a thread.

    A run that no longer starts trials (stopped, past its deadline, no such index) needs no
    slot: ``start()`` says why (TrialNotStarted, TrialCannotRun). A trial that waits (PBT's
    generation, an advisor) gives its slot back and asks again after ``wait_interval``; so does
    one not started. A trial asked holds its slot by itself (trialflow.lifecycle.start_slots).
    Raises what ``start()`` raises, but TrialWaits.

    ``launching`` is handed each start's future as it begins: a thread cannot be interrupted,
    so whoever stops the task waits for that start to end and stops what it launched, where
    a start still waiting for its slot is simply cancelled (nothing was asked or launched)."""
    while True:
        window = await asyncio.to_thread(experiment.window, store, run_id)
        index = window.trial_index(map_index)
        if index is None or window.over or window.expired():
            return await _started(start, launching)
        allowed = await asyncio.to_thread(limit)
        decision = await asyncio.to_thread(
            start_slots.claim, store, experiment.experiment_id, run_id, window, index, allowed
        )
        if not decision.granted:
            await asyncio.sleep(poll_interval)
            continue
        try:
            return await _started(start, launching)
        except (TrialWaits, TrialNotStarted) as exc:
            # Nothing was asked: the slot goes back at once. A start that asked keeps its
            # slot's entry until a claim sees its trial (see start_slots: given back before,
            # a claim that read the trials just before the ask would count it nowhere).
            await asyncio.to_thread(start_slots.release, store, experiment.experiment_id, run_id, index)
            if isinstance(exc, TrialNotStarted):
                raise
        await asyncio.sleep(wait_interval)


async def _started(
    start: Callable[[], StartedTrial], launching: Callable[[asyncio.Future[StartedTrial]], None] | None
) -> StartedTrial:
    future: asyncio.Future[StartedTrial] = asyncio.ensure_future(asyncio.to_thread(start))
    if launching is not None:
        launching(future)
    return await asyncio.shield(future)  # a cancelled waiter leaves the start to end (see launching)
