"""TrialStartTrigger's rules of its own: where it finds the operator's arguments, when its
"submitted" line is written (the scheduler and the triggerer run it end to end in
tests/integration/test_triggered_starts.py)."""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace
from typing import Any

from trialflow.triggers import trial_start
from trialflow.triggers.trial_start import TrialStartTrigger, operator_argument


def test_a_mapped_tasks_arguments_are_its_partial_ones_and_a_plain_tasks_its_attributes():
    mapped = SimpleNamespace(partial_kwargs={"config_path": "/e/config.yml"}, config_path="not this")
    plain = SimpleNamespace(config_path="/p/config.yml")
    assert operator_argument(mapped, "config_path") == "/e/config.yml"
    assert operator_argument(mapped, "poll_interval", 1.0) == 1.0  # not given: the operator's default
    assert operator_argument(plain, "config_path") == "/p/config.yml"
    assert operator_argument(plain, "store_conn_id", "trialflow_default") == "trialflow_default"


def test_it_serializes_to_what_airflow_recreates_it_from():
    path, kwargs = TrialStartTrigger().serialize()
    assert path == "trialflow.triggers.trial_start.TrialStartTrigger" and kwargs == {}
    assert isinstance(TrialStartTrigger(**kwargs), TrialStartTrigger)


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.lines.append(message % args)


def _started() -> Any:
    return SimpleNamespace(spec=SimpleNamespace(trial_id="e-0003", parameters={"x": 0.5}))


def test_the_submitted_line_rides_on_the_trials_end_or_comes_after_its_wait(monkeypatch):
    monkeypatch.setattr(trial_start, "SUBMITTED_LINE_WAIT", 0.2)

    async def ended_first() -> list[str]:
        log = _Log()
        line = trial_start._SubmittedLine(log, _started())
        await asyncio.sleep(0.05)
        assert log.lines == []  # a short trial's line waits for its end
        line.write()  # its first event
        line.write()  # and the finally after it: once
        await asyncio.sleep(0.3)  # the timer was cancelled
        return log.lines

    async def long_trial() -> list[str]:
        log = _Log()
        line = trial_start._SubmittedLine(log, _started())
        await asyncio.sleep(0.4)
        written = list(log.lines)  # a long trial's line comes after the wait, while it runs
        line.write()
        return written + log.lines[len(written) :]

    for lines in (asyncio.run(ended_first()), asyncio.run(long_trial())):
        assert len(lines) == 1, lines
        assert re.fullmatch(r"Trial e-0003 submitted at \d\d:\d\d:\d\d UTC with parameters \{'x': 0.5\}", lines[0])


def test_a_start_superseded_by_a_later_try_ends_with_an_error_that_names_it_and_launches_nothing(monkeypatch):
    """Airflow may run an earlier try's trigger again beside the task's new try
    (trialflow.lifecycle.triggered_start.StartSuperseded): it ends at once, its event says why
    (Airflow drops it: no task instance waits on that trigger) and its on_kill stops nothing."""
    from trialflow.lifecycle.triggered_start import StartSuperseded

    async def superseded(launching: Any) -> Any:
        raise StartSuperseded("try 2 of its task waits for trial 1's turn")

    prepared = SimpleNamespace(start_in_turn=superseded, end_task=True)
    trigger = TrialStartTrigger()
    trigger.task_instance = SimpleNamespace(
        task_id="trial", map_index=1, try_number=1, run_id="r1", get_template_context=lambda: {}
    )
    monkeypatch.setattr(TrialStartTrigger, "_prepare", lambda self, context: prepared)
    log = _Log()
    monkeypatch.setattr(TrialStartTrigger, "log", log, raising=False)

    async def scenario() -> list[Any]:
        events = [event async for event in trigger.run()]
        await trigger._stop()  # what on_kill does: nothing was launched, nothing to stop
        return events

    (event,) = asyncio.run(scenario())
    assert event.payload == {
        "status": "ERROR",
        "message": "another start of this trial task is under way: try 2 of its task waits for trial 1's turn",
    }
    assert log.lines == ["Not starting trial 1 of try 1: try 2 of its task waits for trial 1's turn"]
    assert trigger._launching is None and trigger._follow is None
