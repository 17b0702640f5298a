"""A private, loopback-only Airflow for `trialflow run`: scheduler, triggerer, dag-processor and
api-server (LocalExecutor, SQLite) in one folder, started and stopped as a unit.

Every listener is on 127.0.0.1: the api-server gets an explicit host, and the
scheduler and triggerer run with ``--skip-serve-logs`` because their log
servers cannot be bound to loopback. Components run in their own sessions so
stopping kills each whole process group, including LocalExecutor workers.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from trialflow.cli import embedded_hangs
from trialflow.cli.dag_run_calls import DagRunCalls
from trialflow.cli.dag_run_calls import EmbeddedAirflowError as EmbeddedAirflowError  # where callers find it
from trialflow.cli.embedded_hangs import HangWatch
from trialflow.cli.embedded_restarts import Restart, RestartBudget, last_error
from trialflow.cli.home_airflow import Proc

COMPONENTS = ("api-server", "scheduler", "triggerer", "dag-processor")
USER = "trialflow"
#: One REST call's timeout, and how long a call that timed out or found the port closed is
#: made again. The api-server (one worker) answers nothing while it builds its Execution API:
#: 4-7 s of CPU measured on an idle machine, past 10 s with a test suite beside it, and a
#: `trialflow run` failed on that with a bare "timed out".
API_TIMEOUT = 60.0
API_PATIENCE = 180.0
#: Answers that mean the api-server could not do the request just now (its database was locked,
#: or it is restarting behind a proxy): a repeatable request is asked again until API_PATIENCE.
RETRIED_STATUSES = frozenset({500, 502, 503, 504})
#: Seconds an idle scheduler loop sleeps (see env()).
SCHEDULER_IDLE_SLEEP = 0.2
#: What uvicorn logs when the api-server has answered its last request and shut its app down.
SERVED_ALL = "Finished server process"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EmbeddedAirflow(DagRunCalls):
    home: Path
    dags_folder: Path
    parallelism: int = 8
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    #: Read-only logins beside ``trialflow`` (Airflow's simple auth manager's "viewer" role): they
    #: see every page and no button (the pages' actions need edit access). Their passwords are
    #: kept in passwords.json with the admin's.
    viewers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in self.viewers:
            check_login_name(name)

    processes: dict[str, subprocess.Popen | AdoptedProcess] = field(default_factory=dict)
    #: Components started again after they died (trialflow.cli.embedded_restarts), oldest first.
    restarts: list[Restart] = field(default_factory=list)
    _budget: RestartBudget = field(default_factory=RestartBudget)
    #: Each own component's command line (an adopted one's is not known: it is not restarted).
    _commands: dict[str, list[str]] = field(default_factory=dict)
    #: Process groups of components that died and were started again: what they left (a
    #: LocalExecutor worker's task still reporting through the api-server) ends with stop().
    _retired: list[subprocess.Popen] = field(default_factory=list)
    #: Own components running but hung (trialflow.cli.embedded_hangs), and when it last looked.
    _hangs: HangWatch = field(default_factory=HangWatch)
    _hangs_looked: float = float("-inf")
    _token: str | None = None
    _warm_up: threading.Thread | None = None
    _http: httpx.Client | None = field(default=None, repr=False, compare=False)

    @property
    def http(self) -> httpx.Client:
        """One HTTP client for every call to this Airflow: ``httpx.get`` makes a client per
        call, and each loads the system's CA certificates (57 ms measured, 15 calls in a warm
        `trialflow run` before its first result), for a loopback address that never uses them;
        one client also keeps its connection open between calls. An idle connection is dropped
        after 2 s, before uvicorn's own 5 s close, so a call never goes out on a connection the
        api-server is closing."""
        if self._http is None:
            self._http = httpx.Client(timeout=API_TIMEOUT, limits=httpx.Limits(keepalive_expiry=2.0))
        return self._http

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        home = self.home.resolve()
        bin_dir = str(Path(sys.executable).parent)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW_CONFIG": str(home / "airflow.cfg"),  # this home's, whatever the shell says
                # Trials run `python3 ...`: the interpreter of this install comes first.
                "PATH": bin_dir + os.pathsep + env.get("PATH", ""),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder.resolve()),
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
                    [f"{USER}:admin", *(f"{name}:viewer" for name in self.viewers)]
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
                # A changed trialConcurrency reaches the scheduler through a new serialized DAG,
                # which Airflow writes (and the scheduler re-reads) at most this often (default 30 s).
                "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "3",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                # A scheduler loop that finds nothing to do sleeps this long, and every step of a
                # run waits for one (the start step's successors, each freed trial slot, the end
                # step, the run's end). 0.2 s instead of Airflow's 1 s: `trialflow run` on
                # (20,4,3) 38.1-39.9 -> 34.9-35.4 s; an idle scheduler then uses 5.6 % of a core
                # instead of 1.3 % (measured, bench/RESULTS.md).
                "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": str(SCHEDULER_IDLE_SLEEP),
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "600",
                # Upstream race (apache/airflow #71580): a trigger that fires within the heartbeat
                # interval can fail its task; a short interval makes it rare, re-attach makes it harmless.
                "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
                "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
                # Every component loads the trialflow plugin as it starts, and the plugin imports
                # the core there, so forked trial tasks inherit it (trialflow.ui.plugin.preload_core).
                "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
                "AIRFLOW__TRIALFLOW__PRELOAD_CORE": "True",
            }
        )
        env.update(self.extra_env)
        return env

    def component_env(self, name: str, env: dict[str, str]) -> dict[str, str]:
        """``env`` for component ``name``: the scheduler, the triggerer and the dag-processor on
        SQLite wait longer for the lock (trialflow.cli.embedded_database says why, and why not the
        api-server)."""
        if name in PATIENT_COMPONENTS and env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite"):
            return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": SCHEDULER_CONNECT_ARGS, **env}
        return env

    # -- lifecycle --------------------------------------------------------------------

    def _airflow(self) -> list[str]:
        return [sys.executable, "-m", "airflow"]

    def migrate(self) -> None:
        """Airflow's database, ready: a fresh one is a copy of a migrated template when this
        install made one before (`airflow db migrate` of an empty SQLite database costs
        seconds, the same ones every time); an existing one is migrated as usual."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(exist_ok=True)
        self.write_config()
        database = self.home / "airflow.db"
        template = None if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in self.extra_env else database_template()
        fresh = not database.exists()
        if fresh and template is not None and template.is_file():
            _copy_atomically(template, database)
            return
        self._run_migrate()
        if fresh and template is not None and not Path(f"{database}-wal").exists():
            try:
                template.parent.mkdir(parents=True, exist_ok=True)
                _copy_atomically(database, template)
            except OSError:
                pass  # a cache: without it, the next fresh home migrates

    def write_config(self) -> None:
        """This home's airflow.cfg with its own fernet key and JWT secret, unless it has one.

        The first Airflow process in a home writes airflow.cfg with secrets it generates; four
        components starting at once on a fresh home each generate their own, and the tasks'
        tokens signed by one are refused by another ("Invalid auth token"). `airflow db migrate`
        used to be that first process; with the database copied from a template, nothing runs
        before the components, so the secrets are made here, once, readable by the owner only.
        Everything else keeps Airflow's defaults.

        The login's password file too: Airflow's simple auth manager prints a password it
        generates into the api-server's log; one it finds in the file it leaves unsaid."""
        self.home.mkdir(parents=True, exist_ok=True)
        passwords = self.home / "passwords.json"
        known = json.loads(passwords.read_text()) if passwords.exists() else {}
        wanted = {name: known.get(name) or secrets.token_urlsafe(16) for name in (USER, *self.viewers)}
        if {**known, **wanted} != known:
            _write_private(passwords, json.dumps({**known, **wanted}))
        path = self.home / "airflow.cfg"
        if path.exists():
            return
        from cryptography.fernet import Fernet

        _write_private(
            path,
            "# written by trialflow for this private Airflow; other options keep Airflow's defaults\n"
            f"[core]\nfernet_key = {Fernet.generate_key().decode()}\n\n"
            f"[api_auth]\njwt_secret = {base64.b64encode(os.urandom(32)).decode()}\n",
        )

    def _run_migrate(self) -> None:
        log = self.home / "logs" / "db-migrate.log"
        with open(log, "wb") as out:
            rc = subprocess.call(
                self._airflow() + ["db", "migrate"],
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        if rc != 0:
            raise EmbeddedAirflowError(f"`airflow db migrate` failed (exit {rc}); see {log}")

    def start(self, components: tuple[str, ...] = COMPONENTS) -> None:
        self.write_config()  # before the components: they must share its secrets
        args = {
            "api-server": ["api-server", "--port", str(self.port), "--host", "127.0.0.1"],
            "scheduler": ["scheduler", "--skip-serve-logs"],
            "triggerer": ["triggerer", "--skip-serve-logs"],
            "dag-processor": ["dag-processor"],
        }
        for name in components:
            self._commands[name] = self._airflow() + args[name]
            self._launch(name)

    def _launch(self, name: str) -> None:
        with open(self.home / "logs" / f"{name}.log", "ab") as out:
            self.processes[name] = subprocess.Popen(
                self._commands[name],
                env=self.component_env(name, self.env()),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_serving(self, timeout: float = 120.0) -> None:
        """Until the api-server answers (alone: `trialflow ui` starts nothing else)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if self.http.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise EmbeddedAirflowError(f"the api-server did not answer in {timeout:.0f} s; logs in {self.home / 'logs'}")

    def wait_healthy(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                last = self.http.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).json()
                self.warm_up()
                if all(last.get(k, {}).get("status") == "healthy" for k in ("metadatabase", "scheduler", "triggerer")):
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)
        raise EmbeddedAirflowError(
            f"Airflow did not become healthy in {timeout:.0f} s (last: {last}); logs in {self.home / 'logs'}"
        )

    def adopt(self, port: int, components: dict[str, Proc]) -> None:
        """Use the components another `trialflow` started in this home (trialflow.cli.home_airflow):
        they are watched and stopped as this one's own would be, by pid."""
        self.port = port
        self._token = None
        self.processes = {name: AdoptedProcess(proc) for name, proc in components.items()}

    def check_alive(self) -> None:
        """Start again an own component that exited, within its budget; else say which died.

        Level-triggered: every wait and REST call of this class looks, so a component that died
        between two calls is noticed at the next one, whoever makes it. A component that runs
        but is hung (trialflow.cli.embedded_hangs) is killed first, and so started again too.
        """
        hung = self._kill_hung()
        for name, proc in list(self.processes.items()):
            if proc.poll() is None:
                continue
            log = self.home / "logs" / (name + ".log")
            code = proc.returncode if proc.returncode is not None else -1
            if isinstance(proc, subprocess.Popen) and name in self._commands:
                now = time.monotonic()
                if self._budget.take(name, now):
                    self._restart(name, proc, code, now, log, hung.get(name))
                    continue
            said = hung.get(name) or f"exited with code {code}"
            raise EmbeddedAirflowError(f"airflow {name} {said}; see {log}; its last lines:\n{_tail(log)}")

    def _kill_hung(self) -> dict[str, str]:
        """Kill (with its process group) each own component that Airflow's health has called
        unhealthy for HANG_SECONDS while it runs; what was said of each killed. Looks at most
        every LOOK_INTERVAL seconds; an api-server that does not answer says nothing (it may be
        the busy one)."""
        now = time.monotonic()
        if now - self._hangs_looked < embedded_hangs.LOOK_INTERVAL:
            return {}
        self._hangs_looked = now
        own = {
            name
            for name, proc in self.processes.items()
            if isinstance(proc, subprocess.Popen) and name in self._commands and proc.poll() is None
        }
        if not own & set(embedded_hangs.HEALTH_KEYS):
            return {}
        try:
            health = self.http.get(f"{self.base_url}/api/v2/monitor/health", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return {}
        killed: dict[str, str] = {}
        for name in self._hangs.look(embedded_hangs.unhealthy(health) & own, now):
            proc = self.processes[name]
            assert isinstance(proc, subprocess.Popen)
            killed[name] = (
                f"hung: Airflow's health called it unhealthy for {self._hangs.limit:.0f} s while it ran; "
                "killed with its process group"
            )
            _kill_group(proc)
            try:
                proc.wait(timeout=5)  # reaped, so the loop below sees it exited
            except subprocess.TimeoutExpired:
                pass
        return killed

    def _restart(
        self, name: str, proc: subprocess.Popen, code: int, now: float, log: Path, hung: str | None = None
    ) -> None:
        line = (
            f"trialflow: airflow {name} {hung or f'exited with code {code}'}; started again "
            f"({self._budget.used(name)} of {self._budget.limit} in {self._budget.window:.0f} s)"
        )
        cause = hung or last_error(_tail(log))
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"\n{line}\n")
        self._retired.append(proc)
        self.restarts.append(Restart(name, code, now, cause))
        self._launch(name)

    def warm_up(self) -> None:
        """Have the api-server build its Execution API now, in the background.

        Airflow builds the Execution API's versioned routes (Cadwyn) on the first request to
        it: 4-7 s of CPU on two cores, measured. Left to the first task, its supervisor's
        request times out after 5 s and is retried, and the experiment's start step takes
        ~6 s instead of ~0.3 s. Called once the api-server answers, this overlaps the other
        components' start-up instead.
        """
        if self._warm_up is not None:
            return

        def build() -> None:
            try:
                self.http.get(f"{self.base_url}/execution/health", timeout=120)
            except httpx.HTTPError:
                pass  # a task's own request will build it, only later

        self._warm_up = threading.Thread(target=build, name="trialflow-warm-up", daemon=True)
        self._warm_up.start()

    def stop(self, grace: float = 15.0, polite: float = 3.0) -> None:
        """Stop every component: Airflow's own graceful exit first, then force.

        SIGTERM goes to each component's main process only, so it stops its children itself
        (what `airflow scheduler` does on Ctrl-C): the scheduler waits for its running tasks,
        the api-server for its requests. What still runs after ``polite`` seconds gets a second
        SIGTERM, which Airflow takes as "exit now", and whatever is left after ``grace`` is
        killed with its whole process group.

        The triggerer is the exception: once the others have exited (or ``polite`` has passed),
        its group is killed at once. Its graceful exit asks the trigger runner to stop with an
        escalation of 10 s, and even its forced exit waits out a 5 s escalation after SIGKILL
        (Airflow 3.3's supervisor; measured: 8-11 s to stop an idle triggerer, most of a
        `trialflow run`'s shutdown). Nothing is lost by not waiting: trialflow's triggers keep
        no state (the platform and the store hold the trial), and a resumed run defers its
        trials again. Its job row stays "running", so a new triggerer may wait out
        `triggerer_health_check_threshold` (30 s) before it takes those triggers over.

        The api-server's group is killed once uvicorn says it has finished serving: what is
        left is the interpreter's final garbage collection of its routes and models (3-4 s
        measured, a py-spy dump shows gc_collect_main), and it keeps no state of its own.
        """
        logs = {name: self.home / "logs" / f"{name}.log" for name in self.processes}
        offsets = {name: _size(path) for name, path in logs.items()}
        for proc in self.processes.values():
            _signal_leader(proc, signal.SIGTERM)
        deadline = time.monotonic() + polite
        waiting = [name for name in self.processes if name != "triggerer"]
        while waiting and time.monotonic() < deadline:
            for name in list(waiting):
                proc = self.processes[name]
                if proc.poll() is None and name == "api-server" and _logged(logs[name], offsets[name], SERVED_ALL):
                    _kill_group(proc)
                    _wait_all([proc], 5)
                if proc.poll() is not None:
                    waiting.remove(name)
            time.sleep(0.05)
        for name, proc in self.processes.items():
            if name == "triggerer":
                _kill_group(proc)
            else:
                _signal_leader(proc, signal.SIGTERM)
        _wait_all(self.processes.values(), max(0.1, grace - polite))
        for proc in [*self.processes.values(), *self._retired]:
            _kill_group(proc)  # LocalExecutor workers and anything else left
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.processes.clear()
        self._retired.clear()
        if self._http is not None:
            self._http.close()
            self._http = None

    # -- REST API -------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        if self._token is None:
            passwords = json.loads((self.home / "passwords.json").read_text())
            response = self._request("POST", "/auth/token", json={"username": USER, "password": passwords[USER]})
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return {"Authorization": f"Bearer {self._token}"}

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call to the REST API. Reads, pause switches and the token are asked again while
        the api-server is busy or restarting; other writes are not (they may have happened),
        except a trigger, which names its run and so is safe to repeat (see ``trigger``)."""
        headers = {**self._headers(), **kwargs.pop("headers", {})}
        return self._request(method, f"/api/v2{path}", headers=headers, **kwargs)

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        repeatable = method in ("GET", "PATCH") or path in ("/auth/token",) or bool(kwargs.pop("repeatable", False))
        deadline = time.monotonic() + API_PATIENCE
        while True:
            try:
                response = self.http.request(method, f"{self.base_url}{path}", **kwargs)
            except httpx.TransportError as exc:
                if not repeatable:
                    raise EmbeddedAirflowError(f"the api-server did not answer {method} {path}: {exc}") from exc
                if time.monotonic() > deadline:
                    raise EmbeddedAirflowError(
                        f"the api-server did not answer {method} {path} in {API_PATIENCE:.0f} s ({exc}); "
                        f"logs in {self.home / 'logs'}"
                    ) from exc
            else:
                # SQLite lets one writer in at a time: two runs triggering at once on a loaded
                # machine can get the api-server's 500 "Database error" (database is locked)
                # for a request that did nothing, so a repeatable one is asked again.
                if not (repeatable and response.status_code in RETRIED_STATUSES and time.monotonic() < deadline):
                    return response
            self.check_alive()
            time.sleep(1.0)


TEMPLATE_ENV = "TRIALFLOW_AIRFLOW_DB_TEMPLATES"


#: ``[database] sql_alchemy_connect_args`` of a private Airflow's components that exit on
#: "database is locked" (not the api-server, which answers 500 and is asked again).
SCHEDULER_CONNECT_ARGS = "trialflow.cli.embedded_database.CONNECT_ARGS"
PATIENT_COMPONENTS = frozenset({"scheduler", "triggerer", "dag-processor"})


def database_template() -> Path:
    """The migrated empty database for this install: named by the versions of Airflow and of
    every installed Airflow distribution (providers bring tables and migrations of their own),
    so an upgrade never reuses an older schema."""
    from importlib import metadata

    installed = sorted(
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in metadata.distributions()
        if (dist.metadata["Name"] or "").lower().replace("_", "-").startswith("apache-airflow")
    )
    key = hashlib.sha256("\n".join(installed).encode()).hexdigest()[:16]
    folder = Path(os.environ.get(TEMPLATE_ENV) or Path.home() / ".cache" / "trialflow" / "airflow-db").expanduser()
    return folder / f"airflow-{key}.db"


def _copy_atomically(source: Path, target: Path) -> None:
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


#: A login name the simple auth manager's user list can hold as it is ("name:role,name:role").
_LOGIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_login_name(name: str) -> str:
    """``name`` if it may be a read-only login (letters, digits, ``_.-``, at most 64; never the
    admin's name): a ``:`` or ``,`` in it would add a role or a user to Airflow's list."""
    if not isinstance(name, str) or not _LOGIN_NAME.fullmatch(name) or name == USER:
        raise ValueError(
            f"--viewer {str(name)[:80]!r}: expected a login name of letters, digits, '_', '.' or '-' "
            f"(at most 64, starting with a letter or digit), other than {USER!r}"
        )
    return name


def _write_private(path: Path, text: str) -> None:
    """``path`` with ``text``, readable by its owner only, appearing whole or not at all."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _logged(path: Path, offset: int, text: str) -> bool:
    """Whether ``text`` was written to the log ``path`` after byte ``offset``."""
    try:
        with path.open("rb") as log:
            log.seek(offset)
            return text.encode() in log.read()
    except FileNotFoundError:
        return False


class AdoptedProcess:
    """A component started by another process (a shared home's Airflow), with the part of
    Popen's interface that watching and stopping use. Its exit code is not ours to read: -1."""

    def __init__(self, proc: Proc):
        self.pid = proc.pid
        self._proc = proc
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._proc.alive():
            self.returncode = -1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            time.sleep(0.05)
        return code


def _wait_all(procs: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for proc in list(procs):
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _signal_leader(proc: subprocess.Popen | AdoptedProcess, sig: signal.Signals) -> None:
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def _kill_group(proc: subprocess.Popen | AdoptedProcess) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, lines: int = 40, limit: int = 8000) -> str:
    """The end of a component's log, for the error that says it died.

    Read from the end (a log can be large) and bounded: where the log lives (a test's temporary
    home, a CI machine) is often gone or out of reach by the time someone reads the error.
    """
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            text = handle.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(unreadable: {exc.strerror})"
    return "\n".join(text.splitlines()[-lines:])
