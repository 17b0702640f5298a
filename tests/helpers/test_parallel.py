"""The suite's parallel grouping (tests/helpers/parallel.py), run for real: an inner session
with two xdist workers, where the tests that share a costly session fixture must all run on
one worker and that fixture must be set up once. pytest-xdist's own loadgroup passed its
unit tests while, on pytest 9.2, it scheduled every test alone (pytest-xdist#1386)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import os, tempfile
import pytest
os.environ.setdefault("TRIALFLOW_XDIST_GROUPS", tempfile.mkdtemp(prefix="groups-"))
from tests.helpers.parallel import GroupScheduling, arrange

def pytest_collection_modifyitems(config, items):
    arrange(config, items)

def pytest_xdist_make_scheduler(config, log):
    return GroupScheduling(config, log)

@pytest.fixture(scope="session")
def cluster():
    with open(os.environ["SEEN"], "a") as f:
        f.write("setup " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    return "up"
"""

TESTS = """
import json, os, time

def _ran(name):
    with open(os.environ["SEEN"], "a") as f:
        f.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
""" + "".join(  # single tests and the shared fixture's users, interleaved in collection order
    f"\ndef test_{name}({'cluster' if name.startswith('shared') else ''}):\n    time.sleep(0.3); _ran({name!r})\n"
    for name in ("single_a", "shared_1", "single_b", "shared_2", "single_c", "shared_3", "single_d")
)


def test_a_shared_fixtures_tests_run_on_one_worker_and_the_rest_spread(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(TESTS)
    seen = tmp_path / "seen.txt"
    env = {**os.environ, "SEEN": str(seen), "PYTHONPATH": str(ROOT)}
    env.pop("TRIALFLOW_XDIST_GROUPS", None)  # the inner controller makes its own
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"]
        + ["--no-loadscope-reorder", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = seen.read_text().splitlines()
    setups = [line for line in lines if line.startswith("setup ")]
    ran = dict(json.loads(line) for line in lines if not line.startswith("setup "))
    assert len(ran) == 7
    assert len(setups) == 1, lines  # the session fixture is paid once, not per worker
    assert {ran["shared_1"], ran["shared_2"], ran["shared_3"]} == {setups[0].split()[1]}
    singles = {ran[name] for name in ("single_a", "single_b", "single_c", "single_d")}
    assert singles - {ran["shared_1"]}, "the other worker ran single tests beside the group"


def test_in_one_process_the_kube_apiservers_tests_run_side_by_side_and_its_last_is_known():
    """The kube-apiserver stops after its last test (``EarlyStops``): its users must form
    one stretch, the multi-host package whole just before, the Airflow's tests last."""
    from types import SimpleNamespace

    from tests.helpers.parallel import arrange, last_users

    def item(nodeid: str, *fixtures: str) -> SimpleNamespace:
        return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures))

    items = [
        item("tests/cluster/test_faults.py::test_kube", "cluster", "kube_cluster"),
        item("tests/cluster/test_faults.py::test_other", "cluster"),
        item("tests/config/test_a.py::test_a"),
        item("tests/integration/test_x.py::test_x", "harness"),
        item("tests/integration/test_k.py::test_k", "harness", "kube_cluster"),
        item("tests/kube/test_k.py::test_k", "kube_cluster"),
        item("tests/tuning/test_t.py::test_t"),
    ]
    arrange(SimpleNamespace(option=SimpleNamespace(dist="no")), items)
    assert [i.nodeid.split("::")[0].split("/", 1)[1] for i in items] == [
        "config/test_a.py",
        "tuning/test_t.py",
        "cluster/test_faults.py",
        "cluster/test_faults.py",
        "kube/test_k.py",
        "integration/test_k.py",
        "integration/test_x.py",
    ]
    assert last_users(items) == "tests/integration/test_k.py::test_k"
    assert last_users(items[:2]) is None


EARLY_CONFTEST = """
import os
import pytest
from tests.helpers.parallel import EarlyStops, arrange

STOPS = EarlyStops()

def pytest_configure(config):
    config.pluginmanager.register(STOPS, "early-stops")

def pytest_collection_modifyitems(config, items):
    arrange(config, items)

def _said(line):
    with open(os.environ["SEEN"], "a") as f:
        f.write(line + "\\n")

@pytest.fixture(scope="session")
def kube_cluster():
    STOPS.add(lambda: _said("cluster stopped"))
    STOPS.add(lambda: _said("controller stopped"), first=True)
    yield
    _said("fixture ended")

@pytest.fixture(scope="session")
def harness():
    return None
"""

EARLY_TESTS = """
import os

def _said(line):
    with open(os.environ["SEEN"], "a") as f:
        f.write(line + "\\n")

def test_kube_a(kube_cluster): _said("kube_a")
def test_airflow(harness): _said("airflow")
def test_plain(): _said("plain")
def test_kube_b(kube_cluster): _said("kube_b")
def test_kube_deselected(kube_cluster): _said("kube_deselected")
"""


def test_the_kube_apiserver_stops_after_its_last_test_that_runs_not_at_the_sessions_end(tmp_path):
    """A real inner session (tests/helpers/parallel.py's EarlyStops): the stops run after the
    last kube test that is not deselected, controller first, before the Airflow's test."""
    (tmp_path / "conftest.py").write_text(EARLY_CONFTEST)
    (tmp_path / "test_inner.py").write_text(EARLY_TESTS)
    seen = tmp_path / "seen.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "not deselected"]
        + ["--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "SEEN": str(seen), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert seen.read_text().splitlines() == [
        "plain",
        "kube_a",
        "kube_b",
        "controller stopped",
        "cluster stopped",
        "airflow",
        "fixture ended",
    ]
