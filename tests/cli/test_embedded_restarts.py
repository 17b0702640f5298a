"""The budget of starts again of a private Airflow's components: a few per sliding window, each
component its own."""

from __future__ import annotations

from trialflow.cli.embedded_restarts import RestartBudget


def test_the_limit_holds_within_the_window_and_frees_as_it_slides():
    budget = RestartBudget(limit=3, window=600.0)
    assert [budget.take("scheduler", t) for t in (0.0, 10.0, 20.0, 30.0)] == [True, True, True, False]
    assert budget.used("scheduler") == 3
    assert budget.take("scheduler", 599.9) is False  # the first start is still inside the window
    assert budget.take("scheduler", 600.0) is True  # ... and now it is not
    assert budget.take("scheduler", 600.1) is False
    assert budget.used("scheduler") == 3


def test_components_have_their_own_budgets():
    budget = RestartBudget(limit=1, window=60.0)
    assert budget.take("scheduler", 0.0) is True
    assert budget.take("scheduler", 1.0) is False
    assert budget.take("triggerer", 1.0) is True
    assert budget.used("api-server") == 0


def test_a_refused_start_is_not_counted():
    budget = RestartBudget(limit=2, window=100.0)
    for t in range(50):
        budget.take("dag-processor", float(t))  # a component dying in a loop asks every second
    assert budget.used("dag-processor") == 2
    assert budget.take("dag-processor", 100.0) is True  # freed by time, not by the refusals


def test_the_last_error_is_the_last_line_that_names_one_and_is_bounded():
    from trialflow.cli.embedded_restarts import last_error

    tail = "Traceback (most recent call last):\n  File x\nsqlite3.OperationalError: database is locked\nINFO done\n"
    assert last_error(tail) == "sqlite3.OperationalError: database is locked"
    assert last_error("INFO up\nINFO down\n") == ""
    assert len(last_error("ValueError: " + "x" * 5000)) == 300
