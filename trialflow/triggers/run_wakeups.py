"""Wake-ups from a run's trial triggers to the run's watch in the same triggerer.

The watch (trialflow.triggers.watch) asks Airflow for the run's trial task states every few
seconds, and the end step waits for it. Polling faster made every DAG run pay for the asking
(measured, bench/RESULTS.md: the run ended 2-3 s later than without the watch, about 1 s of it
while the trials ran); polling slower made the end step wait for the watch's next pass after
the last trial ended. Here the trial triggers of the run say so the moment they end a task (or
hand it back to a worker), and when that may have been the run's last task the watch passes at
once, counting the tasks this triggerer ended as ended before Airflow's answer shows it (their
events are on their way to the database); a task that ends while others run waits for the poll.

Nothing here is needed for correctness: a watch in another triggerer, or a task that ended on
its worker, is seen at the watch's next pass. Only a run with a watch listening here keeps any
state, and it is dropped when the watch ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from trialflow.runs.reconcile import TASK_ENDED

#: (dag_id, run_id, trial task id) of a run -> its watch's wake-up, while a watch listens here.
_LISTENING: dict[tuple[str, str, str], RunWakeup] = {}


@dataclass
class RunWakeup:
    """What the run's trial triggers told its watch since it last looked."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    #: map index -> the state this triggerer ended the task with ("success", "skipped").
    ended: dict[int, str] = field(default_factory=dict)
    #: map indexes whose tasks a trigger here handed back to a worker (they end there soon).
    handed_back: set[int] = field(default_factory=set)

    async def wait(self, timeout: float) -> bool:
        """Until a trial trigger of the run says something, or ``timeout`` seconds; whether one did."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self.event.clear()
        return True

    def may_end_run(self, states: Mapping[int, str | None]) -> bool:
        """Whether the run may be over now: every task in Airflow's last answer (``states``) had
        ended, or a trial trigger here ended it or handed it back since. Only then is Airflow
        worth asking before the next poll: the answer is every trial task of the run, which the
        triggerer's supervisor loads whole, and a run of 1,000 one-second trials woke its watch
        at nearly every task's end (bench/thousand.py: 64 % of the supervisor's samples with
        the GIL were that answer, py-spy). A task that ends while others still run changes
        nothing the watch decides: the trigger closed its trial in the store itself."""
        return bool(states) and all(
            state in TASK_ENDED or index in self.ended or index in self.handed_back for index, state in states.items()
        )

    def merged(self, states: dict[int, str | None]) -> dict[int, str | None]:
        """Airflow's answer, with the tasks this triggerer ended counted as ended where the
        answer still shows them deferred (their events not yet applied). Once Airflow shows a
        task anything but deferred (ended, or cleared and scheduled again) its answer is the
        truth and the note is dropped, so a later try of the task, deferred again, is not
        taken for the ended one. The tasks handed back are Airflow's to say ended from here on."""
        self.handed_back.clear()
        merged = dict(states)
        for index in list(self.ended):
            if merged.get(index) == "deferred":
                merged[index] = self.ended[index]
            else:
                del self.ended[index]
        return merged


@contextmanager
def listening(dag_id: str, run_id: str, task_id: str) -> Iterator[RunWakeup]:
    """The wake-up of run ``run_id``'s watch while the block runs (one watch per run and task)."""
    key = (dag_id, run_id, task_id)
    wakeup = RunWakeup()
    _LISTENING[key] = wakeup
    try:
        yield wakeup
    finally:
        if _LISTENING.get(key) is wakeup:
            del _LISTENING[key]


def task_ended(dag_id: str, run_id: str, task_id: str, map_index: int, state: str | None) -> None:
    """A trial trigger of the run is done with its task: ``state`` is what it ended the task
    with, or None when a worker resumes the task to end it. Nothing when no watch listens."""
    wakeup = _LISTENING.get((dag_id, run_id, task_id))
    if wakeup is None:
        return
    if state is not None:
        wakeup.ended[map_index] = state
    else:
        wakeup.handed_back.add(map_index)
    wakeup.event.set()
