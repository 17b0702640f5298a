"""A changed trialConcurrency's parse is asked for until the DAG shows it (the DAG side is read
in tests/ui/test_actions.py, against the session's Airflow)."""

from __future__ import annotations

from trialflow.from_airflow.parse_requests import ask_until


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_a_lost_request_is_asked_again_until_the_dag_shows_the_value():
    clock, asked = Clock(), []
    shows_at = 7.0  # the first request was dropped (its file was being parsed); the second lands

    assert ask_until(
        lambda: clock.now >= shows_at,
        lambda: asked.append(clock.now),
        every=3,
        within=90,
        sleep=clock.sleep,
        clock=clock,
    )
    assert asked == [3.0, 6.0] and clock.now == 9.0


def test_a_value_that_never_shows_stops_asking_at_the_bound():
    clock, asked = Clock(), []
    assert not ask_until(
        lambda: False, lambda: asked.append(clock.now), every=3, within=10, sleep=clock.sleep, clock=clock
    )
    assert asked == [3.0, 6.0] and clock.now == 9.0  # no request past the bound


def test_a_check_that_raises_is_not_shown_and_asking_goes_on():
    clock, asked, checks = Clock(), [], iter([RuntimeError("database is locked"), True])

    def shown() -> bool:
        outcome = next(checks)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert ask_until(shown, lambda: asked.append(clock.now), every=3, within=90, sleep=clock.sleep, clock=clock)
    assert asked == [3.0]


def test_shown_at_once_asks_nothing_more():
    clock, asked = Clock(), []
    assert ask_until(lambda: True, lambda: asked.append(1), every=3, within=90, sleep=clock.sleep, clock=clock)
    assert asked == [] and clock.now == 3.0
