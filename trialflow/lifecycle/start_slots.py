"""trialConcurrency for trials whose task starts in the triggerer, kept by the store. No Airflow.

A trial task that a worker starts is held by Airflow: trialConcurrency is its mapped task's
``max_active_tis_per_dagrun``, which the scheduler checks before it queues a task. A task that
starts in the triggerer (Airflow's ``start_from_trigger``) goes from scheduled straight to
deferred, every mapped index at once: measured on Airflow 3.3, ten mapped task instances at a
limit of three were all deferred within 30 ms. Nothing of Airflow's holds them, so such a
start first claims a slot here, and waits (in the triggerer, holding no worker) until it has one.

**What holds a slot** is read, not remembered: every trial of the run that was asked and is not
closed (the store's own record of it), plus the starts under way that have not asked yet, kept
in the run's experiment attribute ``start_slots:<run id>`` (trial index -> until when) and
changed by compare-and-set, so two triggerers never give out the same last slot. A start
whose trial is asked counts through its trial from then on: its entry is dropped by the next
claim that sees the trial, never given back before (a claim that read the trials just before
the ask, and the entries just after such a give-back, would count that trial nowhere:
measured, three trials at a limit of two). So a slot frees itself when its trial closes, and
one whose start never asked (its triggerer was killed) after HOLD_SECONDS; a start that waits
or does not start gives its slot back at once (``release``). A claim is idempotent: a start tried again (a restarted
triggerer, a retry) for an index that holds a slot, or whose trial runs already, is let through.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trialflow.experiment.run_windows import RunWindow
    from trialflow.store.experiment_store import ExperimentStore

#: Seconds a start that has not asked yet keeps its slot (an ask, a launch: seconds; a start
#: that died gives it back after this).
HOLD_SECONDS = 120.0


def slots_key(run_id: str) -> str:
    return f"start_slots:{run_id}"


@dataclass(frozen=True)
class SlotDecision:
    """Whether a start may go on, and the starts under way as they are to be stored."""

    granted: bool
    held: dict[int, float]
    #: Slots taken (trials running plus starts under way), this one included when granted.
    taken: int


def held_of(raw: Any) -> dict[int, float]:
    """The stored starts under way; what is not one (another writer's value) is left out."""
    if not isinstance(raw, dict):
        return {}
    held: dict[int, float] = {}
    for key, until in raw.items():
        try:
            held[int(key)] = float(until)
        except (TypeError, ValueError):
            continue
    return held


def _stored(held: Mapping[int, float]) -> dict[str, float]:
    """The starts under way as the store keeps them (what ``held_of`` reads back)."""
    return {str(i): until for i, until in sorted(held.items())}


def decide(held: Mapping[int, float], asked: Mapping[int, bool], index: int, limit: int, now: float) -> SlotDecision:
    """May the start of trial ``index`` go on, with ``limit`` slots, ``asked`` (the run's trials
    asked, by index: closed or not) and ``held`` (its starts under way, by index: until when)?

    Pure: the whole rule, tested exhaustively. A start whose trial was asked needs no slot of
    its own (running, it counts already; closed, its start only reports it)."""
    running = sum(1 for closed in asked.values() if not closed)
    live = {i: until for i, until in held.items() if until > now and i not in asked}
    if index in asked:
        return SlotDecision(True, live, running + len(live))
    if index in live or running + len(live) < limit:
        live[index] = now + HOLD_SECONDS
        return SlotDecision(True, live, running + len(live))
    return SlotDecision(False, live, running + len(live))


def decide_many(
    held: Mapping[int, float], asked: Mapping[int, bool], indexes: list[int], limit: int, now: float
) -> tuple[list[int], dict[int, float]]:
    """``decide`` for each of ``indexes``, lowest first, each seeing the slots the ones before
    it took: those granted, and the starts under way as they are to be stored. The same
    answers as deciding one by one, in one pass: a look of a run with a thousand starts
    waiting decided each against every asked trial, a million steps every look."""
    running = sum(1 for closed in asked.values() if not closed)
    live = {i: until for i, until in held.items() if until > now and i not in asked}
    granted: list[int] = []
    for index in sorted(indexes):
        if index in asked:
            granted.append(index)
        elif index in live or running + len(live) < limit:
            live[index] = now + HOLD_SECONDS  # held (again) from now
            granted.append(index)
    return granted, live


def claim(
    store: ExperimentStore, experiment_id: str, run_id: str, window: RunWindow, index: int, limit: int
) -> SlotDecision:
    """Claim a slot for the start of trial ``index`` of run ``run_id`` (see module): the run's
    asked trials read in one statement, the starts under way changed by compare-and-set."""
    asked = store.asked_between(experiment_id, window.first_index, window.end_index)
    decided: list[SlotDecision] = []

    def change(current: Any) -> dict[str, float]:
        decided[:] = [decide(held_of(current), asked, index, limit, time.time())]
        return _stored(decided[0].held)

    store.update_experiment_attr(experiment_id, slots_key(run_id), change)
    return decided[0]


def claim_many(
    store: ExperimentStore, experiment_id: str, run_id: str, window: RunWindow, indexes: list[int], limit: int
) -> list[int]:
    """Claim slots for the starts of trials ``indexes`` (lowest first) in one compare-and-set:
    those granted. One look of a triggerer serves every start of the run waiting in it.

    It reads of the run's asked trials only what the rule consults: the running ones (the
    count), those at or above the lowest waiting index (each waiting start's own), and, of the
    starts under way below it, those neither running nor seen yet (asked and closed since, or
    not asked): a look of a run with thousands of closed trials reads none of them."""
    first, end = window.first_index, window.end_index
    lowest = min(indexes, default=end)
    seen = store.asked_for_look(experiment_id, first, end, lowest)
    granted: list[int] = []

    def change(current: Any) -> dict[str, float]:
        held = held_of(current)
        unseen = [i for i in held if first <= i < lowest and i not in seen]
        asked = {**seen, **store.asked_at(experiment_id, unseen)} if unseen else seen
        decided, live = decide_many(held, asked, indexes, limit, time.time())
        granted[:] = decided
        return _stored(live)

    store.update_experiment_attr(experiment_id, slots_key(run_id), change)
    return list(granted)


def release(store: ExperimentStore, experiment_id: str, run_id: str, index: int) -> None:
    """Give back the slot of the start of trial ``index``, which asked nothing (it waits for
    its generation, or does not start). Idempotent."""

    def change(current: Any) -> dict[str, float] | None:
        held = held_of(current)
        held.pop(index, None)
        return _stored(held) if held else None

    if store.experiment_attr(experiment_id, slots_key(run_id)) is not None:
        store.update_experiment_attr(experiment_id, slots_key(run_id), change)
