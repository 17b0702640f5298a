"""Shared fixtures. ../shared (NNI's example configs) exists beside a checkout and in CI,
not in a user's clone: tests that need it skip with that reason."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Fixtures several test folders share (real local trials followed by their trigger).
pytest_plugins = [
    "tests.helpers.local_trials",
    "tests.helpers.object_store",
    "tests.helpers.mlflow_server",
    "tests.helpers.timing",  # where the time goes: a table per folder (.test-times.txt)
]


def pytest_configure(config: pytest.Config) -> None:
    from tests.helpers.hosts import install

    install()  # first, while the session has no other thread or process


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the PostgreSQL tests and every test under tests/integration, then groups and
    orders the tests (tests/helpers/parallel.py): alone, the tests that use the session's
    Airflow (``harness``) run last, one after another. Started by its first user and stopped
    only with the session, that Airflow idled beside every test collected after it (its
    scheduler, dag-processor, triggerer and api-server polling on two cores): a `trialflow run`
    test took 101 s alone and 149-192 s in the suite. Under pytest-xdist they form one group,
    run first on a worker of its own, beside the other tests on the other worker."""
    from tests.helpers.parallel import arrange

    integration = ROOT / "tests" / "integration"
    for item in items:
        if _on_postgresql(item):
            item.add_marker(pytest.mark.postgresql)
        if item.path.is_relative_to(integration) and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)  # a conftest's pytestmark marks nothing
    arrange(config, items)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent under `-p no:xdist`
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup`` with the groups of tests/helpers/parallel.py (xdist's own reads
    them from the test ids, where pytest 9.2 no longer keeps them)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from tests.helpers.parallel import GroupScheduling

    return GroupScheduling(config, log)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """The fault suite's figures (issue 16): trials started, finished, lost, duplicated; read
    from the file the fault tests wrote, whichever worker ran them."""
    from tests.helpers.deployment import fault_report

    rows = fault_report()
    if not rows:
        return
    columns = list(rows[0])
    terminalreporter.section("trialflow fault injection (multi-host deployment)")
    terminalreporter.write_line(" | ".join(columns))
    for row in rows:
        terminalreporter.write_line(" | ".join(str(row.get(c, "")) for c in columns))


def _on_postgresql(item: pytest.Item) -> bool:
    """A test that needs the session's PostgreSQL: its fixtures name the server, or it is the
    PostgreSQL case of a test run on both databases (marked ``postgresql``, so that `make
    test-unit` can leave the server out)."""
    names = getattr(item, "fixturenames", ())
    if "postgres_url" in names or "postgres_server" in names:
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(value == "postgresql" for value in params.values() if isinstance(value, str))


# Unit tests import Airflow: give it a private, throwaway home before anything imports it.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="trialflow-test-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# DAG plans (trialflow.authoring.plan) kept for this session only, never in the user's ~/.cache.
os.environ.setdefault("TRIALFLOW_CACHE_DIR", tempfile.mkdtemp(prefix="trialflow-test-plans-"))
# Private Airflows start from this session's migrated database template (trialflow.cli.embedded).
os.environ.setdefault("TRIALFLOW_AIRFLOW_DB_TEMPLATES", tempfile.mkdtemp(prefix="trialflow-test-db-"))
# Each xdist worker's map of test to group, read by the controller's scheduler (tests/helpers/parallel.py).
os.environ.setdefault("TRIALFLOW_XDIST_GROUPS", tempfile.mkdtemp(prefix="trialflow-test-groups-"))
# The fault tests' figures (tests/helpers/deployment.py), one file for every xdist worker.
os.environ.setdefault(
    "TRIALFLOW_FAULT_REPORT", os.path.join(tempfile.mkdtemp(prefix="trialflow-test-faults-"), "faults.jsonl")
)

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TRIALFLOW_SHARED", ROOT.parent / "shared"))
NNI_EXAMPLES = SHARED / "nni-examples" / "examples" / "trials"


@pytest.fixture
def nni_examples() -> Path:
    if not NNI_EXAMPLES.is_dir():
        pytest.skip(
            f"NNI example configs not found at {NNI_EXAMPLES} (../shared is beside a developer "
            "checkout and in CI, not in a user's clone)"
        )
    return NNI_EXAMPLES


@pytest.fixture
def write(tmp_path: Path):
    """write("name.yml", text) -> path, for small config fixtures."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return _write


PYTHON = sys.executable


@pytest.fixture(scope="session")
def postgres_server() -> Iterator:
    """A real PostgreSQL server from Debian's packages on 127.0.0.1 (tests/helpers/postgres.py), for the
    session; tests that restart it (the fault suite) use this, the others ``postgres_url``."""
    from tests.helpers.postgres import PostgresServer, missing_reason

    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    server = PostgresServer.create()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="session")
def postgres_url(postgres_server) -> str:
    return postgres_server.url


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``store`` is SQLite; a test marked ``both_databases`` runs on PostgreSQL as well."""
    if "store" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_databases"):
        metafunc.parametrize("store", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path):
    """An empty experiment store of the test's own: SQLite, or (``both_databases``) a database of
    its own on the session's PostgreSQL. The one store fixture of the suite."""
    from trialflow.store.experiment_store import ExperimentStore, sqlite_url

    if getattr(request, "param", "sqlite") == "sqlite":
        return ExperimentStore(sqlite_url(tmp_path / "store.db"))
    import sqlalchemy as sa

    url = request.getfixturevalue("postgres_url")
    name = f"s{abs(hash(str(tmp_path))) % 10**8}"
    with sa.create_engine(
        url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    ).connect() as c:
        c.execute(sa.text(f"CREATE DATABASE {name}"))
    return ExperimentStore(url.rsplit("/", 1)[0] + f"/{name}")


@pytest.fixture(scope="session")
def ssh_servers() -> Iterator[list]:
    """Two real OpenSSH servers on 127.0.0.1 (different ports, users and home folders)."""
    from tests.helpers import sshd

    if not Path(sshd.SSHD).exists():
        pytest.skip("OpenSSH server not found (Debian package openssh-server; .ci/run installs it)")
    if os.geteuid() != 0:
        pytest.skip("the SSH tests create two local users and need root (as in CI)")
    servers = [sshd.make_server("a"), sshd.make_server("b")]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            sshd.remove(server)


@pytest.fixture(scope="session")
def nni_python() -> str:
    """A separate virtualenv with the real nni==3.0 (built once per machine, then cached)."""
    from tests.helpers.nni_venv import build_nni_venv

    try:
        return str(build_nni_venv())
    except RuntimeError as exc:
        pytest.fail(str(exc))


def _kube_skip_reason() -> str | None:
    from tests.helpers.kube.cluster import missing_reason

    if os.geteuid() != 0:
        return "the test controller runs pods in private mount namespaces (unshare --mount): needs root"
    return missing_reason()


@pytest.fixture(scope="module")
def kube_cluster(tmp_path_factory):
    """A real kube-apiserver + etcd on 127.0.0.1 (tests/helpers/kube/cluster.py), for one test
    module: it starts in about 6 s and, kept for the session, idled at a fifth of a core beside
    every later test (two of them under pytest-xdist, one per worker: 380 s of CPU in a 32-minute
    run, measured 2026-12-06). Four modules use it."""
    from tests.helpers.kube.cluster import KubeCluster

    reason = _kube_skip_reason()
    if reason:
        pytest.skip(reason)
    cluster = KubeCluster(tmp_path_factory.mktemp("kube"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def kube_controller(kube_cluster, tmp_path_factory):
    """The operators' and kubelet's part, played by test code (tests/helpers/kube/controller.py)."""
    from tests.helpers.kube.controller import TestController

    controller = TestController(
        kube_cluster.kubeconfig,
        tmp_path_factory.mktemp("kube-controller"),
        path_prefix=str(Path(sys.executable).parent),
    ).start()
    try:
        yield controller
    finally:
        controller.stop()
    assert controller.running_processes() == 0


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    """A real Airflow (scheduler, triggerer, dag-processor, api-server; LocalExecutor on SQLite)
    on 127.0.0.1, started once per session and stopped by it (tests/helpers/airflow.py)."""
    from tests.helpers.airflow import start_harness

    yield from start_harness(tmp_path_factory)


@pytest.fixture(scope="session")
def nni_folder(tmp_path_factory, nni_python) -> Path:
    """A real NNI 3.0 experiment, run once per session by nnictl (tests/helpers/nni_run.py)."""
    import subprocess
    import warnings

    from tests.helpers.nni_run import missing_reason, run_nni_experiment

    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    try:
        try:
            return run_nni_experiment(tmp_path_factory.mktemp("nni"), nni_python)
        except RuntimeError as exc:
            # NNI's own manager once finished none of its trials in CI (stop 61, logs not kept);
            # it is the input these tests read, not what they test: one more experiment, said aloud.
            warnings.warn(f"NNI's experiment is run again: {str(exc)[:2000]}", stacklevel=1)
            return run_nni_experiment(tmp_path_factory.mktemp("nni"), nni_python)
    except subprocess.CalledProcessError as exc:  # `ip netns` refused (a container without the right)
        pytest.skip(f"a network namespace for NNI could not be made: {exc}")
