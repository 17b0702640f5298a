"""When a private Airflow's running component counts as hung (trialflow.cli.embedded_hangs):
Airflow's health read defensively, and a streak of unhealthy looks as long as the limit."""

from __future__ import annotations

import pytest

from trialflow.cli.embedded_hangs import HangWatch, unhealthy


def _health(database: str = "healthy", **components: str | None) -> dict:
    answer: dict = {"metadatabase": {"status": database}}
    for key, status in components.items():
        answer[key] = {"status": status, f"latest_{key}_heartbeat": "2026-12-07T20:21:30+00:00"}
    return answer


def test_airflows_health_names_the_unhealthy_components():
    health = _health(scheduler="healthy", triggerer="unhealthy", dag_processor="unhealthy")
    assert unhealthy(health) == {"triggerer", "dag-processor"}
    assert unhealthy(_health(scheduler="healthy", triggerer=None, dag_processor="healthy")) == set()  # never started


@pytest.mark.parametrize(
    "answer",
    [
        _health("unhealthy", scheduler="unhealthy", triggerer="unhealthy"),  # the database away: says nothing
        {"triggerer": {"status": "unhealthy"}},  # no database status
        ["triggerer"],
        "unhealthy",
        None,
        {"metadatabase": "healthy", "triggerer": "unhealthy"},
        {"metadatabase": {"status": "healthy"}, "triggerer": ["unhealthy"], "api-server": {"status": "unhealthy"}},
    ],
)
def test_an_answer_that_is_not_airflows_health_names_none(answer):
    assert unhealthy(answer) == set()


def test_a_component_unhealthy_in_every_look_for_the_limit_is_hung_once():
    watch = HangWatch(limit=120.0)
    assert watch.look({"triggerer"}, 0.0) == []
    assert watch.look({"triggerer"}, 60.0) == []
    assert watch.look({"triggerer"}, 119.9) == []
    assert watch.look({"triggerer", "scheduler"}, 120.0) == ["triggerer"]  # the scheduler's streak began now
    assert watch.look({"triggerer", "scheduler"}, 130.0) == []  # started again: a new streak
    assert watch.look({"triggerer", "scheduler"}, 180.0) == []
    assert watch.look({"triggerer", "scheduler"}, 240.0) == ["scheduler"]
    assert watch.look({"scheduler", "triggerer"}, 250.0) == ["triggerer"]


def test_a_healthy_look_ends_a_streak():
    watch = HangWatch(limit=120.0)
    assert watch.look({"triggerer"}, 0.0) == []
    assert watch.look(set(), 60.0) == []  # it heartbeat meanwhile
    assert watch.look({"triggerer"}, 100.0) == []
    assert watch.look({"triggerer"}, 160.0) == []
    assert watch.look({"triggerer"}, 219.9) == []
    assert watch.look({"triggerer"}, 220.0) == ["triggerer"]


def test_components_hung_together_are_named_in_a_stable_order():
    watch = HangWatch(limit=1.0)
    watch.look({"triggerer", "dag-processor", "scheduler"}, 0.0)
    assert watch.look({"triggerer", "dag-processor", "scheduler"}, 1.0) == ["dag-processor", "scheduler", "triggerer"]


def test_a_gap_between_looks_starts_every_streak_again():
    """Nothing was seen between two looks far apart (no call looked, or the api-server did not
    answer): the component may have heartbeat meanwhile, so its streak starts again."""
    watch = HangWatch(limit=120.0, max_gap=60.0)
    assert watch.look({"triggerer"}, 0.0) == []
    assert watch.look({"triggerer"}, 60.0) == []
    assert watch.look({"triggerer"}, 200.0) == []  # 140 s unseen: a new streak from here
    assert watch.look({"triggerer"}, 250.0) == []
    assert watch.look({"triggerer"}, 310.0) == []
    assert watch.look({"triggerer"}, 320.0) == ["triggerer"]
