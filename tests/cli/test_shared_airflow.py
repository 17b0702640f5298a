"""Attaching to a home's live Airflow, or being refused, or starting one (no Airflow started:
a health endpoint on 127.0.0.1 stands in for the api-server; the "components" are this process)."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from trialflow.cli import home_airflow
from trialflow.cli.embedded import EmbeddedAirflow, EmbeddedAirflowError
from trialflow.cli.home_airflow import Proc, Running
from trialflow.cli.shared_airflow import joined, leave


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/api/v2/monitor/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def airflow(tmp_path: Path, folder: str = "dags") -> EmbeddedAirflow:
    return EmbeddedAirflow(home=tmp_path / "airflow", dags_folder=tmp_path / folder)


def live(port: int, tmp_path: Path, folder: str = "dags", **changes) -> Running:
    me = home_airflow.me()
    fields = {"components": {"api-server": me}, "dags_folder": str((tmp_path / folder).resolve())} | changes
    return Running(port, **fields)


def test_a_run_attaches_to_a_live_airflow_of_its_folder_and_leaves_it_kept(tmp_path, health):
    mine = airflow(tmp_path)
    home_airflow.write(mine.home, live(health, tmp_path, keep=True))
    with joined(mine) as attached:
        assert attached and mine.port == health
        assert home_airflow.read(mine.home).users == [home_airflow.me()]
    assert leave(mine) is False  # kept: nothing stopped
    after = home_airflow.read(mine.home)
    assert after is not None and after.users == [] and after.keep


def test_a_live_airflow_of_another_folder_is_refused_while_kept_or_used(tmp_path, health):
    mine = airflow(tmp_path, "mine")
    home_airflow.write(mine.home, live(health, tmp_path, "theirs", keep=True))
    with pytest.raises(EmbeddedAirflowError, match=r"up for DAGs folder .*theirs, kept by `trialflow up`"):
        with joined(mine):
            pass
    home_airflow.write(mine.home, live(health, tmp_path, "theirs", users=[home_airflow.me()]))
    with pytest.raises(EmbeddedAirflowError, match=r"kept by 1 run\(s\) \(pid \d+\); wait for it, or `trialflow down"):
        with joined(mine):
            pass
    assert home_airflow.read(mine.home) is not None  # refused: nothing of theirs touched


def test_a_stale_record_is_replaced_and_a_kept_one_stays_kept(tmp_path, health):
    mine = airflow(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"], start_new_session=True)
    dead = Proc.of(gone.pid)  # a component that has exited since
    gone.wait(10)
    home_airflow.write(mine.home, live(health, tmp_path, components={"scheduler": dead}, keep=True))
    with joined(mine) as attached:
        assert not attached  # the caller starts Airflow here (nothing is started in this test)
        assert home_airflow.read(mine.home) is None
    replaced = home_airflow.read(mine.home)
    assert replaced is not None and replaced.keep and replaced.users == [home_airflow.me()]
    assert replaced.port == mine.port


def test_an_airflow_that_does_not_answer_is_replaced(tmp_path):
    mine = airflow(tmp_path)
    home_airflow.write(mine.home, live(1, tmp_path))  # alive processes, nothing on the port
    with joined(mine) as attached:
        assert not attached


def test_the_last_user_of_an_unkept_airflow_stops_it(tmp_path, health):
    mine = airflow(tmp_path)
    other = Proc.of(1)  # another live process using it
    home_airflow.write(mine.home, live(health, tmp_path, users=[other]))
    with joined(mine) as attached:
        assert attached
    stopped: list[bool] = []
    mine.stop = lambda *a, **k: stopped.append(True)  # type: ignore[method-assign]
    assert leave(mine) is False and stopped == []  # pid 1 still uses it
    home_airflow.write(mine.home, live(health, tmp_path, users=[home_airflow.me()]))
    assert leave(mine) is True and stopped == [True]
    assert home_airflow.read(mine.home) is None
