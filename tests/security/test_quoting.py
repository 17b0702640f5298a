"""Every shell command trialflow builds, with hostile values in every field it takes, run
through a real bash: the values arrive as data, nothing in them ever runs, and the trial
command (the one thing meant to run) runs exactly as written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from trialflow.config.platforms import KubernetesStorageConfig, LocalConfig, RemoteConfig
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.gpus import release_command
from trialflow.platforms.kubernetes import storage as kube_storage
from trialflow.platforms.leftovers import stop_marked_command
from trialflow.platforms.local import LocalPlatform
from trialflow.platforms.remote import RemotePlatform
from trialflow.platforms.remote.commands import (
    ARCHIVE_OVERHEAD,
    CANCEL_FILE,
    LAUNCH_DIR,
    archive_within,
    cancel_request_command,
    claim_command,
    exists_command,
    launch_once_guard,
    launch_state_command,
    mkdir_command,
    output_archive_command,
    parse_launch_state,
    probe_command,
    read_command,
    resume_unpack_command,
    running_count_command,
    staging_command,
    take_over_command,
    upload_command,
    workdir_command,
)
from trialflow.trial import unpack
from trialflow.trial.packing import pack

#: A folder name that breaks every kind of careless quoting; each trick would leave a CANARY file.
HOSTILE = "a b'c\"d $(touch CANARY1) `touch CANARY2`;touch CANARY3 & |*?~ $HOME \\ \n e"
#: The trial command: meant to run, so it must arrive verbatim (quotes, $, backslashes and all).
COMMAND = "printf '%s|' \"$0\" 'it'\"'\"'s' \"\\$HOME\" > ran.txt; echo ran"


@pytest.fixture
def box():
    """A world-readable folder under /tmp (SSH users must reach it too), cleaned afterwards."""
    root = Path(tempfile.mkdtemp(prefix="trialflow-quote-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def stage(platform, experiment_id, code):
    """prepare, then put the code on the machines now (as the first trial would)."""
    from trialflow.platforms.event_loop import run_sync

    platform.prepare_sync(experiment_id)
    return run_sync(platform.stage_code(code))


def hostile_dir(root: Path, name: str) -> Path:
    path = root / f"{name} {HOSTILE}"
    path.mkdir(parents=True)
    os.chmod(path, 0o777)
    return path


def no_canary(root: Path) -> None:
    found = [p for p in [*root.rglob("CANARY*"), *Path.cwd().glob("CANARY*"), *Path("/tmp").glob("CANARY*")]]
    assert not found, f"a value ran as a command: {found}"


def bash(script: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_local_wrapper_runs_the_command_verbatim_in_hostile_folders(box):
    code = hostile_dir(box, "code")
    platform = LocalPlatform(LocalConfig(), hostile_dir(box, "exp"))
    platform.prepare_sync("equote")
    handle = platform.submit_sync(TrialSpec("equote", "equote-0000", 0, 0, {}, COMMAND, code))
    deadline = time.monotonic() + 30
    while platform.status(handle)[0] == TrialStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
    assert platform.status(handle)[0] == TrialStatus.SUCCEEDED
    assert (code / "ran.txt").read_text() == "bash|it's|$HOME|"
    no_canary(box)


def test_staging_and_probe_commands_with_hostile_paths(box):
    base = hostile_dir(box, "base")
    code = hostile_dir(box, "src")
    (code / "train.py").write_text("print(1)\n")
    packed = pack(code)
    archive = base / f"upload {HOSTILE}.tar.gz"
    archive.write_bytes(packed.archive)
    Path(f"{archive}.py").write_text(Path(unpack.__file__).read_text())
    python_dir = hostile_dir(box, "python")
    (python_dir / "python3").symlink_to(sys.executable)
    result = bash(staging_command(str(base), packed.short_digest, str(archive), str(python_dir / "python3")), box)
    assert result.stdout.strip() == "staged", result.stderr
    assert (base / ".code" / packed.short_digest / "train.py").read_text() == "print(1)\n"
    trial = hostile_dir(box, "trial")
    (trial / "pid").write_text(str(os.getpid()))
    (trial / "stdout.log").write_text("hello\n")
    out = bash(probe_command(str(trial), 0), box).stdout
    assert f"pid={os.getpid()}" in out and "alive=1" in out and out.endswith("hello\n")
    assert bash(read_command(str(trial), 2), box).stdout == "llo\n"
    claims = hostile_dir(box, "claims")
    (claims / "gpu0-slot0").mkdir()
    bash(release_command(str(claims), [(0, 0)]), box)
    assert not (claims / "gpu0-slot0").exists()
    bash(stop_marked_command(HOSTILE), box)
    no_canary(box)


def bash_in(command: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=60)


def test_submit_path_commands_with_hostile_folders(box):
    """The steps of a remote submit, each on its own, in folders named to break quoting: they
    do what they say to exactly the folder given, and twice is the same as once."""
    base = box / f"base {HOSTILE}"
    assert bash_in(mkdir_command(str(base / "trials")), box).returncode == 0
    assert (base / "trials").is_dir()
    assert bash_in(exists_command(str(base), "d"), box).stdout == "yes\n"
    assert bash_in(exists_command(str(base / "nope"), "e"), box).stdout == ""
    with pytest.raises(ValueError):
        exists_command(str(base), "d; touch CANARY4")
    archive = base / f"up {HOSTILE}.tar.gz"
    assert bash_in(upload_command(str(base), str(archive)), box, "payload").returncode == 0
    assert archive.read_text() == "payload"

    trial = base / "trials" / f"t {HOSTILE}"
    claims = [bash_in(claim_command(str(trial)), box).stdout.strip() for _ in range(3)]
    assert claims == ["claimed", "", ""]  # of racing submits, one launches
    assert (trial / LAUNCH_DIR).is_dir()
    assert bash_in(running_count_command(str(base / "trials")), box).stdout.strip() == "1"

    code = box / f"code {HOSTILE}"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "train.py").write_text("print(1)\n")
    os.chmod(code / "pkg" / "train.py", 0o444)
    result = bash_in(workdir_command(str(trial), str(code), in_place=False), box, '{"parameter_id": 0}')
    assert result.returncode == 0, result.stderr
    assert (trial / "parameter.cfg").read_text() == '{"parameter_id": 0}'
    assert (trial / "code" / "pkg" / "train.py").stat().st_ino == (code / "pkg" / "train.py").stat().st_ino
    assert os.access(trial / "code" / "pkg", os.W_OK)  # the trial may write beside its code
    shared = box / f"shared {HOSTILE}"
    result = bash_in(workdir_command(str(shared), str(code), in_place=True), box, "{}")
    assert result.returncode == 0 and (shared / "code").resolve() == code.resolve()

    guard = launch_once_guard(str(trial)) + "echo launched\n"
    assert [bash_in(guard, box).stdout for _ in range(2)] == ["launched\n", ""]

    (trial / "exit_code").write_text("0")
    assert bash_in(running_count_command(str(base / "trials")), box).stdout.strip() == "0"
    bash_in(cancel_request_command(str(trial)), box, '{"status": "USER_CANCELED"}')
    assert not (trial / CANCEL_FILE).exists()  # a trial that succeeded is not turned into a cancel
    (trial / "exit_code").unlink()
    bash_in(cancel_request_command(str(trial)), box, '{"status": "USER_CANCELED"}')
    bash_in(cancel_request_command(str(trial)), box, '{"status": "EARLY_STOPPED"}')
    assert (trial / CANCEL_FILE).read_text() == '{"status": "USER_CANCELED"}'  # the first reason wins
    no_canary(box)


def test_checkpoint_commands_with_hostile_folders(box):
    """A checkpoint archived from a trial folder named to break quoting, and unpacked for a
    restart into another: the same files arrive, once (a second unpack leaves the first), a
    symbolic link is archived as a link (never what it points to), and the archive goes."""
    import tarfile

    trial = box / f"trial {HOSTILE}"
    step = trial / "checkpoints" / "000000003"
    step.mkdir(parents=True)
    (step / "model.bin").write_bytes(b"weights")
    (step / "secret").symlink_to("/etc/hostname")
    archive = box / f"ckpt {HOSTILE}.tar"
    with archive.open("wb") as out:
        result = subprocess.run(
            ["bash", "-c", output_archive_command(str(trial), "checkpoints/000000003")],
            cwd=box,
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    assert result.returncode == 0, result.stderr
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["checkpoints/000000003/secret"].issym()  # a link, not /etc/hostname's bytes
    missing = bash_in(output_archive_command(str(trial), "checkpoints/000000009"), box)
    assert missing.returncode == 0 and missing.stdout == ""  # no such folder: nothing
    # issue 64, 5: a 1 TiB sparse file comes back cut at the bound, and is said to be past it
    with open(trial / "checkpoints" / "000000003" / "huge.bin", "wb") as fh:
        fh.truncate(1024**4)
    started = time.monotonic()
    with (box / "cut.tar").open("wb") as out:
        subprocess.run(
            ["bash", "-c", output_archive_command(str(trial), "checkpoints/000000003", max_bytes=1000)],
            cwd=box,
            stdout=out,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
    size = (box / "cut.tar").stat().st_size
    assert size == 1000 + ARCHIVE_OVERHEAD + 1 and not archive_within(size, 1000)
    assert time.monotonic() - started < 30  # tar stopped at the closed pipe
    assert archive_within(archive.stat().st_size, 1000)  # the bounded folder before it: within

    ours = box / f"ours {HOSTILE}.tar"
    with tarfile.open(ours, "w") as tar:
        tar.add(step / "model.bin", arcname="model.bin")
    folder = box / f"restart {HOSTILE}" / "resume"
    folder.parent.mkdir()
    assert bash_in(resume_unpack_command(str(folder), str(ours)), box).returncode == 0
    assert (folder / "model.bin").read_bytes() == b"weights" and not ours.exists()
    (folder / "model.bin").write_bytes(b"kept")
    with tarfile.open(ours, "w") as tar:
        tar.add(step / "model.bin", arcname="model.bin")
    assert bash_in(resume_unpack_command(str(folder), str(ours)), box).returncode == 0
    assert (folder / "model.bin").read_bytes() == b"kept" and not ours.exists()  # once, and cleaned
    no_canary(box)


def test_an_abandoned_claim_is_taken_over_once_and_a_launched_trial_never(box):
    """A submit that died between claiming a trial folder and launching leaves the claim and a
    half-written working directory: the next submit sees how old the claim is, and of several
    takers exactly one gets it, with the half-written files gone; once the trial has launched,
    a take-over changes nothing."""
    trial = box / "trials" / f"t {HOSTILE}"
    state = lambda: parse_launch_state(bash_in(launch_state_command(str(trial)), box).stdout)  # noqa: E731
    assert state() == ("none", 0.0)
    assert bash_in(claim_command(str(trial)), box).stdout.strip() == "claimed"
    (trial / "code").mkdir()
    (trial / "parameter.cfg.tmp").write_text("{")
    then = time.time() - 300
    os.utime(trial / LAUNCH_DIR, (then, then))
    kind, age = state()
    assert kind == "claimed" and 295 <= age <= 330
    assert bash_in(take_over_command(str(trial), 600), box).stdout == ""  # not stale by this measure
    assert (trial / LAUNCH_DIR).is_dir() and (trial / "code").is_dir()  # put back untouched
    takers = [bash_in(take_over_command(str(trial), 60), box).stdout.strip() for _ in range(3)]
    assert takers == ["claimed", "", ""]  # the later ones find the first taker's fresh claim
    assert sorted(p.name for p in trial.iterdir()) == [LAUNCH_DIR]  # the half-written files are gone
    kind, age = state()
    assert kind == "claimed" and age < 30  # a fresh claim, this taker's

    assert bash_in(launch_once_guard(str(trial)) + "echo launched\n", box).stdout == "launched\n"
    assert state() == ("launched", 0.0)
    (trial / "code").mkdir()
    assert bash_in(take_over_command(str(trial), 60), box).stdout == ""
    assert (trial / LAUNCH_DIR).is_dir() and (trial / "code").is_dir()  # a launched trial is left alone
    no_canary(box)


def test_remote_launch_script_with_hostile_python_path_and_folders(box):
    python_dir = hostile_dir(box, "bin")
    (python_dir / "python3").symlink_to(sys.executable)
    config = RemoteConfig.model_validate(
        {"platform": "remote", "machineList": [{"host": "127.0.0.1", "user": "u", "pythonPath": str(python_dir)}]}
    )
    platform = RemotePlatform(config, box / "exp")
    base = hostile_dir(box, "home")
    trial_dir = base / "trials" / "equote-0000"
    (trial_dir / "code").mkdir(parents=True)
    sdk = hostile_dir(box, "sdk")
    spec = TrialSpec("equote", "equote-0000", 0, 0, {}, COMMAND + "; command -v python3 > py.txt", box)
    script = platform.launch_script(
        spec, platform.machines[0], str(trial_dir), str(trial_dir / "code"), str(sdk), [(0, 0)], str(base)
    )
    result = bash(script, box)
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 30
    while not (trial_dir / "exit_code").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (trial_dir / "exit_code").read_text() == "0"
    assert (trial_dir / "code" / "ran.txt").read_text() == "bash|it's|$HOME|"
    assert (trial_dir / "code" / "py.txt").read_text().strip() == str(python_dir / "python3")
    assert "ran" in (trial_dir / "stdout.log").read_text()
    no_canary(box)


def test_kubernetes_start_script_with_hostile_paths(box, monkeypatch):
    monkeypatch.setattr(kube_storage, "WORK_DIR", str(hostile_dir(box, "work")))
    root = hostile_dir(box, "mount")
    paths = kube_storage.TrialPaths(
        sys_dir=str(root / "sys"),
        code_dir=str(root / "trialcode"),
        sdk_dir=str(root / "sdk"),
        log_dir=str(root / "logs"),
    )
    (root / "code").mkdir()
    (root / "sdk").mkdir()
    storage = KubernetesStorageConfig(storageType="pvc", claimName="c", localMountPoint=str(root))
    result = subprocess.run(
        ["sh", "-c", kube_storage.start_script(storage, paths, COMMAND)],
        cwd=box,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOSTNAME": "pod-0"},
    )
    assert result.returncode == 0, result.stderr
    assert (root / "trialcode" / "ran.txt").read_text() == "sh|it's|$HOME|"
    assert "ran" in (root / "logs" / "pod-0.log").read_text()
    no_canary(box)


def test_remote_trial_with_a_hostile_python_path_over_ssh(ssh_servers, box):
    """End to end on a real machine: pythonPath with quotes, $(...) and a space."""
    from tests.helpers.remote import machine_entry

    a, _ = ssh_servers
    python_dir = hostile_dir(box, "py")
    (python_dir / "python3").symlink_to("/usr/bin/python3")  # one the SSH user may run
    code = box / "code"
    code.mkdir()
    (code / "t.py").write_text(
        "from trialflow import trial\ntrial.get_next_parameter()\ntrial.report_final_result(1)\n"
    )
    config = RemoteConfig.model_validate(
        {"platform": "remote", "machineList": [machine_entry(a, "key", pythonPath=str(python_dir))]}
    )
    platform = RemotePlatform(config, box / "exp")
    stage(platform, "equoter", code)
    handle = platform.submit_sync(TrialSpec("equoter", "equoter-0000", 0, 0, {}, "python3 t.py", code))

    import asyncio

    async def follow() -> TrialStatus:
        for _ in range(300):
            update = await platform.poll(handle, {})
            if update.status.is_terminal:
                return update.status
            await asyncio.sleep(0.1)
        raise TimeoutError

    assert asyncio.run(follow()) == TrialStatus.SUCCEEDED
    no_canary(box)
