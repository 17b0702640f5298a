"""The remote platform: pure builders, then real OpenSSH servers on 127.0.0.1 (two machines,
different users and homes; key and password authentication)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.following import poll_until_done
from tests.helpers.remote import machine_entry, remote_platform
from trialflow.config.platforms import RemoteConfig
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.remote import LAUNCH_GRACE_SECONDS, RemotePlatform, parse_probe, remote_status
from trialflow.platforms.remote.commands import LAUNCH_DIR
from trialflow.platforms.remote.machines import least_loaded_first, machines_of
from trialflow.platforms.remote.platform import CLAIM_STALE_SECONDS
from trialflow.platforms.remote.ssh import SshError

# -- pure ------------------------------------------------------------------------------------

T = TrialStatus


@pytest.mark.parametrize(
    "exit_code, cancel, alive, has_pid, age, expected",
    [
        (None, None, False, False, 1.0, T.WAITING),  # launched, pid not written yet
        (None, None, False, False, LAUNCH_GRACE_SECONDS + 1, T.FAILED),  # the launch never happened
        (None, None, True, True, 5.0, T.RUNNING),
        (0, None, False, True, 5.0, T.SUCCEEDED),
        (0, T.EARLY_STOPPED, False, True, 5.0, T.SUCCEEDED),  # finished before the cancel landed
        (3, None, False, True, 5.0, T.FAILED),
        (None, None, False, True, 5.0, T.FAILED),  # vanished without an exit code
        (None, T.EARLY_STOPPED, True, True, 5.0, T.RUNNING),  # stopping
        (143, T.EARLY_STOPPED, False, True, 5.0, T.EARLY_STOPPED),
        (None, T.USER_CANCELED, False, False, 1.0, T.USER_CANCELED),  # cancelled before its pid
    ],
)
def test_remote_status_table(exit_code, cancel, alive, has_pid, age, expected):
    assert remote_status(exit_code, cancel, alive, has_pid, age) is expected


def stage(platform, experiment_id, code):
    """prepare, then put the code on the machines now (as the first trial would)."""
    from trialflow.platforms.event_loop import run_sync

    platform.prepare_sync(experiment_id)
    return run_sync(platform.stage_code(code))


@pytest.mark.parametrize(
    ("exit_code", "fault"),
    [(None, True), (137, True), (-9, True), (-15, True), (1, False), (0, False), (128, False), (129, True)],
)
def test_a_remote_fault_is_a_signal_or_a_vanished_wrapper(exit_code, fault):
    from trialflow.platforms.remote.platform import remote_fault

    assert remote_fault(T.FAILED, exit_code) is fault
    assert remote_fault(T.USER_CANCELED, exit_code) is False


def test_probe_output_is_split_into_facts_and_metric_bytes():
    facts, data = parse_probe(b"exit=\npid=42\nalive=1\ncancel=\n--trialflow-metrics--\nME000001x")
    assert facts == {"exit": "", "pid": "42", "alive": "1", "cancel": ""}
    assert data == b"ME000001x"


def test_the_staged_sdk_is_named_by_content_not_by_time(monkeypatch):
    import time as time_module

    from trialflow.trial import packing

    first = packing.pack_sdk()
    monkeypatch.setattr(packing, "_sdk_cache", [])  # pack again, at another time
    monkeypatch.setattr(time_module, "time", lambda: 4_000_000_000.0)
    assert packing.pack_sdk().digest == first.digest
    assert first.file_count == len(packing.SDK_FILES) == 8  # the SDK and its JSON, function runner, inputs, nni


def _machines(n: int) -> list:
    config = RemoteConfig.model_validate(
        {"platform": "remote", "machineList": [{"host": f"h{i}", "user": "u"} for i in range(n)]}
    )
    return machines_of(config.machine_list)


@pytest.mark.parametrize(
    ("loads", "sequence", "expected"),
    [
        ([0, 0, 0], 0, [0, 1, 2]),  # a tie: round-robin from the trial's sequence
        ([0, 0, 0], 1, [1, 2, 0]),
        ([0, 0, 0], 5, [2, 0, 1]),
        ([2, 0, 1], 0, [1, 2, 0]),  # least loaded first
        ([1, 1, 0], 0, [2, 0, 1]),  # the idle one, then the tie in round-robin order
        ([1, 1, 0], 1, [2, 1, 0]),
    ],
)
def test_placement_is_least_loaded_first_and_ties_spread(loads, sequence, expected):
    machines = _machines(len(loads))
    assert [m.index for m in least_loaded_first(machines, loads, sequence)] == expected


# -- real servers ----------------------------------------------------------------------------

TRIAL = """\
import os, sys, time
from trialflow import trial
p = trial.get_next_parameter()
for i in range(3):
    trial.report_intermediate_result(p["x"] + i)
time.sleep(float(os.environ.get("SLEEP", "0")))
print("hello from", os.environ["NNI_TRIAL_JOB_ID"], os.getcwd())
trial.report_final_result(p["x"] * 10)
"""


def _code(tmp_path: Path, text: str = TRIAL) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(text)
    (code / ".nniignore").write_text("data/\n")
    (code / "data").mkdir(exist_ok=True)
    (code / "data" / "big.bin").write_bytes(b"x" * 1000)
    return code


def _spec(code: Path, index: int, experiment: str = "eremote1", sleep: float = 0) -> TrialSpec:
    return TrialSpec(
        experiment_id=experiment,
        trial_id=f"{experiment}-{index:04d}",
        sequence=index,
        parameter_id=index,
        parameters={"x": index},
        command=f"SLEEP={sleep} python3 train.py",
        code_dir=code,
    )


async def _follow(platform: RemotePlatform, handle: dict, timeout: float = 60) -> tuple[TrialStatus, list, str | None]:
    status, metrics, last = await poll_until_done(platform, handle, timeout, interval=0.2)
    return status, metrics, last.message


def test_a_trial_runs_on_each_machine_key_and_password(ssh_servers, tmp_path):
    a, b = ssh_servers
    code = _code(tmp_path)
    for index, machine in enumerate([machine_entry(a, "key"), machine_entry(b, "password")]):
        platform = remote_platform(tmp_path, [machine])
        platform.prepare_sync("eremote1")
        handle = platform.submit_sync(_spec(code, index))
        assert platform.submit_sync(_spec(code, index))["trial_dir"] == handle["trial_dir"]  # re-attach, no 2nd launch
        status, metrics, _ = asyncio.run(_follow(platform, handle))
        assert status == TrialStatus.SUCCEEDED
        assert [m.value for m in metrics] == [index, index + 1, index + 2, index * 10]
        home = [a, b][index].home
        trial_dir = Path(handle["trial_dir"])
        assert str(trial_dir).startswith(str(home))
        assert f"hello from eremote1-{index:04d}" in (trial_dir / "stdout.log").read_text()
        assert not (trial_dir / "code" / "data").exists()  # .nniignore honoured
        assert (trial_dir / "code" / "train.py").stat().st_nlink >= 2  # a view of the staged copy


def test_a_launch_abandoned_after_its_claim_is_taken_over_by_the_next_submit(ssh_servers, tmp_path):
    """A worker killed between claiming a trial's folder and launching it left the claim: the
    retried task's submit used to re-attach to a trial that never started (failed a minute
    later: "disappeared without an exit code"). It now launches the trial itself once the
    claim is CLAIM_STALE_SECONDS old, and the trial runs once."""
    a, _ = ssh_servers
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    code = _code(tmp_path)
    platform.prepare_sync("eabandon")
    spec = _spec(code, 3, "eabandon")
    trial_dir = a.home / "trialflow-experiments" / "eabandon" / "trials" / spec.trial_id
    (trial_dir / LAUNCH_DIR).mkdir(parents=True)
    (trial_dir / "code").mkdir()  # the dead submit's half-made working directory
    for path in [trial_dir.parent, trial_dir, *trial_dir.iterdir()]:
        shutil.chown(path, a.user, a.user)  # made by that submit, as the machine's user
    then = time.time() - CLAIM_STALE_SECONDS - 5
    os.utime(trial_dir / LAUNCH_DIR, (then, then))
    handle = platform.submit_sync(spec)
    assert Path(handle["trial_dir"]) == trial_dir
    status, metrics, _ = asyncio.run(_follow(platform, handle))
    assert status == TrialStatus.SUCCEEDED and [m.value for m in metrics] == [3, 4, 5, 30]
    assert (trial_dir / "stdout.log").read_text().count("hello from eabandon-0003") == 1
    assert platform.submit_sync(spec)["trial_dir"] == str(trial_dir)  # launched: re-attached, not again


@pytest.mark.slow
def test_clear_errors_for_wrong_key_unknown_host_key_and_no_server(ssh_servers, tmp_path):
    a, b = ssh_servers
    cases = [
        (machine_entry(a, "key", sshKeyFile=str(b.client_key)), f"authentication failed for user '{a.user}'"),
        (machine_entry(a, "key", hostKey=b.host_key_line), "its host key is not trusted"),
        (
            {**machine_entry(a, "key"), "hostKey": None, "knownHostsFile": str(tmp_path / "none")},
            "host key is not trusted",
        ),
        ({**machine_entry(a, "key"), "port": 1}, "cannot connect to 127.0.0.1:1"),
        (machine_entry(a, "key", hostKey="not a key"), "hostKey is not a public key line like 'ssh-ed25519 AAAA...'"),
        (machine_entry(a, "key", sshKeyFile=str(tmp_path / "no_such_key")), r"sshKeyFile .*no_such_key does not exist"),
    ]
    for machine, message in cases:
        with pytest.raises(SshError, match=message):
            remote_platform(tmp_path, [machine]).prepare_sync("eerrors1")


def test_twelve_trials_at_once_on_one_machine_over_one_connection(ssh_servers, tmp_path):
    a, _ = ssh_servers
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    code = _code(tmp_path)
    platform.prepare_sync("etwelve1")

    async def all_of_them() -> list:
        handles = await asyncio.gather(*(platform.submit(_spec(code, i, "etwelve1", sleep=1)) for i in range(12)))
        return await asyncio.gather(*(_follow(platform, h) for h in handles))

    results = asyncio.run(all_of_them())
    assert [r[0] for r in results] == [TrialStatus.SUCCEEDED] * 12
    assert all(len(r[1]) == 4 for r in results)


@pytest.mark.slow
def test_a_trial_survives_its_sshd_restarting(ssh_servers, tmp_path):
    a, _ = ssh_servers
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    code = _code(tmp_path)
    handle = platform.submit_sync(_spec(code, 0, "erestart", sleep=4))

    async def follow_across_restart() -> tuple:
        await platform.poll(handle, {})
        a.stop()  # every SSH session dies, the trial (its own session) goes on
        await asyncio.sleep(1)
        a.start()
        return await _follow(platform, handle)

    status, metrics, _ = asyncio.run(follow_across_restart())
    assert status == TrialStatus.SUCCEEDED and metrics[-1].value == 0


@pytest.mark.slow
def test_following_outlasts_an_outage_longer_than_the_reconnects(ssh_servers, tmp_path):
    """sshd gone for 15 s, twice as long as the connection's own reconnect attempts (~7.5 s):
    a poll then raises SshUnreachable, and the follower asks again instead of failing, so the
    trial is followed to its end with every metric (before, the task failed and used a retry)."""
    import threading

    from tests.helpers.following import follow
    from trialflow.experiment.follow import UNREACHABLE_GRACE
    from trialflow.platforms.base import PlatformUnreachable
    from trialflow.platforms.remote.ssh import SshUnreachable

    assert issubclass(SshUnreachable, PlatformUnreachable) and UNREACHABLE_GRACE > 15
    a, _ = ssh_servers
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    code = _code(tmp_path)
    handle = platform.submit_sync(_spec(code, 0, "eoutage1", sleep=10))

    def outage() -> None:
        time.sleep(1.0)
        a.stop()
        try:
            time.sleep(15)
        finally:
            a.start()

    cut = threading.Thread(target=outage)
    cut.start()
    try:
        outcome, recorder = follow(platform, handle, timeout=120)
    finally:
        cut.join()
    assert outcome.status == TrialStatus.SUCCEEDED
    assert [m.value for m in recorder.metrics] == [0, 1, 2, 0]


def test_a_second_experiment_with_the_same_code_uploads_nothing(ssh_servers, tmp_path):
    a, _ = ssh_servers
    code = _code(tmp_path, TRIAL + "# same code, second time\n")
    stage(remote_platform(tmp_path, [machine_entry(a, "key")]), "efirst01", code)
    staged = sorted((a.home / "trialflow-experiments" / ".code").iterdir())
    stamps = {p.name: p.stat().st_mtime_ns for p in staged}
    time.sleep(0.05)
    stage(remote_platform(tmp_path, [machine_entry(a, "key")]), "esecond1", code)
    again = sorted((a.home / "trialflow-experiments" / ".code").iterdir())
    assert {p.name: p.stat().st_mtime_ns for p in again} == stamps
    assert "efirst01" in {p.name for p in (a.home / "trialflow-experiments").iterdir()}


def test_code_streams_to_the_machine_and_arrives_whole(ssh_servers, tmp_path, monkeypatch):
    import hashlib
    import os

    from trialflow.trial import packing

    monkeypatch.setenv("TRIALFLOW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(packing, "CHUNK_BYTES", 256 * 1024)  # many chunks through the channel
    a, _ = ssh_servers
    code = _code(tmp_path, TRIAL + "# streamed\n")
    uploads = a.home / "trialflow-experiments"
    before = set(uploads.glob(".upload-*"))  # the session's machine: other tests stage there too
    (code / "weights").mkdir()
    for i in range(3):
        (code / "weights" / f"w{i}.bin").write_bytes(os.urandom(1024 * 1024 + i))
    [folder] = stage(remote_platform(tmp_path, [machine_entry(a, "key")]), "estream1", code)
    staged = Path(folder)
    assert str(staged).startswith(str(a.home))
    for rel in ["train.py", "weights/w0.bin", "weights/w1.bin", "weights/w2.bin"]:
        there, here = (staged / rel).read_bytes(), (code / rel).read_bytes()
        assert hashlib.sha256(there).digest() == hashlib.sha256(here).digest()
    assert not (staged / "data").exists()  # .nniignore honoured
    digest = packing.pack(code).digest
    assert staged.name == digest[:16]  # named by the content, learnt at the end of the stream
    assert set(uploads.glob(".upload-*")) <= before  # the archive and its unpacker removed


def test_a_command_that_fails_while_its_input_streams_is_an_error_not_a_hang(ssh_servers, tmp_path, monkeypatch):
    import os
    import threading

    from trialflow.platforms.event_loop import run_sync
    from trialflow.trial import packing

    monkeypatch.setattr(packing, "CHUNK_BYTES", 64 * 1024)
    a, _ = ssh_servers
    code = tmp_path / "big"
    code.mkdir()
    (code / "data.bin").write_bytes(os.urandom(8 * 1024 * 1024))
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    machine = platform.machines[0]
    stream = packing.ArchiveStream(code, packing.collect_files(code), False)
    started = time.monotonic()
    with pytest.raises(SshError, match=r"`head -c 1000 >/dev/null; echo refused >&2; exit 3` failed \(3\): refused"):
        run_sync(platform.shell.run(machine, "head -c 1000 >/dev/null; echo refused >&2; exit 3", stream.chunks))
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 5
    while any(t.name == "trialflow-archive" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the archive writer outlived the failed upload"


def test_a_file_that_vanishes_while_code_streams_is_said_and_leaves_nothing(ssh_servers, tmp_path, monkeypatch):
    """The input's own error (not "cannot connect", not five reconnects), and no partial upload."""
    import os

    from trialflow.platforms.event_loop import run_sync
    from trialflow.trial import packing

    monkeypatch.setattr(packing, "CHUNK_BYTES", 64 * 1024)
    a, _ = ssh_servers
    code = tmp_path / "vanish"
    code.mkdir()
    (code / "a.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    (code / "z.py").write_text("gone")
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    machine = platform.machines[0]
    uploads = a.home / "trialflow-experiments"
    before = set(uploads.glob(".upload-*"))
    files = packing.collect_files(code)
    (code / "z.py").unlink()  # after the listing, before its turn in the archive
    started = time.monotonic()
    with pytest.raises(FileNotFoundError, match="z.py"):
        run_sync(platform.staging.stream(machine, packing.ArchiveStream(code, files, False)))
    assert time.monotonic() - started < 10  # not retried as a connection error
    assert set(uploads.glob(".upload-*")) <= before


def test_cancel_kills_the_remote_process_group_and_cleanup_removes_files(ssh_servers, tmp_path):
    a, _ = ssh_servers
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    code = _code(tmp_path, "import subprocess, time\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(300)\n")
    handle = platform.submit_sync(_spec(code, 0, "ecancel1"))
    deadline = time.monotonic() + 20
    while asyncio.run(platform.poll(handle, {})).status != TrialStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    platform.cancel_sync(handle, TrialStatus.USER_CANCELED, "stop it")
    status, _, message = asyncio.run(_follow(platform, handle))
    assert (status, message) == (TrialStatus.USER_CANCELED, "stop it")
    assert subprocess.run(["pgrep", "-u", a.user, "-f", "sleep 300"], capture_output=True).stdout == b""
    platform.cleanup_sync("ecancel1")
    assert not (a.home / "trialflow-experiments" / "ecancel1").exists()
    # the staged code stays for reuse, still read-only (the trial's view shared its files)
    staged = list((a.home / "trialflow-experiments" / ".code").glob("*/train.py"))
    assert staged and all(f.stat().st_mode & 0o222 == 0 for f in staged)


def test_render_shows_the_launch_without_secrets(ssh_servers, tmp_path):
    a, b = ssh_servers
    platform = remote_platform(tmp_path, [machine_entry(a, "key"), machine_entry(b, "password")])
    rendered = platform.render(_spec(tmp_path, 3))
    assert rendered["machines"] == [f"{a.user}@127.0.0.1:{a.port}", f"{b.user}@127.0.0.1:{b.port}"]
    assert "PYTHONPATH" in rendered["launch"] and "/usr/bin" in rendered["launch"]
    assert b.password not in repr(rendered)


def test_a_machine_named_by_an_airflow_ssh_connection(ssh_servers, tmp_path, monkeypatch):
    """Secrets in Airflow's connection (here the env-var form), opened by SSHHookAsync."""
    import json

    from trialflow.hooks import airflow_connections

    a, _ = ssh_servers
    monkeypatch.setenv(
        "AIRFLOW_CONN_MACHINE_A",
        json.dumps(
            {
                "conn_type": "ssh",
                "host": "127.0.0.1",
                "port": a.port,
                "login": a.user,
                "extra": {"key_file": str(a.client_key), "host_key": a.host_key_line},
            }
        ),
    )
    machines = [{"sshConnId": "machine_a", "pythonPath": "/usr/bin"}]
    with pytest.raises(SshError, match="sshConnId 'machine_a' needs Airflow's connections"):
        remote_platform(tmp_path, machines).prepare_sync("econnid1")  # no connections given: outside Airflow
    config = RemoteConfig.model_validate({"platform": "remote", "machineList": machines})
    platform = RemotePlatform(config, tmp_path / "exp", airflow_connections())
    platform.prepare_sync("econnid1")
    handle = platform.submit_sync(_spec(_code(tmp_path), 0, "econnid1"))
    assert handle["host"] == "machine_a"
    assert asyncio.run(_follow(platform, handle))[0] == TrialStatus.SUCCEEDED


def _fake_gpus(server, uuids: list[str], apps: list | None = None) -> str:
    """A pythonPath folder on the machine with python3 and a fake nvidia-smi describing GPUs."""
    import json
    import shutil

    folder = server.root / "bin"
    folder.mkdir(exist_ok=True)
    shutil.copy(Path(__file__).resolve().parents[2] / "helpers" / "fakes" / "nvidia-smi", folder / "nvidia-smi")
    (folder / "fake-gpus.json").write_text(json.dumps({"gpus": uuids, "apps": apps or []}))
    if not (folder / "python3").exists():
        (folder / "python3").symlink_to("/usr/bin/python3")
    return str(folder)


@pytest.mark.slow
def test_gpu_trials_are_placed_where_gpus_are_free(ssh_servers, tmp_path):
    a, b = ssh_servers
    trial = (
        "import os, time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
        "print('CUDA', os.environ['CUDA_VISIBLE_DEVICES'])\ntime.sleep(p['x'])\ntrial.report_final_result(1)\n"
    )
    code = _code(tmp_path, trial)
    platform = remote_platform(
        tmp_path,
        [
            machine_entry(a, "key", pythonPath=_fake_gpus(a, ["GPU-a0", "GPU-a1", "GPU-a2", "GPU-a3"])),
            machine_entry(b, "key", pythonPath=_fake_gpus(b, ["GPU-b0", "GPU-b1"], [["GPU-b0", 4242]])),
        ],
    )

    def gpu_spec(index: int, need: int, hold: float) -> TrialSpec:
        return TrialSpec(
            "egpus001", f"egpus001-{index:04d}", index, index, {"x": hold}, "python3 train.py", code, gpu_number=need
        )

    whole = platform.submit_sync(gpu_spec(0, 4, 3))  # only machine A has 4 GPUs: all of them
    small = platform.submit_sync(gpu_spec(1, 1, 0))  # A is full; on B, GPU 0 runs someone else's process
    assert (whole["host"], small["host"]) == (platform.machines[0].target.label, platform.machines[1].target.label)
    with pytest.raises(Exception, match="trialGpuNumber 5 can never fit on ") as refused:
        platform.submit_sync(gpu_spec(2, 5, 0))
    # Every machine says why, in placement order (which depends on which trial still runs).
    assert all(m.target.label in str(refused.value) for m in platform.machines)
    for handle, expected in ((whole, "CUDA 0,1,2,3"), (small, "CUDA 1")):
        assert asyncio.run(_follow(platform, handle))[0] == TrialStatus.SUCCEEDED
        assert expected in (Path(handle["trial_dir"]) / "stdout.log").read_text()
    assert list((a.home / "trialflow-experiments" / ".gpu-claims").iterdir()) == []  # released at the end


def test_code_on_shared_storage_is_read_in_place(ssh_servers, tmp_path):
    """The machine sees the storage at remoteMountPoint: nothing is uploaded, the trial runs in
    the code folder itself. (Here 'mounted' = the same folder, the machine being this host.)"""
    from trialflow.config.model import SharedStorageConfig

    a, _ = ssh_servers
    storage = a.root / "nfs"
    code = storage / "project" / "code"
    code.mkdir(parents=True)
    (code / "train.py").write_text(TRIAL)
    for folder in (storage, storage / "project", code):
        folder.chmod(0o755)
    (code / "train.py").chmod(0o644)
    shared = SharedStorageConfig.model_validate(
        {
            "storageType": "NFS",
            "nfsServer": "nfs.example",
            "exportedDirectory": "/export",
            "localMountPoint": str(storage),
            "remoteMountPoint": str(storage),
            "localMounted": "usermount",
        }
    )
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    platform.use_shared_storage(shared)
    staged = a.home / "trialflow-experiments" / ".code"
    before = set(staged.iterdir()) if staged.exists() else set()
    handle = platform.submit_sync(_spec(code, 0, "eshared1"))
    assert asyncio.run(_follow(platform, handle))[0] == TrialStatus.SUCCEEDED
    assert f"hello from eshared1-0000 {code}" in (Path(handle["trial_dir"]) / "stdout.log").read_text()
    after = set(staged.iterdir())
    assert len(after - before) <= 1 and all(len(list(p.rglob("train.py"))) == 0 for p in after - before), (
        "only the SDK may be staged; the code is not uploaded"
    )

    missing = SharedStorageConfig.model_validate(
        {**shared.model_dump(by_alias=True), "remoteMountPoint": "/mnt/not-mounted"}
    )
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    platform.use_shared_storage(missing)
    with pytest.raises(
        SshError,
        match=r"/mnt/not-mounted/project/code is not there; mount nfs.example:/export "
        r"at /mnt/not-mounted on it \(trialflow never runs sudo mount\)",
    ):
        stage(platform, "eshared2", code)


def test_a_key_with_a_passphrase_and_a_wrong_passphrase(ssh_servers, tmp_path):
    a, _ = ssh_servers
    key = a.root / "locked_key"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "open sesame", "-f", str(key)], check=True)
        with open(a.root / "authorized_keys", "a") as fh:
            fh.write((a.root / "locked_key.pub").read_text())
    remote_platform(tmp_path, [machine_entry(a, "key", sshKeyFile=str(key), sshPassphrase="open sesame")]).prepare_sync(
        "epass001"
    )
    with pytest.raises(SshError, match=r"cannot read the private key .*locked_key .*wrong sshPassphrase\?") as err:
        remote_platform(tmp_path, [machine_entry(a, "key", sshKeyFile=str(key), sshPassphrase="wrong")]).prepare_sync(
            "epass002"
        )
    assert "wrong" not in str(err.value).replace("wrong sshPassphrase", "")  # the passphrase is not echoed


def test_a_failed_remote_trials_message_ends_with_its_exceptions_last_line(ssh_servers, tmp_path):
    a, _ = ssh_servers
    code = _code(tmp_path, "raise KeyError('no column named price')\n")
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    platform.prepare_sync("efailmsg")
    handle = platform.submit_sync(TrialSpec("efailmsg", "efailmsg-0000", 0, 0, {"x": 1}, "python3 train.py", code))
    status, _, message = asyncio.run(_follow(platform, handle))
    assert status == TrialStatus.FAILED
    assert message is not None and message.endswith(": KeyError: 'no column named price'"), message


def test_unmodified_nni_trial_code_runs_on_a_machine_without_nni(ssh_servers, tmp_path):
    """The machine's python3 has no nni: the SDK shipped beside the code answers for it."""
    a, _ = ssh_servers
    code = _code(
        tmp_path,
        "import nni\np = nni.get_next_parameter()\nnni.report_intermediate_result(p['x'])\n"
        "nni.report_final_result({'default': p['x'] * 2, 'via': nni.__file__})\n",
    )
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    platform.prepare_sync("enniless")
    handle = platform.submit_sync(TrialSpec("enniless", "enniless-0000", 0, 0, {"x": 3}, "python3 train.py", code))
    status, metrics, message = asyncio.run(_follow(platform, handle))
    assert status == TrialStatus.SUCCEEDED, message
    assert metrics[0].value == 3 and metrics[-1].value["default"] == 6
    assert "/trialflow/trial/shim/nni/" in metrics[-1].value["via"]


def test_a_function_trial_runs_on_a_machine_without_trialflow(ssh_servers, tmp_path):
    """Issue 39 (3): ``python3 -m trialflow.trial.function`` runs from the SDK shipped beside the
    code (the machine's python3 has no trialflow): the function's parameters in, its return value
    the final result, its intermediate result on the way."""
    from trialflow.trial.function import function_command

    a, _ = ssh_servers
    code = _code(
        tmp_path,
        "from trialflow import trial\n\ndef fit(p):\n    trial.report_intermediate_result(p['x'])\n"
        "    return {'default': p['x'] * 2, 'where': trial.__file__}\n",
    )
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    platform.prepare_sync("efunc001")
    command = function_command("train:fit")
    handle = platform.submit_sync(TrialSpec("efunc001", "efunc001-0000", 0, 0, {"x": 3}, command, code))
    status, metrics, message = asyncio.run(_follow(platform, handle))
    assert status == TrialStatus.SUCCEEDED, message
    assert metrics[0].value == 3 and metrics[-1].value["default"] == 6
    assert "/trialflow/trial/__init__.py" in metrics[-1].value["where"] and str(a.home) in metrics[-1].value["where"]


@pytest.mark.slow
def test_a_remote_stop_ends_in_sigkill_even_when_the_asker_is_killed_during_the_grace(ssh_servers, tmp_path):
    """Issue 36 (0), over SSH: the asker (its process group SIGKILLed 1 s into the stop, as
    Airflow's supervisor kills a task in its on_kill) takes its SSH session with it; the KILL
    after the grace still reaches a trial that ignores SIGTERM and its setsid grandchild."""
    import json
    import os
    import signal
    import sys

    a, _ = ssh_servers
    machines = [machine_entry(a, "key")]
    platform = remote_platform(tmp_path, machines)
    code = _code(
        tmp_path,
        "import signal, subprocess, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen(['python3', '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "time.sleep(601)'], start_new_session=True)\ntime.sleep(601)\n",
    )
    handle = platform.submit_sync(_spec(code, 0, "estubborn"))
    deadline = time.monotonic() + 20

    def remote_pids(pattern: str = r"train\.py|sleep.601") -> bytes:
        return subprocess.run(["pgrep", "-u", a.user, "-f", pattern], capture_output=True).stdout

    # started: the trial and its setsid grandchild (its own command line, once it has exec'd;
    # under load a count of matches caught the trial's fork before its exec)
    while not (remote_pids(r"train\.py") and remote_pids("sleep.601")):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    started = set(remote_pids().split())
    asker = tmp_path / "asker.py"
    asker.write_text(
        "import json, sys\nfrom pathlib import Path\n"
        "from trialflow.config.platforms import RemoteConfig\n"
        "from trialflow.platforms.base import TrialStatus\n"
        "from trialflow.platforms.remote import RemotePlatform\n"
        "config = RemoteConfig.model_validate({'platform': 'remote', 'machineList': json.loads(sys.argv[2])})\n"
        "p = RemotePlatform(config, Path(sys.argv[1]))\n"
        "print('asking', flush=True)\n"
        "p.cancel_sync(json.loads(sys.argv[3]), TrialStatus.USER_CANCELED, 'its task was marked failed')\n"
        "print('returned', flush=True)\n"
        "import time; time.sleep(60)\n"  # an on_kill that waits: killed before it ends
    )
    proc = subprocess.Popen(
        [sys.executable, str(asker), str(tmp_path / "exp"), json.dumps(machines), json.dumps(handle)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "asking\n"
    # the stop has begun on the machine: its TERM ended the job's shells (under load the SSH
    # command took over the 1 s this once waited), and the two that ignore TERM remain: the
    # asker is killed inside the grace (5 s)
    termed_by = time.monotonic() + 20
    while len(remote_pids().split()) > 2:
        assert time.monotonic() < termed_by, f"the stop's TERM never reached {started}"
        time.sleep(0.1)
    assert remote_pids(r"train\.py") and remote_pids("sleep.601")  # TERM ignored, grace not over
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    gone_by = time.monotonic() + 20
    while remote_pids():
        assert time.monotonic() < gone_by, "the remote trial outlived its stop"
        time.sleep(0.2)
    status, _, message = asyncio.run(_follow(platform, handle))
    assert (status, message) == (TrialStatus.USER_CANCELED, "its task was marked failed")
