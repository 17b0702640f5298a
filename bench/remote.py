"""Remote machines: code staging and per-trial overhead, side by side in one run.

1. Staging a code directory of ``--files`` files / ``--megabytes`` MB (random bytes,
   so nothing compresses) to a real OpenSSH server on 127.0.0.1: trialflow's first
   upload (pack + upload + safe unpack) vs ``scp -r`` of the same folder (ratio),
   then a second experiment with the same code (should be ~0: nothing uploaded).
2. Per-trial overhead, remote vs local: N trivial trials, C at once, S seconds
   each, submitted and followed through the platform API (the same calls the
   operator and the triggerer make, without Airflow's scheduling on top), for
   (20,4,0) and (20,4,3) by default.

Needs root (it creates a local user for the SSH server, as the tests do).

    python bench/remote.py [--files 2000] [--megabytes 300] [--cases 20,4,0 20,4,3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import sshd  # noqa: E402
from trialflow.config.platforms import LocalConfig, RemoteConfig  # noqa: E402
from trialflow.platforms.base import TrialSpec  # noqa: E402
from trialflow.platforms.local import LocalPlatform  # noqa: E402
from trialflow.platforms.remote import RemotePlatform  # noqa: E402

TRIAL = (
    "import sys, time\nfrom trialflow import trial\np = trial.get_next_parameter()\n"
    "time.sleep(float(sys.argv[1]))\ntrial.report_final_result(1.0)\n"
)


def stage(platform, experiment_id, code):
    """prepare, then put the code on the machines now (as the first trial would)."""
    from trialflow.platforms.background import run_sync

    platform.prepare_sync(experiment_id)
    return run_sync(platform.stage_code(code))


def make_code(folder: Path, files: int, megabytes: int) -> None:
    folder.mkdir(parents=True)
    per_file = megabytes * 1024 * 1024 // files
    for i in range(files - 1):
        sub = folder / f"pkg{i // 100:02d}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i:04d}.bin").write_bytes(os.urandom(per_file))
    (folder / "train.py").write_text(TRIAL)


def remote_platform(server: sshd.SshServer, workdir: Path) -> RemotePlatform:
    config = RemoteConfig.model_validate(
        {
            "platform": "remote",
            "machineList": [
                {
                    "host": "127.0.0.1",
                    "port": server.port,
                    "user": server.user,
                    "sshKeyFile": str(server.client_key),
                    "hostKey": server.host_key_line,
                    "pythonPath": "/usr/bin",
                }
            ],
        }
    )
    return RemotePlatform(config, workdir)


def staging(server: sshd.SshServer, code: Path, tmp: Path) -> tuple[float, float, float]:
    started = time.perf_counter()
    stage(remote_platform(server, tmp / "w1"), "ebench001", code)
    first = time.perf_counter() - started
    started = time.perf_counter()
    stage(remote_platform(server, tmp / "w2"), "ebench002", code)
    second = time.perf_counter() - started
    started = time.perf_counter()
    subprocess.run(
        [
            "scp",
            "-q",
            "-r",
            "-i",
            str(server.client_key),
            "-P",
            str(server.port),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            str(code),
            f"{server.user}@127.0.0.1:scp-copy",
        ],
        check=True,
    )
    scp = time.perf_counter() - started
    return first, second, scp


async def run_trials(platform, code: Path, n: int, c: int, s: float, experiment: str, python: str) -> float:
    gate = asyncio.Semaphore(c)

    async def one(i: int) -> None:
        async with gate:
            spec = TrialSpec(experiment, f"{experiment}-{i:04d}", i, i, {}, f"{python} train.py {s}", code)
            handle = await platform.submit(spec)
            cursor: dict = {}
            interval = 0.05
            while True:
                update = await platform.poll(handle, cursor)
                cursor = update.cursor
                if update.status.is_terminal:
                    assert update.status.value == "SUCCEEDED", update
                    return
                await asyncio.sleep(interval)
                interval = min(interval * 1.5, 0.5)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--megabytes", type=int, default=300)
    parser.add_argument("--cases", nargs="*", default=["20,4,0", "20,4,3"])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/remote.py creates a local user for its SSH server: run it as root")

    tmp = Path(tempfile.mkdtemp(prefix="trialflow-bench-remote-"))
    server = sshd.make_server("bench")
    try:
        server.start()
        code = tmp / "code"
        make_code(code, args.files, args.megabytes)
        first, second, scp = staging(server, code, tmp)
        print(f"\nStaging {args.files} files / {args.megabytes} MB to 127.0.0.1 over SSH")
        print(f"  trialflow first upload   {first:7.2f} s   ({first / scp:.2f} x scp -r)")
        print(f"  scp -r                   {scp:7.2f} s")
        print(f"  second experiment        {second:7.2f} s   (same code: nothing uploaded)")

        small = tmp / "small"
        small.mkdir()
        (small / "train.py").write_text(TRIAL)
        local = LocalPlatform(LocalConfig(), tmp / "local")
        remote = remote_platform(server, tmp / "remote")
        stage(remote, "ewarm000", small)
        print(f"\nTrivial trials through the platform API (median of {args.repeat}); overhead = wall - N*S/C")
        print(f"{'N,C,S':>8} {'local s':>9} {'remote s':>9} {'remote/local':>13} {'remote ms/trial':>16}")
        for case in args.cases:
            n, c, s = case.split(",")
            n_, c_, s_ = int(n), int(c), float(s)
            walls = {"local": [], "remote": []}
            for r in range(args.repeat):
                for name, platform, python in (("local", local, sys.executable), ("remote", remote, "python3")):
                    experiment = f"e{name[0]}{case.replace(',', '')}{r}"
                    walls[name].append(asyncio.run(run_trials(platform, small, n_, c_, s_, experiment, python)))
            loc, rem = statistics.median(walls["local"]), statistics.median(walls["remote"])
            floor = n_ * s_ / c_
            print(f"{case:>8} {loc:9.2f} {rem:9.2f} {rem / loc:13.2f} {(rem - floor) / n_ * 1000:16.0f}")
    finally:
        sshd.remove(server)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
