"""A home's shared private Airflow: its record, the lock, and what is left of a stale one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from trialflow.cli import home_airflow
from trialflow.cli.home_airflow import MAX_RECORD_BYTES, Proc, Running
from trialflow.cli.shared_airflow import kill_leftovers


def record(**changes) -> Running:
    me = home_airflow.me()
    return Running(**{"port": 8080, "components": {"scheduler": me}, "dags_folder": "/d", "users": [me]} | changes)


def test_a_record_reads_back_and_a_foreign_one_is_stale(tmp_path: Path):
    home_airflow.write(tmp_path, record(keep=True))
    assert home_airflow.read(tmp_path) == record(keep=True)
    for text in ("", "[]", '{"version": 99}', '{"version": 1, "port": "x"}', "{" * 10_000, '{"version": 1}'):
        home_airflow.record_path(tmp_path).write_text(text)
        assert home_airflow.read(tmp_path) is None, text
    home_airflow.record_path(tmp_path).write_text(" " * (MAX_RECORD_BYTES + 1) + record().to_json())
    assert home_airflow.read(tmp_path) is None
    home_airflow.forget(tmp_path)
    assert home_airflow.read(tmp_path) is None


def test_a_pid_given_to_another_process_is_not_ours():
    me = home_airflow.me()
    assert me.alive()
    assert not Proc(me.pid, me.started - 5).alive()  # the same pid, started at another time
    assert not Proc(2**22 + 1, 0.0).alive()
    assert record().alive() and not record(components={}).alive()
    assert record(users=[me, Proc(me.pid, 1.0)]).live_users() == [me]


def test_the_lock_lets_one_process_decide_at_a_time(tmp_path: Path):
    order: list[str] = []

    def second() -> None:
        with home_airflow.locked(tmp_path):
            order.append("second")

    with home_airflow.locked(tmp_path):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.3)
        order.append("first")
    thread.join(5)
    assert order == ["first", "second"]


def test_whats_left_of_a_killed_component_goes_with_it_and_nothing_else(tmp_path: Path):
    """A scheduler killed alone leaves its LocalExecutor workers (measured: 16 idle processes)."""
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); time.sleep(60)",
        ],
        start_new_session=True,
    )
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(leader.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        (worker,) = psutil.Process(leader.pid).children()
        component = Proc.of(leader.pid)
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait(5)
        assert worker.is_running()
        kill_leftovers(record(components={"scheduler": component}))
        worker.wait(5)
        assert not worker.is_running()
        assert other.poll() is None  # another process group
    finally:
        for proc in (leader, other):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
