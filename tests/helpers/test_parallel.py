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

import pytest

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


@pytest.mark.slow  # real processes for seconds: make test runs it, the inner loops do not
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


def test_in_one_process_the_airflows_tests_run_last_and_the_rest_keep_their_order():
    """The session's Airflow starts with its first user and idles until the session ends: its
    users run last, one after another; the other tests keep collection order (a module's own
    fixtures, the kube-apiserver among them, end with the module)."""
    from types import SimpleNamespace

    from tests.helpers.parallel import arrange

    def item(nodeid: str, *fixtures: str) -> SimpleNamespace:
        return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures))

    items = [
        item("tests/cluster/test_faults.py::test_kube", "cluster", "kube_cluster"),
        item("tests/config/test_a.py::test_a"),
        item("tests/integration/test_x.py::test_x", "harness"),
        item("tests/integration/test_k.py::test_k", "harness", "kube_cluster"),
        item("tests/kube/test_k.py::test_k", "kube_cluster"),
        item("tests/tuning/test_t.py::test_t"),
    ]
    arrange(SimpleNamespace(option=SimpleNamespace(dist="no")), items)
    assert [i.nodeid.split("::")[0].split("/", 1)[1] for i in items] == [
        "cluster/test_faults.py",
        "config/test_a.py",
        "kube/test_k.py",
        "tuning/test_t.py",
        "integration/test_x.py",
        "integration/test_k.py",
    ]


MODULE_CONFTEST = (
    CONFTEST
    + """
@pytest.fixture(scope="module")
def kube_cluster(request):
    with open(os.environ["SEEN"], "a") as f:
        f.write("up " + request.module.__name__ + " " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    yield
    with open(os.environ["SEEN"], "a") as f:
        f.write("down " + request.module.__name__ + " " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""
)


def _module_tests(prefix: str) -> str:
    return TESTS.split("\ndef test_")[0] + "".join(
        f"\ndef test_{prefix}_{n}({'kube_cluster' if n < 3 else ''}):\n    time.sleep(0.2); _ran('{prefix}_{n}')\n"
        for n in range(5)
    )


@pytest.mark.slow  # real processes for seconds: make test runs it, the inner loops do not
def test_a_module_fixtures_tests_run_on_one_worker_and_it_is_set_up_once_per_module(tmp_path):
    """The kube-apiserver is a module's fixture: under two workers each module using it is one
    group (one worker, one setup, its end with the module's last user), never split in two."""
    (tmp_path / "conftest.py").write_text(MODULE_CONFTEST)
    for prefix in ("first", "second"):
        (tmp_path / f"test_{prefix}.py").write_text(_module_tests(prefix))
    seen = tmp_path / "seen.txt"
    env = {**os.environ, "SEEN": str(seen), "PYTHONPATH": str(ROOT)}
    env.pop("TRIALFLOW_XDIST_GROUPS", None)
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
    ups = [line.split()[1:] for line in lines if line.startswith("up ")]
    downs = [line.split()[1:] for line in lines if line.startswith("down ")]
    ran = dict(json.loads(line) for line in lines if line.startswith("["))
    assert len(ran) == 10
    assert sorted(module for module, _ in ups) == ["test_first", "test_second"], lines  # once each
    assert sorted(ups) == sorted(downs)
    for module, worker in ups:
        prefix = module.removeprefix("test_")
        assert {ran[f"{prefix}_{n}"] for n in range(3)} == {worker}
