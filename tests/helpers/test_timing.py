"""The suite's time table (tests/helpers/timing.py): folders, totals and the slowest test."""

from __future__ import annotations

from types import SimpleNamespace

from tests.helpers.timing import SuiteTimes


def _report(nodeid: str, when: str, duration: float, outcome: str = "passed"):
    return SimpleNamespace(nodeid=nodeid, when=when, duration=duration, outcome=outcome)


def test_each_folder_adds_its_tests_phases_and_names_its_slowest():
    times = SuiteTimes(0)
    for nodeid, setup, call in [
        ("tests/ui/test_pages.py::test_a", 30.0, 5.0),  # a session fixture's setup counts here
        ("tests/ui/test_pages.py::test_b", 0.1, 20.0),
        ("tests/config/test_loader.py::test_c[x]@group", 0.0, 0.5),
        ("tests/test_dag.py::test_d", 0.0, 1.0),
    ]:
        times.pytest_runtest_logreport(_report(nodeid, "setup", setup))
        times.pytest_runtest_logreport(_report(nodeid, "call", call))
        times.pytest_runtest_logreport(_report(nodeid, "teardown", 0.0))
    times.pytest_runtest_logreport(_report("tests/ui/test_pages.py::test_e", "setup", 2.0, "failed"))
    ui = times.folders["tests/ui"]
    assert (ui.tests, round(ui.seconds, 1)) == (3, 57.1)  # an error at setup is a test too
    assert ui.slowest == (35.0, "tests/ui/test_pages.py::test_a")
    assert times.folders["tests/config"].tests == 1 and times.folders["tests"].tests == 1
    table = times.table().splitlines()
    assert table[1].split()[:3] == ["folder", "tests", "seconds"]
    assert table[2].split()[:3] == ["tests/ui", "3", "57"]  # the costliest folder first
    assert "35 s ui/test_pages.py::test_a" in table[2]


def test_the_table_is_rewritten_while_the_session_runs_and_lists_the_slowest_tests(tmp_path, monkeypatch):
    target = tmp_path / "times.txt"
    monkeypatch.setenv("TRIALFLOW_TEST_TIMES", str(target))
    times = SuiteTimes(0)
    times.written -= 3600  # the last write was long ago: the next teardown writes
    for nodeid, call in [("tests/a/test_x.py::test_fast", 0.5), ("tests/b/test_y.py::test_slow", 9.0)]:
        times.pytest_runtest_logreport(_report(nodeid, "call", call))
        times.pytest_runtest_logreport(_report(nodeid, "teardown", 0.0))
    lines = target.read_text().splitlines()  # written without a session's end (a run CI killed)
    slowest = lines[lines.index(next(line for line in lines if "slowest tests" in line)) + 1 :]
    assert [line.split()[1] for line in slowest] == ["tests/a/test_x.py::test_fast"]  # first write
    times.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))
    lines = target.read_text().splitlines()
    slowest = lines[lines.index(next(line for line in lines if "slowest tests" in line)) + 1 :]
    assert [line.split()[1] for line in slowest] == ["tests/b/test_y.py::test_slow", "tests/a/test_x.py::test_fast"]
