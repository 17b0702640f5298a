"""The local platform against real processes."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.experiment_setup import code_folder
from trialflow.config.platforms import LocalConfig
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.local import LocalPlatform, local_status, process_alive

PY = sys.executable


@pytest.fixture
def platform(tmp_path: Path) -> LocalPlatform:
    p = LocalPlatform(LocalConfig(), tmp_path / "exp")
    p.prepare_sync("e1")
    return p


@pytest.fixture
def code(tmp_path: Path) -> Path:
    trial = (
        "import sys, time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        "for i in range(p.get('steps', 3)):\n    trial.report_intermediate_result(i * p['x'])\n"
        "    time.sleep(p.get('pause', 0))\n"
        "trial.report_final_result({'default': p['x'], 'n': p.get('steps', 3)})\nsys.exit(p.get('rc', 0))\n"
    )
    return code_folder(tmp_path, {"trial.py": trial})


def spec(code: Path, index: int, command: str = f"{PY} trial.py", **params) -> TrialSpec:
    return TrialSpec("e1", f"e1-{index:04d}", index, index, {"x": 1.5, **params}, command, code)


def follow(platform: LocalPlatform, handle: dict, timeout: float = 60) -> tuple[TrialStatus, list, str | None]:
    async def run():
        cursor, metrics = {}, []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            update = await platform.poll(handle, cursor)
            metrics.extend(update.metrics)
            cursor = update.cursor
            if update.status.is_terminal:
                return update.status, metrics, update.message
            await asyncio.sleep(0.05)
        raise TimeoutError

    return asyncio.run(run())


@pytest.mark.parametrize(
    "exit_code, cancel, alive",
    itertools.product([None, 0, 1, 137], [None, TrialStatus.EARLY_STOPPED, TrialStatus.USER_CANCELED], [True, False]),
)
def test_status_map_is_total(exit_code, cancel, alive):
    status = local_status(exit_code, cancel, alive)
    if exit_code == 0:
        assert status == TrialStatus.SUCCEEDED
    elif cancel is not None:
        assert status == (TrialStatus.RUNNING if alive else cancel)
    elif exit_code is not None:
        assert status == TrialStatus.FAILED
    else:
        assert status == (TrialStatus.RUNNING if alive else TrialStatus.FAILED)


def test_trial_runs_in_the_code_dir_with_nni_env_and_reports(platform, code):
    handle = platform.submit_sync(spec(code, 0))
    status, metrics, _ = follow(platform, handle)
    assert status == TrialStatus.SUCCEEDED
    assert [(m.type, m.value) for m in metrics] == [
        ("PERIODICAL", 0.0),
        ("PERIODICAL", 1.5),
        ("PERIODICAL", 3.0),
        ("FINAL", {"default": 1.5, "n": 3}),
    ]
    trial_dir = Path(handle["trial_dir"])
    assert trial_dir == platform.experiment_dir / "trials" / "e1-0000"
    assert (trial_dir / "parameter.cfg").exists() and (trial_dir / "stdout").exists()


def test_environment_and_working_directory(platform, code):
    (code / "env.py").write_text(
        "import os, json\njson.dump({k: v for k, v in os.environ.items() "
        "if k.startswith('NNI_') or k == 'CUDA_VISIBLE_DEVICES'} | {'cwd': os.getcwd()}, "
        "open(os.environ['NNI_OUTPUT_DIR'] + '/env.json', 'w'))\n"
    )
    os.environ["NNI_TRIAL_COMMAND_CHANNEL"] = "http://stale"  # a stale var in the worker must not leak in
    try:
        handle = platform.submit_sync(spec(code, 1, f"{PY} env.py"))
    finally:
        del os.environ["NNI_TRIAL_COMMAND_CHANNEL"]
    assert follow(platform, handle)[0] == TrialStatus.SUCCEEDED
    import json

    env = json.loads((Path(handle["trial_dir"]) / "env.json").read_text())
    assert env["cwd"] == str(code)
    assert env["NNI_PLATFORM"] == "local" and env["NNI_TRIAL_JOB_ID"] == "e1-0001" and env["NNI_EXP_ID"] == "e1"
    assert env["NNI_SYS_DIR"] == env["NNI_OUTPUT_DIR"] == handle["trial_dir"]
    assert env["NNI_TRIAL_SEQ_ID"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert "NNI_TRIAL_COMMAND_CHANNEL" not in env


def test_failing_trial_is_failed_with_its_exit_code(platform, code):
    handle = platform.submit_sync(spec(code, 2, rc=3))
    status, metrics, message = follow(platform, handle)
    assert status == TrialStatus.FAILED and "exited with code 3" in message
    assert metrics[-1].is_final  # what it reported before failing is still read


def test_missing_code_dir_is_a_clear_error(platform, tmp_path):
    with pytest.raises(FileNotFoundError, match="trialCodeDirectory"):
        platform.submit_sync(spec(tmp_path / "nope", 3))


def test_submit_is_idempotent_and_reattaches(platform, code):
    s = spec(code, 4, pause=0.3)
    first = platform.submit_sync(s)
    again = platform.submit_sync(s)
    assert again["pid"] == first["pid"]
    assert follow(platform, again)[0] == TrialStatus.SUCCEEDED
    after = platform.submit_sync(s)  # a retry after the end re-attaches to the finished trial
    assert after["pid"] == first["pid"]
    assert follow(platform, after)[0] == TrialStatus.SUCCEEDED
    assert len((Path(first["trial_dir"]) / ".nni" / "metrics").read_bytes().split(b"ME")) - 1 == 4


def test_racing_submits_launch_one_process(platform, code):
    s = spec(code, 5, pause=0.2)
    handles: list[dict] = []
    threads = [threading.Thread(target=lambda: handles.append(platform.submit_sync(s))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({h["pid"] for h in handles}) == 1


def test_cancel_kills_the_whole_tree_including_escaped_sessions(platform, code, tmp_path):
    pids = tmp_path / "pids"
    command = (
        f"sleep 300 & echo $! >> {pids}; setsid sleep 300 & echo $! >> {pids}; "
        f"{PY} -c 'import time; time.sleep(300)' & echo $! >> {pids}; wait"
    )
    handle = platform.submit_sync(spec(code, 6, command))
    deadline = time.monotonic() + 10
    while (not pids.exists() or len(pids.read_text().split()) < 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    children = [int(p) for p in pids.read_text().split()]
    assert all(process_alive(p) for p in children)
    platform.cancel_sync(handle, TrialStatus.EARLY_STOPPED, "maxTrialDuration exceeded")
    assert not any(process_alive(p) for p in children + [handle["pid"]])
    status, _, message = follow(platform, handle)
    assert (status, message) == (TrialStatus.EARLY_STOPPED, "maxTrialDuration exceeded")


def test_cancel_escalates_to_kill_for_a_trial_that_ignores_term(platform, code, monkeypatch):
    monkeypatch.setattr("trialflow.platforms.local.KILL_GRACE_SECONDS", 0.5)
    (code / "stubborn.py").write_text(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "open('ready', 'w').close()\ntime.sleep(300)\n"
    )
    handle = platform.submit_sync(spec(code, 7, f"{PY} stubborn.py"))
    while not (code / "ready").exists():
        time.sleep(0.05)
    platform.cancel_sync(handle, TrialStatus.USER_CANCELED, "user")
    assert follow(platform, handle)[0] == TrialStatus.USER_CANCELED


def test_cancel_after_success_keeps_success(platform, code):
    handle = platform.submit_sync(spec(code, 8))
    assert follow(platform, handle)[0] == TrialStatus.SUCCEEDED
    platform.cancel_sync(handle, TrialStatus.EARLY_STOPPED, "too late")
    assert follow(platform, handle)[0] == TrialStatus.SUCCEEDED


def test_a_cancel_written_while_a_restart_moves_the_control_folder_lands_in_the_new_one(
    platform, tmp_path, monkeypatch
):
    """A stop at the instant a restart moves the ended attempt's control folder aside (with
    the stop's temporary file in it): the request is written again, not lost to an error."""
    import json

    from trialflow.platforms import local

    sys_dir = tmp_path / "trial"
    (sys_dir / local.CONTROL_DIR).mkdir(parents=True)
    real_replace, moved = os.replace, []

    def replace_after_the_move(src, dst):
        if not moved:  # the restart's archive, between the write and the rename
            moved.append(1)
            os.rename(sys_dir / local.CONTROL_DIR, sys_dir / local.ATTEMPT_DIR.format(0))
        return real_replace(src, dst)

    monkeypatch.setattr(local.os, "replace", replace_after_the_move)
    platform._write_cancel(sys_dir, TrialStatus.USER_CANCELED, "stopped by ann")
    assert moved and json.loads((sys_dir / local.CANCEL_FILE).read_text())["reason"] == "stopped by ann"


def test_a_killed_trial_is_failed_not_running_forever(platform, code):
    handle = platform.submit_sync(spec(code, 9, "sleep 300"))
    os.killpg(handle["pid"], 9)
    status, _, message = follow(platform, handle)
    assert status == TrialStatus.FAILED and "disappeared" in message


def test_render_shows_what_would_run(platform, code):
    rendered = platform.render(spec(code, 10))
    assert rendered["command"] == f"{PY} trial.py"
    assert rendered["working_directory"] == str(code)
    assert rendered["environment"]["NNI_TRIAL_JOB_ID"] == "e1-0010"
    assert rendered["parameter.cfg"]["parameters"] == {"x": 1.5}
    assert not (platform.experiment_dir / "trials" / "e1-0010").exists()


def test_a_reused_pid_is_not_mistaken_for_the_trial():
    import psutil

    me = os.getpid()
    assert process_alive(me, psutil.Process(me).create_time())
    assert not process_alive(me, psutil.Process(me).create_time() - 3600)  # same pid, another process
    assert process_alive(me, psutil.Process(me).create_time() + 30)  # a wrapper slow to record its start


def test_the_handle_records_when_the_wrapper_started(platform, code):
    handle = platform.submit_sync(spec(code, 11, "sleep 2"))
    assert handle["started"] is not None and process_alive(handle["pid"], handle["started"])
    platform.cancel_sync(handle, TrialStatus.USER_CANCELED, "done")


# -- GPU scheduling (a fake nvidia-smi on PATH describing the GPUs) ---------------------------

FAKES = Path(__file__).resolve().parents[1] / "helpers" / "fakes"
GPU_TRIAL = (
    "import os, time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
    "open('gpus-' + os.environ['NNI_TRIAL_JOB_ID'], 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])\n"
    "while not os.path.exists('release-' + os.environ['NNI_TRIAL_JOB_ID']):\n    time.sleep(0.05)\n"
    "trial.report_final_result(1.0)\n"
)


@pytest.fixture
def gpus(tmp_path, monkeypatch):
    import json

    state = tmp_path / "gpus.json"
    state.write_text(json.dumps({"gpus": ["GPU-0", "GPU-1"], "apps": []}))
    monkeypatch.setenv("FAKE_GPUS", str(state))
    monkeypatch.setenv("PATH", f"{FAKES}:{os.environ['PATH']}")
    work = tmp_path / "gpucode"
    work.mkdir()
    (work / "t.py").write_text(GPU_TRIAL)
    return work


def gpu_spec(code: Path, index: int, need: int) -> TrialSpec:
    return TrialSpec("e1", f"e1-{index:04d}", index, index, {}, f"{PY} t.py", code, gpu_number=need)


@pytest.mark.slow  # real processes for seconds: make test runs it, the inner loops do not
def test_trials_get_their_own_gpus_and_wait_for_a_free_one(tmp_path, gpus):
    platform = LocalPlatform(LocalConfig(), tmp_path / "exp")
    first = platform.submit_sync(gpu_spec(gpus, 0, 1))
    second = platform.submit_sync(gpu_spec(gpus, 1, 1))
    started: list[dict] = []
    third = threading.Thread(target=lambda: started.append(platform.submit_sync(gpu_spec(gpus, 2, 1))))
    third.start()
    deadline = time.monotonic() + 20
    while not ((gpus / "gpus-e1-0000").exists() and (gpus / "gpus-e1-0001").exists()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert {(gpus / "gpus-e1-0000").read_text(), (gpus / "gpus-e1-0001").read_text()} == {"0", "1"}
    time.sleep(1.0)
    assert third.is_alive() and not started, "the third trial waits: both GPUs are taken"
    (gpus / "release-e1-0000").write_text("")
    assert follow(platform, first)[0] == TrialStatus.SUCCEEDED
    third.join(20)
    assert started
    deadline = time.monotonic() + 20  # submit returns once launched; the trial writes its file soon after
    while not (gpus / "gpus-e1-0002").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (gpus / "gpus-e1-0002").read_text() == (gpus / "gpus-e1-0000").read_text()
    for i in (1, 2):
        (gpus / f"release-e1-000{i}").write_text("")
    assert follow(platform, second)[0] == follow(platform, started[0])[0] == TrialStatus.SUCCEEDED
    assert list(platform.claims_dir.iterdir()) == []  # released when the trials ended


def test_a_trial_may_take_every_gpu_and_gpu_zero_means_none(tmp_path, gpus):
    platform = LocalPlatform(LocalConfig(), tmp_path / "exp")
    everything = platform.submit_sync(gpu_spec(gpus, 0, 2))
    none = platform.submit_sync(gpu_spec(gpus, 1, 0))
    deadline = time.monotonic() + 20
    while not ((gpus / "gpus-e1-0000").exists() and (gpus / "gpus-e1-0001").exists()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (gpus / "gpus-e1-0000").read_text() == "0,1"
    assert (gpus / "gpus-e1-0001").read_text() == ""  # trialGpuNumber 0: no GPU visible
    for i in (0, 1):
        (gpus / f"release-e1-000{i}").write_text("")
    assert follow(platform, everything)[0] == follow(platform, none)[0] == TrialStatus.SUCCEEDED


def test_a_trial_that_can_never_fit_is_refused_at_once(tmp_path, gpus):
    from trialflow.platforms.gpus import GpuRequestError

    platform = LocalPlatform(LocalConfig(gpuIndices=[1]), tmp_path / "exp")
    with pytest.raises(GpuRequestError, match="trialGpuNumber 2 can never fit on this machine"):
        platform.submit_sync(gpu_spec(gpus, 0, 2))


def test_a_launch_that_died_before_its_pid_is_taken_over(platform, code, monkeypatch):
    """A worker killed between marking the launch and starting the launcher must not block
    every retry of that trial ('a launch was started but never recorded a pid')."""
    import trialflow.platforms.local as local

    monkeypatch.setattr(local, "LAUNCH_WAIT_SECONDS", 1.0)
    sys_dir = platform.trial_dir("e1-0042")
    (sys_dir / local.CONTROL_DIR).mkdir(parents=True)
    marker = sys_dir / local.LAUNCH_FILE
    marker.write_text("")
    old = time.time() - local.LAUNCH_WAIT_SECONDS - 5
    os.utime(marker, (old, old))
    handle = platform.submit_sync(spec(code, 42))
    assert follow(platform, handle)[0] == TrialStatus.SUCCEEDED


def test_a_failed_launch_can_be_retried(platform, code, monkeypatch):
    import subprocess as sp

    real = sp.Popen
    monkeypatch.setattr(sp, "Popen", lambda *a, **k: (_ for _ in ()).throw(OSError("fork failed")))
    with pytest.raises(OSError, match="fork failed"):
        platform.submit_sync(spec(code, 43))
    monkeypatch.setattr(sp, "Popen", real)
    assert follow(platform, platform.submit_sync(spec(code, 43)))[0] == TrialStatus.SUCCEEDED


def test_a_trial_ending_between_the_status_reads_is_not_vanished(platform: LocalPlatform, code: Path, monkeypatch):
    """The wrapper writes its exit code, then ends. A poll that read the exit code first (none yet)
    and liveness second (gone by then) reported a finished trial as FAILED "vanished"."""
    import trialflow.platforms.local as local

    handle = platform.submit_sync(spec(code, 0))
    assert follow(platform, handle)[0] == TrialStatus.SUCCEEDED
    state = Path(handle["trial_dir"]) / ".nni" / "state"
    hidden = state.with_name("state.hidden")
    state.rename(hidden)  # as if the wrapper had not written it yet

    def wrapper_ends_now(pid: int, started: float | None = None) -> bool:
        if hidden.exists():
            hidden.rename(state)  # ...and it writes the exit code and ends in between
        return False

    monkeypatch.setattr(local, "process_alive", wrapper_ends_now)
    status, exit_code, message = platform.status(handle)
    assert (status, exit_code) == (TrialStatus.SUCCEEDED, 0), message


_OTHER_HOST_PROBE = """
import json, sys
from pathlib import Path
from trialflow.config.platforms import LocalConfig
from trialflow.platforms.hosts import TrialOnAnotherHost
from trialflow.platforms.base import TrialStatus
from trialflow.platforms.local import LocalPlatform

handle = json.loads(sys.argv[2])
platform = LocalPlatform(LocalConfig(), Path(sys.argv[1]))
for name, act in (
    ("poll", lambda: platform.poll_sync(handle, {})),
    ("cancel", lambda: platform.cancel_sync(handle, TrialStatus.USER_CANCELED, "from worker-b")),
):
    try:
        act()
        print(name, "went ahead")
    except TrialOnAnotherHost as exc:
        print(name, "refused:", exc)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a second host (its own UTS namespace) needs root")
def test_a_trial_is_neither_followed_nor_stopped_from_another_host(platform, code):
    """Another host sees the same pid numbers and, on a shared folder, the same files: a
    process there named like the trial's would be read as it, or killed. Run in its own UTS
    namespace (its own hostname, as a Celery worker on another machine), the platform says
    where the trial is instead, and the trial lives on."""
    import json
    import socket
    import subprocess

    handle = platform.submit_sync(spec(code, 12, "sleep 30"))
    assert handle["host"] == socket.gethostname()
    done = subprocess.run(
        [
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname worker-b && exec "$0" -c "$1" "$2" "$3"',
            PY,
            _OTHER_HOST_PROBE,
            str(platform.experiment_dir),
            json.dumps(handle),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["poll refused", "cancel refused"], done.stdout
    assert f"runs on host {socket.gethostname()!r}, and this runs on 'worker-b'" in lines[0]
    assert process_alive(handle["pid"], handle["started"])
    platform.cancel_sync(handle, TrialStatus.USER_CANCELED, "test over")
    assert follow(platform, handle)[0] == TrialStatus.USER_CANCELED


# -- the follow loop's pause ends when the trial does ---------------------------------------------


def _pause(platform: LocalPlatform, handle: dict, timeout: float) -> float:
    started = time.monotonic()
    asyncio.run(platform.wait_for_change(handle, {}, timeout))
    return time.monotonic() - started


def test_the_pause_between_polls_ends_when_the_trial_ends(platform, code):
    """A trial's end is seen when it happens, not a poll interval later (the worker's wait and
    the triggerer alike): a 30 s pause returns once the 0.5 s trial is over."""
    handle = platform.submit_sync(spec(code, 20, "sleep 0.5"))
    assert _pause(platform, handle, 30) < 10
    assert asyncio.run(platform.poll(handle, {})).status == TrialStatus.SUCCEEDED
    assert _pause(platform, handle, 30) < 1  # over already: nothing to wait for


def test_the_pause_watches_a_trial_another_process_launched(platform, code):
    """The triggerer follows trials that a worker launched: not its children, still watched."""
    import json
    import subprocess

    launcher = (
        "import json, sys\nfrom pathlib import Path\nfrom trialflow.config.platforms import LocalConfig\n"
        "from trialflow.platforms.base import TrialSpec\nfrom trialflow.platforms.local import LocalPlatform\n"
        "p = LocalPlatform(LocalConfig(), Path(sys.argv[1]))\n"
        "print(json.dumps(p.submit_sync(TrialSpec('e1', 'e1-0021', 21, 21, {}, 'sleep 1', Path(sys.argv[2])))))\n"
    )
    out = subprocess.run(
        [PY, "-c", launcher, str(platform.experiment_dir), str(code)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    handle = json.loads(out.stdout)
    assert _pause(platform, handle, 30) < 10
    assert asyncio.run(platform.poll(handle, {})).status == TrialStatus.SUCCEEDED


def test_a_pid_now_of_another_process_is_not_waited_for(platform, code):
    """The recorded pid belongs to a later process now (the trial's wrapper is long gone): the
    pause does not wait for that process, and the poll says the trial is over."""
    import subprocess

    handle = platform.submit_sync(spec(code, 22, "true"))
    follow(platform, handle)
    later = subprocess.Popen(["sleep", "30"])
    try:
        reused = {**handle, "pid": later.pid, "started": handle["started"] - 3600}
        assert _pause(platform, reused, 30) < 1
        assert asyncio.run(platform.poll(reused, {})).status.is_terminal
    finally:
        later.kill()
        later.wait()


def test_a_trial_of_another_host_is_paused_for_not_watched(platform, code):
    handle = platform.submit_sync(spec(code, 23, "sleep 0.2"))
    elsewhere = {**handle, "host": "another-host"}
    assert _pause(platform, elsewhere, 0.5) >= 0.5
    follow(platform, handle)


def test_a_pid_file_being_written_is_not_read_as_a_launch(platform, code):
    """The wrapper writes its pid line with one echo and no rename: an empty or cut-short file
    is a launch still under way, never a pid (a cut "12" of "1234" would name another process)."""
    handle = platform.submit_sync(spec(code, 24, "true"))
    follow(platform, handle)
    sys_dir = Path(handle["trial_dir"])
    pid_file = sys_dir / ".trialflow" / "pid"
    whole = pid_file.read_text()
    assert whole.endswith("\n") and whole.split()[0] == str(handle["pid"])
    (sys_dir / ".trialflow" / "launching").unlink(missing_ok=True)
    pid_file.write_text(whole[:2])
    assert platform._reattach(sys_dir, {}) is None
    pid_file.write_text(whole)
    assert platform._reattach(sys_dir, {})["pid"] == handle["pid"]
    state = (sys_dir / ".nni" / "state").read_text()
    assert state.endswith("\n") and state.split()[0] == "0" and len(state.split()[1]) == 13  # ms since the epoch


def test_a_failed_trials_message_ends_with_its_exceptions_last_line(platform, code):
    """So the table shows why, and a search for the exception finds the trial."""
    (code / "boom.py").write_text(
        "import sys\nprint('noise', file=sys.stderr)\nraise ValueError('learning rate 3.2 diverged')\n"
    )
    handle = platform.submit_sync(spec(code, 5, f"{PY} boom.py"))
    status, _, message = follow(platform, handle)
    assert status == TrialStatus.FAILED
    assert message == "trial command exited with code 1: ValueError: learning rate 3.2 diverged"


STUBBORN = (
    "import os, signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    # a grandchild in a session of its own that ignores SIGTERM too (a data loader, a server)
    "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'], start_new_session=True)\n"
    "open('pids', 'w').write(f'{os.getpid()} {child.pid}\\n')\n"
    "time.sleep(600)\n"
)


@pytest.mark.slow
def test_a_stop_ends_in_sigkill_even_when_the_asker_is_killed_during_the_grace(platform, code, tmp_path):
    """Issue 36 (0): Airflow SIGKILLs a task 5 s after its SIGTERM, so a task's on_kill that
    waited out the 5 s grace itself never sent the KILL, and a trial trapping SIGTERM (and its
    setsid grandchild) ran on. The asker here is a process whose whole process group is
    SIGKILLed 1 s into the stop, as Airflow's supervisor kills a task (os.killpg)."""
    (code / "stubborn.py").write_text(STUBBORN)
    handle = platform.submit_sync(spec(code, 11, f"{PY} stubborn.py"))
    deadline = time.monotonic() + 20
    while not (code / "pids").exists() or not (code / "pids").read_text().endswith("\n"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    trial_pid, grandchild = map(int, (code / "pids").read_text().split())
    asker = tmp_path / "asker.py"
    asker.write_text(
        "import json, sys\nfrom pathlib import Path\n"
        "from trialflow.config.platforms import LocalConfig\n"
        "from trialflow.platforms.base import TrialStatus\n"
        "from trialflow.platforms.local import LocalPlatform\n"
        "p = LocalPlatform(LocalConfig(), Path(sys.argv[1]))\n"
        "print('asking', flush=True)\n"
        "p.cancel_sync(json.loads(sys.argv[2]), TrialStatus.USER_CANCELED, 'its task was marked failed')\n"
        "print('returned', flush=True)\n"
    )
    import json
    import signal
    import subprocess

    proc = subprocess.Popen(
        [PY, str(asker), str(platform.experiment_dir), json.dumps(handle)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "asking\n"
    time.sleep(1.0)
    assert process_alive(trial_pid) and process_alive(grandchild)  # TERM ignored, grace not over
    os.killpg(proc.pid, signal.SIGKILL)  # as Airflow's supervisor does 5 s after its SIGTERM
    proc.wait()
    gone_by = time.monotonic() + 15  # the 5 s grace, then the KILL, with room for a loaded machine
    while any(process_alive(p) for p in (trial_pid, grandchild, handle["pid"])):
        assert time.monotonic() < gone_by, "the trial outlived its stop"
        time.sleep(0.1)
    status, _, message = follow(platform, handle)
    assert (status, message) == (TrialStatus.USER_CANCELED, "its task was marked failed")


@pytest.mark.parametrize(
    ("status", "exit_code", "fault"),
    [
        ("FAILED", None, True),  # the wrapper gone without an exit code
        ("FAILED", 137, True),  # SIGKILL (the OOM killer)
        ("FAILED", 143, True),  # a SIGTERM nobody here asked for
        ("FAILED", 129, True),
        ("FAILED", 128, False),  # the trial's own exit(128)
        ("FAILED", 1, False),
        ("FAILED", 2, False),
        ("SUCCEEDED", 0, False),
        ("USER_CANCELED", 143, False),  # a stop trialflow asked for
        ("EARLY_STOPPED", None, False),
        ("SYS_CANCELED", 137, False),
    ],
)
def test_a_fault_is_a_failure_by_a_signal_or_a_vanished_wrapper(status, exit_code, fault):
    from trialflow.platforms.local import local_fault

    assert local_fault(TrialStatus(status), exit_code) is fault
