"""A multi-host Airflow on one machine: CeleryExecutor, Redis, PostgreSQL, workers as hosts.

PostgreSQL holds Airflow's metadata database and the experiment store, Redis (Debian's
redis-server) is the Celery broker, and the scheduler, dag-processor, triggerer and
api-server run as the embedded Airflow's components do. Each Celery worker is a "host" of
its own: its own UTS namespace (hostname), PID namespace (it sees only its own processes;
when it dies, everything it started dies with it, as on a machine that goes down) and mount
namespace with an empty tmpfs over the experiments' working folder (its own disk). The
network stays the machine's, and every server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from trialflow.cli.embedded import EmbeddedAirflow, free_port

#: Where the fault tests' figures go (one JSON line a scenario), printed at the end of the
#: session by tests/conftest.py: a file, since under pytest-xdist the tests run in a worker
#: process and the summary is printed by another (the variable is set before the workers start).
FAULT_REPORT_ENV = "TRIALFLOW_FAULT_REPORT"


def report_fault(row: dict[str, object]) -> None:
    """One fault scenario's figures (trials started, finished, lost, duplicated), for the report."""
    target = os.environ.get(FAULT_REPORT_ENV)
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


def fault_report() -> list[dict[str, object]]:
    target = os.environ.get(FAULT_REPORT_ENV)
    if not target or not os.path.exists(target):
        return []
    with open(target, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


#: The hostname of the remote platform's machine (an SSH server on a host of its own).
SSH_MACHINE = "ssh-machine"
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
# Inside the worker's namespaces: its hostname, its own empty working folder, then the worker.
_HOST_SCRIPT = 'hostname "$1" && mount -t tmpfs -o size=512m trialflow-host "$2" && shift 2 && exec "$@"'


def missing_reason() -> str | None:
    """Why a deployment cannot start here (None: it can)."""
    if os.geteuid() != 0:
        return "the workers run in their own namespaces (unshare): needs root"
    if not Path(REDIS).exists():
        return "redis-server not found (Debian package redis-server; .ci/run installs it)"
    try:
        import airflow.providers.celery  # noqa: F401
    except ImportError:
        return "apache-airflow-providers-celery is not installed (the dev dependency group has it)"
    return None


def create_database(admin_url: str, name: str) -> str:
    """A new database on the session's PostgreSQL; its SQLAlchemy URL (psycopg 3)."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_url.replace("postgresql://", "postgresql+psycopg://").rsplit("/", 1)[0] + f"/{name}"


def store_connection(url: str) -> str:
    """The ``trialflow`` Airflow connection (JSON, for an AIRFLOW_CONN_* variable) of a store
    on PostgreSQL, its password in the connection's secret field."""
    userinfo, location = url.split("://", 1)[1].split("@", 1)
    login, password = userinfo.split(":", 1)
    hostport, database = location.split("/", 1)
    host, port = hostport.split(":")
    return json.dumps(
        {
            "conn_type": "trialflow",
            "host": host,
            "port": int(port),
            "login": login,
            "password": password,
            "schema": database,
            "extra": {"dialect": "postgresql+psycopg"},
        }
    )


@dataclass
class Worker:
    host: str
    queues: tuple[str, ...]
    process: subprocess.Popen

    def main_pid(self) -> int | None:
        """The worker's pid as this (the parent) namespace sees it: unshare's child."""
        try:
            children = psutil.Process(self.process.pid).children()
        except psutil.NoSuchProcess:
            return None
        return children[0].pid if children else None


@dataclass
class Deployment:
    root: Path
    postgres_url: str
    airflow: EmbeddedAirflow = field(init=False)
    store_url: str = field(init=False)
    workdir: Path = field(init=False)
    redis: subprocess.Popen | None = None
    redis_port: int = field(default_factory=free_port)
    workers: dict[str, Worker] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = self.root / "work"  # each worker mounts its own disk here
        self.workdir.mkdir(parents=True, exist_ok=True)
        meta = create_database(self.postgres_url, "airflow_cluster")
        self.store_url = create_database(self.postgres_url, "experiments_cluster")
        broker = f"redis://127.0.0.1:{self.redis_port}/0"
        self.airflow = EmbeddedAirflow(
            home=self.root / "home",
            dags_folder=self.root / "dags",
            parallelism=16,
            extra_env={
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": meta,
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": meta,
                "AIRFLOW__CELERY__BROKER_URL": broker,
                "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{meta}",
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": "4",
                "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
                # A restarted triggerer takes over the triggers of one silent this long (default 30 s).
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
                # Tasks of a dead scheduler are adopted or reset at this interval (default: 5 min).
                "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
                # A task whose worker died is found by its missing heartbeats (default: 5 min).
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
                # A task whose Celery message died with Redis (it keeps none on disk here) stays
                # queued until this, then is queued again (default: 10 min, checked every 2 min).
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "120",
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "10",
                # The store: PostgreSQL, its password in the connection's secret field.
                "AIRFLOW_CONN_TRIALFLOW_DEFAULT": store_connection(self.store_url),
                "TRIALFLOW_WORKDIR": str(self.workdir),
            },
        )
        self.airflow.dags_folder.mkdir(parents=True, exist_ok=True)

    def add_store(self, conn_id: str, database: str) -> str:
        """A second store (a database of its own) under connection ``conn_id``, for the
        components started from now on; its SQLAlchemy URL."""
        url = create_database(self.postgres_url, database)
        self.airflow.extra_env[f"AIRFLOW_CONN_{conn_id.upper()}"] = store_connection(url)
        return url

    def restart(self, extra_env: dict[str, str | None]) -> None:
        """Every process killed (SIGKILL, as kill_all), the components' environment changed
        (None removes a variable), and everything started again."""
        workers = self.kill_all()
        for name, value in extra_env.items():
            if value is None:
                self.airflow.extra_env.pop(name, None)
            else:
                self.airflow.extra_env[name] = value
        self.start(workers)
        self.wait_for_workers()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, workers: dict[str, tuple[str, ...]]) -> None:
        """Redis, Airflow's database and components, then one worker per host name."""
        self._start_redis()
        self.airflow.migrate()
        self.airflow.start()
        for host, queues in workers.items():
            self.start_worker(host, queues)
        self.airflow.wait_healthy(timeout=240)

    def kill_all(self) -> dict[str, tuple[str, ...]]:
        """Every process of the deployment SIGKILLed at once (a power cut, PostgreSQL aside);
        returns the workers, to start them again."""
        workers = {host: worker.queues for host, worker in self.workers.items()}
        for host in list(self.workers):
            self.kill_worker(host)
        for name in list(self.airflow.processes):
            self.kill_component(name)
        if self.redis is not None:
            self.redis.kill()
            self.redis.wait(timeout=10)
            self.redis = None
        return workers

    def _start_redis(self) -> None:
        log = open(self.root / "redis.log", "ab")
        self.redis = subprocess.Popen(
            [REDIS, "--bind", "127.0.0.1", "--port", str(self.redis_port), "--save", "", "--appendonly", "no"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def start_worker(self, host: str, queues: tuple[str, ...]) -> Worker:
        command = [
            "unshare",
            "--uts",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount",
            "--mount-proc",
            "--propagation",
            "private",
            "sh",
            "-c",
            _HOST_SCRIPT,
            "sh",
            host,
            str(self.workdir),
            *self.airflow._airflow(),
            "celery",
            "worker",
            "--celery-hostname",
            f"{host}@{host}",
            "--queues",
            ",".join(queues),
            "--skip-serve-logs",
            "--without-gossip",
            "--without-mingle",
        ]
        log = open(self.airflow.home / "logs" / f"worker-{host}.log", "ab")
        process = subprocess.Popen(
            command,
            env=self.airflow.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self.workers[host] = Worker(host, queues, process)
        return self.workers[host]

    def kill_worker(self, host: str) -> None:
        """The host goes down: its worker and everything it started die at once."""
        worker = self.workers.pop(host)
        try:
            os.killpg(worker.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        worker.process.wait(timeout=30)

    def stop_consuming(self, host: str, queue: str = "default") -> None:
        """The worker on ``host`` takes no new task from ``queue`` (Celery's cancel_consumer);
        what it runs goes on. A test that needs tasks on one host says so instead of hoping
        Celery spreads them there."""
        self._consumer("cancel_consumer", host, queue)

    def start_consuming(self, host: str, queue: str = "default") -> None:
        """The worker on ``host`` takes tasks from ``queue`` again (Celery's add_consumer)."""
        self._consumer("add_consumer", host, queue)

    def _consumer(self, command: str, host: str, queue: str) -> None:
        from celery import Celery

        app = Celery(broker=f"redis://127.0.0.1:{self.redis_port}/0")
        destination = [f"{host}@{host}"]
        for _ in range(10):  # bounded: a loaded worker may miss the first broadcast's reply window
            replies = getattr(app.control, command)(queue, destination=destination, reply=True, timeout=3.0)
            if replies:
                return
        raise TimeoutError(f"worker {host} did not answer {command}({queue!r})")

    def kill_component(self, name: str) -> None:
        """SIGKILL an Airflow component and everything it started (a crash, no clean-up)."""
        process = self.airflow.processes.pop(name)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)

    def start_component(self, name: str) -> None:
        self.airflow.start((name,))

    def stop(self) -> None:
        for host in list(self.workers):
            self.kill_worker(host)
        self.airflow.stop()
        if self.redis is not None:
            self.redis.terminate()
            try:
                self.redis.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.redis.kill()
                self.redis.wait(timeout=10)

    def wait_for_workers(self, timeout: float = 120) -> None:
        """Until every worker answers Celery's ping (started and connected to the broker)."""
        from celery import Celery

        app = Celery(broker=f"redis://127.0.0.1:{self.redis_port}/0")
        deadline = time.monotonic() + timeout
        expected = {f"{host}@{host}" for host in self.workers}
        seen: set[str] = set()
        while time.monotonic() < deadline:
            for host, worker in self.workers.items():
                if worker.process.poll() is not None:
                    raise RuntimeError(f"worker {host} exited; see {self.airflow.home / 'logs'}/worker-{host}.log")
            try:
                replies = app.control.ping(timeout=1.0) or []
            except Exception:  # Redis itself may still be starting (a restart)
                time.sleep(0.5)
                continue
            seen = {name for reply in replies for name in reply}
            if expected <= seen:
                return
        raise TimeoutError(f"workers {sorted(expected - seen)} did not answer in {timeout:.0f} s")
