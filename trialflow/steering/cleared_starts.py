"""A clear's mark for the trial starts still waiting for their turn in the triggerer. No Airflow.

A trial task started in the triggerer waits there for a slot of trialConcurrency
(trialflow.lifecycle.triggered_start). When a person clears it (or its whole run) Airflow
cancels its trigger only at the triggerer's next look, a second or more later; a slot freed in
between (the clear also stops the run's running trials) was handed to the cleared start, which
launched a trial its own task no longer waited for, stopped at once. Clearing a run to resume
it then lost the trials that had not started: measured, two of six USER_CANCELED that never
ran, where started by workers they run after the clear.

So the api-server, as it takes the clear (trialflow.ui.clears), marks the run's cleared map
indexes with the time, and a start that was already waiting then is never handed a slot: its
trigger ends with Airflow's cancel, and the task's new try starts the trial. The mark holds
for HOLD_SECONDS at most, so a new try on a host whose clock is behind the api-server's is
held that long at worst, never for ever.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trialflow.experiment.run_windows import RunWindows

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

#: Experiment attribute holding a run's clears: ``{"<map index>" or "*": when}``.
ATTR_PREFIX = "cleared:"
#: Every trial task of the run (a clear of the whole DAG run).
ALL = "*"
#: Seconds a clear holds back the starts that were waiting when it came.
HOLD_SECONDS = 30.0


def attr_key(run_id: str) -> str:
    return f"{ATTR_PREFIX}{run_id}"


def mark_cleared(
    store: ExperimentStore,
    dag_id: str,
    run_id: str,
    map_indexes: Iterable[int] | None,
    group: str | None,
    at: float | None = None,
) -> int:
    """Mark trial tasks ``map_indexes`` of run ``run_id`` (None: all of them) as cleared at
    ``at``, in each of the DAG's experiments the run drives (with indexes, only the trial tasks'
    group's), one write each however many tasks a clear reset; returns how many experiments
    were marked."""
    from trialflow.experiment import GROUP_ATTR

    when = time.time() if at is None else at
    keys = [ALL] if map_indexes is None else [str(int(i)) for i in map_indexes]
    marked = 0
    for experiment_id in store.experiments_with_attr("dag_id", dag_id):
        if map_indexes is not None and store.experiment_attr(experiment_id, GROUP_ATTR) != group:
            continue
        if not keys or not RunWindows(store, experiment_id).has(run_id):
            continue
        marks = read_marks(store, experiment_id, run_id)
        marks.update(dict.fromkeys(keys, when))
        store.set_experiment_attrs(experiment_id, {attr_key(run_id): marks})
        marked += 1
    return marked


@dataclass(frozen=True)
class ClearMark:
    """One write of a clear: trial tasks ``map_indexes`` of a run's experiment of ``group``
    (the DAG's own experiment: None), or with ``map_indexes`` None, every experiment's tasks of
    the run."""

    dag_id: str
    run_id: str
    group: str | None
    map_indexes: tuple[int, ...] | None


def marks_of(cleared: Iterable[tuple[str, str, int | None, str | None]]) -> list[ClearMark]:
    """The writes a clear of ``(dag_id, run_id, map_index, group)`` tasks needs (map_index None:
    the whole run): one per run and group, however many tasks it reset; a run cleared whole
    needs no write for its single tasks."""
    tasks = list(cleared)
    whole = {(dag_id, run_id) for dag_id, run_id, index, _ in tasks if index is None}
    single: dict[tuple[str, str, str | None], list[int]] = {}
    for dag_id, run_id, index, group in tasks:
        if index is not None and (dag_id, run_id) not in whole:
            single.setdefault((dag_id, run_id, group), []).append(index)
    return [ClearMark(dag_id, run_id, None, None) for dag_id, run_id in sorted(whole)] + [
        ClearMark(dag_id, run_id, group, tuple(indexes)) for (dag_id, run_id, group), indexes in single.items()
    ]


def read_marks(store: ExperimentStore, experiment_id: str, run_id: str) -> dict[str, float]:
    """The run's clears (one statement: the start's look reads it each time)."""
    raw = store.experiment_attr(experiment_id, attr_key(run_id))
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def held(marks: Mapping[str, float], waiting_since: Mapping[int, float], now: float) -> set[int]:
    """The waiting starts a clear holds back: those waiting since before a clear of their
    index (or of the run) that is under HOLD_SECONDS old."""
    out = set()
    for index, since in waiting_since.items():
        for key in (str(index), ALL):
            at = marks.get(key)
            if at is not None and since <= at and now - at < HOLD_SECONDS:
                out.add(index)
    return out
