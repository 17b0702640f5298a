"""Processes a trial leaves behind: cancel, maxTrialDuration and a trial's end stop everything
it started, even what left its process group and session, locally and on a remote machine, and
nothing of another trial's."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.remote import machine_entry, remote_platform
from trialflow.config.model import AlgorithmConfig
from trialflow.config.platforms import LocalConfig
from trialflow.config.search_space import parse_search_space
from trialflow.experiment.follow import TIMEOUT_REASON, follow_trial
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.leftovers import MARK_VAR, stop_marked_command, stop_trial_command, trial_mark
from trialflow.platforms.local import LocalPlatform
from trialflow.tuning.asker import ask

PY = sys.executable

#: Ways to leave the process group or the tree; {n} is a unique sleep length to find them by.
ESCAPES = {
    "setsid child": "setsid sleep {n} & sleep 600",
    "double fork": "(setsid sleep {n} &); sleep 600",
    "nohup child": "nohup sleep {n} >/dev/null 2>&1 & sleep 600",
    "new session from python": (
        f"{PY} -c 'import subprocess, time; "
        'subprocess.Popen(["sleep", "{n}"], start_new_session=True); time.sleep(600)\''
    ),
}


def _sleepers(n: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["cmdline"] == ["sleep", str(n)] and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def _wait_for(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture
def unique():
    """Unique sleep lengths; whatever a failing test left is killed afterwards."""
    used: list[int] = []

    def make() -> int:
        n = random.randint(100_000, 999_999)
        used.append(n)
        return n

    yield make
    for n in used:
        for proc in _sleepers(n):
            proc.kill()


@pytest.fixture
def local(tmp_path: Path) -> LocalPlatform:
    (tmp_path / "code").mkdir()
    platform = LocalPlatform(LocalConfig(), tmp_path / "exp")
    platform.prepare_sync("eproc")
    return platform


def _spec(code: Path, index: int, command: str) -> TrialSpec:
    return TrialSpec("eproc", f"eproc-{index:04d}", index, index, {}, command, code)


@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_cancel_stops_what_left_the_process_group(local, tmp_path, unique, escape):
    n = unique()
    handle = local.submit_sync(_spec(tmp_path / "code", 0, ESCAPES[escape].format(n=n)))
    assert _wait_for(lambda: len(_sleepers(n)) == 1)
    local.cancel_sync(handle, TrialStatus.USER_CANCELED, "test")
    assert _wait_for(lambda: not _sleepers(n)), f"{escape}: the escaped process survived the cancel"


def test_a_finished_trial_leaves_no_process_behind(local, tmp_path, unique):
    n = unique()
    handle = local.submit_sync(_spec(tmp_path / "code", 0, f"setsid sleep {n} & (setsid sleep {n} &); echo done"))
    assert _wait_for(lambda: (Path(handle["trial_dir"]) / ".nni" / "state").exists())
    assert not _sleepers(n)
    status, _, _ = local.status(handle)
    assert status == TrialStatus.SUCCEEDED


def test_max_trial_duration_stops_what_left_the_process_group(local, tmp_path, unique, store):
    n = unique()
    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    random_tuner = AlgorithmConfig(name="Random")
    store.open_experiment("eproc")
    asked = ask(store, "eproc", 0, "eproc-0000", random_tuner, space)
    handle = local.submit_sync(_spec(tmp_path / "code", 0, ESCAPES["double fork"].format(n=n)))
    assert _wait_for(lambda: len(_sleepers(n)) == 1)
    outcome = asyncio.run(
        follow_trial(local, store, handle, asked.storage_id, deadline=time.time() + 0.5, poll_interval=0.1)
    )
    assert outcome.status == TrialStatus.EARLY_STOPPED and outcome.message == TIMEOUT_REASON
    assert _wait_for(lambda: not _sleepers(n))


def test_another_trials_processes_are_untouched(local, tmp_path, unique):
    mine, theirs = unique(), unique()
    handle = local.submit_sync(_spec(tmp_path / "code", 0, ESCAPES["setsid child"].format(n=mine)))
    other = local.submit_sync(_spec(tmp_path / "code", 1, ESCAPES["setsid child"].format(n=theirs)))
    assert _wait_for(lambda: _sleepers(mine) and _sleepers(theirs))
    local.cancel_sync(handle, TrialStatus.USER_CANCELED, "test")
    assert _wait_for(lambda: not _sleepers(mine))
    assert _sleepers(theirs), "the other trial's process was killed too"
    local.cancel_sync(other, TrialStatus.USER_CANCELED, "test")
    assert _wait_for(lambda: not _sleepers(theirs))


def test_the_scan_spares_the_shell_that_runs_it(tmp_path):
    """The wrapper runs the scan with the mark in its own environment: it must survive it."""
    mark = trial_mark(str(tmp_path))
    script = stop_marked_command(mark, 1) + "\necho alive-after-scan\n"
    import subprocess

    result = subprocess.run(
        ["bash", "-c", script], env={**os.environ, MARK_VAR: mark}, capture_output=True, text=True, timeout=30
    )
    assert result.stdout.strip() == "alive-after-scan"


@pytest.mark.parametrize("leader, pids", [(None, []), (0, [0]), (1, [1, 0]), (-1, [-1, -7])])
def test_the_stopper_never_signals_every_process_of_the_account(tmp_path, leader, pids):
    """``kill -- -0`` or ``-1`` would reach every process the account owns (this test's too):
    a leader or pid that is not above 1 is left out, and the stopper ends at once."""
    import subprocess

    script = stop_trial_command(leader, pids, trial_mark(str(tmp_path)), 5)
    assert "tf_pg=0;" in script and "tf_tree='';" in script
    started = time.monotonic()
    result = subprocess.run(["bash", "-c", script + "\necho survived\n"], capture_output=True, text=True, timeout=30)
    assert result.stdout.strip() == "survived" and time.monotonic() - started < 4


def test_remote_cancel_and_end_stop_what_left_the_process_group(ssh_servers, tmp_path, unique):
    a, _ = ssh_servers
    code = tmp_path / "code"
    code.mkdir()
    (code / "t.py").write_text("print(1)\n")
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    platform.prepare_sync("eprocrem")
    n, m = unique(), unique()
    running = platform.submit_sync(
        TrialSpec("eprocrem", "eprocrem-0000", 0, 0, {}, ESCAPES["double fork"].format(n=n), code)
    )
    ended = platform.submit_sync(
        TrialSpec("eprocrem", "eprocrem-0001", 1, 1, {}, f"setsid sleep {m} & echo done", code)
    )
    assert _wait_for(lambda: len(_sleepers(n)) == 1)
    assert _wait_for(lambda: (Path(ended["trial_dir"]) / "exit_code").exists())
    assert not _sleepers(m), "a finished remote trial left a process behind"
    platform.cancel_sync(running, TrialStatus.USER_CANCELED, "test")
    assert _wait_for(lambda: not _sleepers(n)), "the escaped remote process survived the cancel"


@pytest.mark.parametrize("line", ["hello world\n", "123 soon\n", "\udcff\n"])
def test_a_pid_file_that_is_not_the_wrappers_says_so_on_a_retry(tmp_path, line):
    """The wrapper's pid line lives in the trial's output folder, where the trial's code writes
    too. A retry that finds something else there neither crashes on it nor takes it for 'not
    launched' (that would run the trial twice): it names the file and what it holds."""
    platform = LocalPlatform(LocalConfig(), tmp_path / "exp")
    platform.prepare_sync("e1")
    trial_spec = TrialSpec("e1", "e1-0025", 25, 25, {}, "true", tmp_path)
    handle = platform.submit_sync(trial_spec)
    assert _wait_for(lambda: platform.status(handle)[0] == TrialStatus.SUCCEEDED)
    pid_file = Path(handle["trial_dir"]) / ".trialflow" / "pid"
    pid_file.write_bytes(line.encode(errors="surrogateescape"))
    with pytest.raises(RuntimeError, match=r"\.trialflow/pid holds .*not the trial wrapper's"):
        platform.submit_sync(trial_spec)
