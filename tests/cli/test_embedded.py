"""The private Airflow: a fresh home starts from a migrated template, and that copy is a
database Airflow itself finds fully migrated; its components stop without leaving a process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from trialflow.cli import embedded
from trialflow.cli.embedded import EmbeddedAirflow, database_template


@pytest.mark.integration  # real Airflow components
def test_a_fresh_home_copies_the_migrated_template_and_airflow_accepts_it(tmp_path, monkeypatch):
    monkeypatch.setenv(embedded.TEMPLATE_ENV, str(tmp_path / "templates"))
    first = EmbeddedAirflow(tmp_path / "first", tmp_path / "dags")
    first.migrate()  # migrates for real, then keeps the result
    template = database_template()
    assert template.is_file() and template.parent == tmp_path / "templates"

    second = EmbeddedAirflow(tmp_path / "second", tmp_path / "dags")
    second.migrate()
    assert (second.home / "airflow.db").read_bytes() == template.read_bytes()
    # each home has its own secrets, written before any component could race to make its own
    configs = [(a.home / "airflow.cfg") for a in (first, second)]
    assert all(c.stat().st_mode & 0o077 == 0 for c in configs)
    secrets = [dict(line.split(" = ", 1) for line in c.read_text().splitlines() if " = " in line) for c in configs]
    assert secrets[0].keys() >= {"fernet_key", "jwt_secret"} and secrets[0] != secrets[1]
    assert not (second.home / "logs" / "db-migrate.log").exists()  # no migration ran
    check = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "check-migrations", "-t", "0"],
        env=second.env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_existing_database_is_migrated_not_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv(embedded.TEMPLATE_ENV, str(tmp_path / "templates"))
    template = database_template()
    template.parent.mkdir(parents=True)
    template.write_bytes(b"template")
    airflow = EmbeddedAirflow(tmp_path / "home", tmp_path / "dags")
    (airflow.home).mkdir()
    (airflow.home / "airflow.db").write_bytes(b"")  # a home that has its database (resume)
    calls: list[Path] = []
    monkeypatch.setattr(EmbeddedAirflow, "_run_migrate", lambda self: calls.append(self.home))
    airflow.migrate()
    assert calls == [airflow.home] and (airflow.home / "airflow.db").read_bytes() == b""
    assert template.read_bytes() == b"template"  # an existing home never becomes the template


def test_the_template_is_named_by_the_installed_airflow_distributions(monkeypatch, tmp_path):
    from importlib import metadata

    monkeypatch.setenv(embedded.TEMPLATE_ENV, str(tmp_path))

    class Dist:
        def __init__(self, name: str, version: str):
            self.metadata = {"Name": name}
            self.version = version

    installed = [Dist("apache-airflow", "3.3.2"), Dist("apache-airflow-providers-fab", "2.0"), Dist("numpy", "1")]
    monkeypatch.setattr(metadata, "distributions", lambda: installed)
    name = database_template().name
    installed[2] = Dist("numpy", "2")  # not Airflow's: same template
    assert database_template().name == name
    installed[1] = Dist("apache-airflow-providers-fab", "2.1")  # a provider upgrade: another one
    assert database_template().name != name


def _sessions_alive(sids: set[int]) -> list[psutil.Process]:
    alive = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) in sids and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except (ProcessLookupError, psutil.Error):
            pass
    return alive


@pytest.mark.integration  # real Airflow components
def test_stop_ends_every_component_with_its_children(tmp_path, monkeypatch):
    """The four real components, healthy, then stopped: Airflow's own exit first, then the
    whole process groups, so no scheduler worker, trigger runner or gunicorn child outlives
    the run; and the Execution API answered the warm-up before any task asked it. A scheduler
    killed on the way is started again, and its successor is stopped like the others."""
    monkeypatch.setenv(embedded.TEMPLATE_ENV, str(tmp_path / "templates"))
    airflow = EmbeddedAirflow(tmp_path / "home", tmp_path / "dags")
    (tmp_path / "dags").mkdir()
    airflow.migrate()
    airflow.start()
    sids = {proc.pid for proc in airflow.processes.values()}
    try:
        airflow.wait_serving()
        airflow.warm_up()
        airflow.wait_healthy()
        assert airflow._warm_up is not None
        airflow._warm_up.join(timeout=120)
        assert not airflow._warm_up.is_alive()
        children = [p for p in _sessions_alive(sids) if p.pid not in sids]
        assert children, "the components run children (LocalExecutor workers, trigger runner)"
        # the scheduler killed with its workers (the OOM killer, a database error past its
        # retries): the next look starts it again, and the new one heartbeats
        killed_at = datetime.now(UTC)
        os.killpg(airflow.processes["scheduler"].pid, signal.SIGKILL)
        airflow.processes["scheduler"].wait(timeout=30)
        airflow.check_alive()
        assert [(r.component, r.exit_code) for r in airflow.restarts] == [("scheduler", -9)]
        sids.add(airflow.processes["scheduler"].pid)
        assert "trialflow: airflow scheduler exited with code -9; started again (1 of 3" in (
            airflow.home / "logs" / "scheduler.log"
        ).read_text(errors="replace")
        deadline = time.monotonic() + 120
        beat = None
        while time.monotonic() < deadline:
            airflow.check_alive()
            health = airflow.api("GET", "/monitor/health").json()
            beat = health["scheduler"]["latest_scheduler_heartbeat"]
            if beat and datetime.fromisoformat(beat) > killed_at:
                break
            time.sleep(0.5)
        assert beat and datetime.fromisoformat(beat) > killed_at, beat
    finally:
        airflow.stop(grace=15)
    assert all(proc.poll() is not None for proc in airflow.processes.values())
    assert _sessions_alive(sids) == []
    # the line the stop kills the api-server after is what this Airflow's uvicorn really writes
    assert embedded.SERVED_ALL in (airflow.home / "logs" / "api-server.log").read_text(errors="replace")
    # the login's password stays in its 0600 file: Airflow printed none into the logs
    password = json.loads((airflow.home / "passwords.json").read_text())["trialflow"]
    assert (airflow.home / "passwords.json").stat().st_mode & 0o077 == 0
    logs = list((airflow.home / "logs").rglob("*.log"))
    assert logs and not [log for log in logs if password in log.read_text(errors="replace")]


@pytest.mark.integration  # real Airflow components
def test_calls_outlast_a_busy_api_server_and_a_lost_trigger_answer_starts_one_run(tmp_path, monkeypatch):
    """A `trialflow run` failed with a bare "timed out": its first call came while the
    api-server, one worker, was busy building its Execution API. Calls that may be repeated
    are now asked again (here: one made before the api-server even listens), and a trigger
    whose answer is lost after Airflow made the run is asked again without a second run."""
    import threading

    import httpx

    monkeypatch.setenv(embedded.TEMPLATE_ENV, str(tmp_path / "templates"))
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "tiny.py").write_text(
        "# airflow DAG\nfrom airflow.sdk import DAG\n"
        "from airflow.providers.standard.operators.empty import EmptyOperator\n"
        "with DAG('tiny', schedule=None):\n    EmptyOperator(task_id='nothing')\n"
    )
    airflow = EmbeddedAirflow(tmp_path / "home", dags)
    airflow.migrate()
    early: list[int] = []
    asking = threading.Thread(target=lambda: early.append(airflow.api("GET", "/monitor/health").status_code))
    airflow.write_config()
    (airflow.home / "passwords.json").write_text('{"trialflow": "pw"}')  # the api-server keeps this file
    asking.start()  # before anything listens: the token and the call wait for the api-server
    airflow.start(("api-server", "dag-processor"))
    try:
        asking.join(timeout=200)
        assert early == [200]
        airflow.wait_for_dag("tiny", dags / "tiny.py")
        real = airflow.http.request  # the one client every call of this Airflow goes through
        lost: list[str] = []

        def answer_lost_once(method: str, url: str, **kwargs):
            response = real(method, url, **kwargs)
            if method == "POST" and url.endswith("/dagRuns") and not lost:
                lost.append(kwargs["json"]["dag_run_id"])
                raise httpx.ReadTimeout("timed out")  # the run was made; its answer never came
            return response

        monkeypatch.setattr(airflow.http, "request", answer_lost_once)
        run_id = airflow.trigger("tiny", {"x": 1})
        monkeypatch.setattr(airflow.http, "request", real)
        assert lost == [run_id]
        runs = airflow.api("GET", "/dags/tiny/dagRuns").json()["dag_runs"]
        assert [(r["dag_run_id"], r["conf"]) for r in runs] == [(run_id, {"x": 1})]
    finally:
        airflow.stop(grace=15)


FINISHING_API_SERVER = """
import signal, sys, time
def term(*_):
    time.sleep(0.5)  # the request in flight is answered
    print("Finished server process [1]", flush=True)
    time.sleep(60)  # what the real one then spends in the interpreter's final garbage collection
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("serving", flush=True)
time.sleep(120)
"""


def test_stop_waits_for_the_api_server_to_finish_serving_not_for_its_exit(tmp_path):
    """The api-server is killed once it logged that it served its last request (it keeps no
    state), not after its 3-4 s of final garbage collection; never before that line."""
    airflow = EmbeddedAirflow(tmp_path / "home", tmp_path / "dags")
    (airflow.home / "logs").mkdir(parents=True)
    log = airflow.home / "logs" / "api-server.log"
    log.write_text("Finished server process [0]\n")  # an earlier run's line does not count
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-c", FINISHING_API_SERVER], stdout=out, start_new_session=True)
    airflow.processes["api-server"] = proc
    deadline = time.monotonic() + 30
    while b"serving" not in log.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    airflow.stop(grace=30, polite=20)
    assert time.monotonic() - started < 15  # not the 60 s of its lingering exit (nor polite + grace)
    assert proc.returncode == -9
    assert log.read_text().count("Finished server process") == 2  # killed after its own line


@pytest.mark.integration
def test_a_viewer_login_reads_every_page_and_may_not_act(tmp_path):
    """Issue 36 (2): `trialflow run`/`ui` drop the shell's AIRFLOW__* settings, so a read-only
    user of the private Airflow is an option of theirs (--viewer NAME): the simple auth
    manager's viewer role, its password kept beside the admin's."""
    import json

    import httpx

    with pytest.raises(ValueError, match="expected a login name"):
        EmbeddedAirflow(tmp_path / "x", tmp_path / "d", viewers=("bob:admin",))  # no role smuggled in
    airflow = EmbeddedAirflow(tmp_path / "home", tmp_path / "dags", viewers=("ann",))
    airflow.dags_folder.mkdir(parents=True)
    airflow.migrate()
    airflow.start(components=("api-server",))
    try:
        airflow.wait_serving()
        passwords = json.loads((airflow.home / "passwords.json").read_text())
        assert set(passwords) == {"trialflow", "ann"}
        token = httpx.post(
            f"{airflow.base_url}/auth/token", json={"username": "ann", "password": passwords["ann"]}, timeout=30
        ).json()["access_token"]
        ann = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{airflow.base_url}/api/v2/dags", headers=ann, timeout=30).status_code == 200
        pool = {"name": "p1", "slots": 1}
        assert httpx.post(f"{airflow.base_url}/api/v2/pools", json=pool, headers=ann, timeout=30).status_code == 403
        assert airflow.api("POST", "/pools", json=pool).status_code in (200, 201)  # the admin may
    finally:
        airflow.stop()


@pytest.mark.slow  # a Python that imports Airflow's settings
def test_a_private_airflows_scheduler_on_sqlite_waits_longer_for_its_lock(tmp_path):
    """The scheduler on the tests' SQLite metadata met a lock held past sqlite3's 5 s under load
    and exited: a private Airflow's scheduler on SQLite waits
    trialflow.cli.embedded_database.SQLITE_TIMEOUT; the other components keep sqlite3's wait (the
    api-server stalled when it had the longer one), and one on PostgreSQL gets no SQLite argument."""
    from trialflow.cli.embedded_database import SQLITE_TIMEOUT

    airflow = EmbeddedAirflow(tmp_path / "home", tmp_path / "dags")
    airflow.home.mkdir(parents=True)
    airflow.write_config()
    env = airflow.env()
    code = (  # the arguments Airflow's own engine hands sqlite3.connect
        "import sqlalchemy as sa\n"
        "from airflow import settings\n"
        "seen = {}\n"
        "@sa.event.listens_for(settings.engine, 'do_connect')\n"
        "def grab(dialect, conn_rec, cargs, cparams):\n"
        "    seen.update(cparams)\n"
        "settings.engine.dispose(); settings.engine.connect().close()\n"
        "print(seen.get('timeout'))\n"
    )
    said = {}
    for name in ("scheduler", "triggerer", "api-server"):
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=airflow.component_env(name, env),
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        said[name] = done.stdout.strip().splitlines()[-1]
    assert said == {"scheduler": str(SQLITE_TIMEOUT), "triggerer": str(SQLITE_TIMEOUT), "api-server": "None"}
    postgres = EmbeddedAirflow(
        tmp_path / "pg", tmp_path / "dags", extra_env={"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://u@h/d"}
    )
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS" not in postgres.component_env("scheduler", postgres.env())


DYING_COMPONENT = """
import subprocess, sys
subprocess.Popen(["sleep", "300"])  # a child in its process group, as a LocalExecutor worker
print("up", flush=True)
print("sqlite3.OperationalError: database is locked", flush=True)
sys.exit(3)
"""


def test_a_component_that_dies_is_started_again_within_its_budget(tmp_path):
    """A component that exits is started again by the next look (check_alive), with a line in
    its log; what the dead one left in its process group ends with stop(); past three starts in
    ten minutes the error names the component and its log."""

    class Dying(EmbeddedAirflow):
        def _airflow(self) -> list[str]:
            return [sys.executable, "-c", DYING_COMPONENT]

    airflow = Dying(tmp_path / "home", tmp_path / "dags")
    (airflow.home / "logs").mkdir(parents=True)
    airflow.start(("scheduler",))
    leaders: list[int] = []
    try:
        for count in (1, 2, 3):
            leaders.append(airflow.processes["scheduler"].pid)
            airflow.processes["scheduler"].wait(timeout=30)
            airflow.check_alive()
            assert [r.exit_code for r in airflow.restarts] == [3] * count
            # why it died, kept beside the restart (the tests' summary says it; the log may be gone)
            assert airflow.restarts[-1].last_error == "sqlite3.OperationalError: database is locked"
            assert airflow.processes["scheduler"].pid != leaders[-1]
        log = airflow.home / "logs" / "scheduler.log"
        assert log.read_text().count("trialflow: airflow scheduler exited with code 3; started again") == 3
        assert "(3 of 3 in 600 s)" in log.read_text()
        airflow.processes["scheduler"].wait(timeout=30)
        with pytest.raises(
            embedded.EmbeddedAirflowError, match=r"airflow scheduler exited with code 3; see .*scheduler\.log"
        ):
            airflow.check_alive()
        assert len(airflow.restarts) == 3
        leftovers = [p for p in _sessions_alive(set(leaders)) if p.name() == "sleep"]
        assert len(leftovers) == 3  # each dead one's child still ran until the stop
    finally:
        airflow.stop(grace=2, polite=1)
    deadline = time.monotonic() + 10  # SIGKILLed, gone in a moment (an orphan, reaped by init)
    while _sessions_alive(set(leaders)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sessions_alive(set(leaders)) == []


def test_an_adopted_component_that_died_is_not_started_again(tmp_path):
    """Another process started it (a kept home's Airflow): its command is not known here, and
    the shared home replaces a dead Airflow as a whole (trialflow.cli.shared_airflow)."""
    from trialflow.cli.home_airflow import Proc

    airflow = EmbeddedAirflow(tmp_path / "home", tmp_path / "dags")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    airflow.processes["scheduler"] = embedded.AdoptedProcess(Proc(pid=gone.pid, started=0.0))
    with pytest.raises(embedded.EmbeddedAirflowError, match="airflow scheduler exited with code -1"):
        airflow.check_alive()
    assert airflow.restarts == []


def test_a_locked_database_answer_is_asked_again_only_for_a_repeatable_call(tmp_path, monkeypatch):
    """Two `trialflow run`s triggering at once on one kept home failed in CI: the api-server on
    SQLite answered 500 "Database error" (its 5 s lock wait ran out under load) to a trigger
    that did nothing. A trigger names its run, so it is asked again and the run is made once; a
    write that cannot be repeated gets the 500 back, unchanged."""
    import httpx

    monkeypatch.setattr(embedded.time, "sleep", lambda _s: None)
    locked = {"POST /api/v2/dags/d/dagRuns": 2, "POST /api/v2/pools": 1}
    made: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        key = f"{request.method} {request.url.path}"
        if key == "POST /auth/token":
            return httpx.Response(201, json={"access_token": "t"})
        if locked.get(key, 0) > 0:
            locked[key] -= 1
            return httpx.Response(500, json={"detail": {"reason": "Database error"}})
        if key == "POST /api/v2/dags/d/dagRuns":
            made.append(json.loads(request.content)["dag_run_id"])
            return httpx.Response(200, json={"dag_run_id": made[-1]})
        return httpx.Response(200, json={})

    airflow = EmbeddedAirflow(tmp_path / "home", tmp_path / "dags")
    airflow.home.mkdir(parents=True)
    (airflow.home / "passwords.json").write_text('{"trialflow": "pw"}')
    airflow._http = httpx.Client(transport=httpx.MockTransport(server))
    run_id = airflow.trigger("d", {"x": 1})
    assert made == [run_id] and locked["POST /api/v2/dags/d/dagRuns"] == 0
    assert airflow.api("POST", "/pools", json={"name": "p"}).status_code == 500
    assert airflow.api("POST", "/pools", json={"name": "p"}).status_code == 200


HUNG_COMPONENT = """
import subprocess, time
subprocess.Popen(["sleep", "300"])  # a child in its process group, as a triggerer's runner
print("up", flush=True)
time.sleep(300)  # alive, and never a heartbeat again
"""


def test_a_component_that_hangs_is_killed_with_its_group_and_started_again(tmp_path, monkeypatch):
    """A component that runs but that Airflow's health (a real HTTP answer in its shape) calls
    unhealthy in every look for the limit is killed with its process group and started again
    like one that died, the restart saying why; a healthy answer, or none, kills nothing."""
    import http.server
    import threading

    from trialflow.cli import embedded_hangs
    from trialflow.cli.embedded_hangs import HangWatch

    answer = {"status": "unhealthy"}

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(
                {"metadatabase": {"status": "healthy"}, "triggerer": {"status": answer["status"]}}
            ).encode()
            self.send_response(200 if self.path == "/api/v2/monitor/health" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Hanging(EmbeddedAirflow):
        def _airflow(self) -> list[str]:
            return [sys.executable, "-c", HUNG_COMPONENT]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(embedded_hangs, "LOOK_INTERVAL", 0.0)
    airflow = Hanging(tmp_path / "home", tmp_path / "dags", port=server.server_address[1])
    airflow._hangs = HangWatch(limit=0.5)
    (airflow.home / "logs").mkdir(parents=True)
    airflow.start(("triggerer",))
    first = airflow.processes["triggerer"].pid
    try:
        deadline = time.monotonic() + 10
        while len(psutil.Process(first).children()) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        airflow.check_alive()  # its streak begins
        assert airflow.restarts == [] and airflow.processes["triggerer"].pid == first
        time.sleep(0.6)
        airflow.check_alive()
        (restart,) = airflow.restarts
        assert restart.component == "triggerer" and restart.exit_code == -signal.SIGKILL
        assert restart.last_error.startswith("hung: Airflow's health called it unhealthy for")
        assert airflow.processes["triggerer"].pid != first
        deadline = time.monotonic() + 5  # its child went with it (SIGKILL to the group)
        while _sessions_alive({first}) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _sessions_alive({first}) == []
        log = (airflow.home / "logs" / "triggerer.log").read_text()
        assert "trialflow: airflow triggerer hung: Airflow's health called it unhealthy" in log
        assert "killed with its process group; started again (1 of 3 in 600 s)" in log
        answer["status"] = "healthy"  # the new one heartbeats
        for _ in range(3):
            time.sleep(0.3)
            airflow.check_alive()
        server.shutdown()  # the api-server away: no answer, nothing killed
        time.sleep(0.6)
        airflow.check_alive()
        assert len(airflow.restarts) == 1
    finally:
        server.server_close()
        airflow.stop(grace=2, polite=1)
