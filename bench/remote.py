"""Remote machines: code staging and per-trial overhead, side by side in one run.

1. Staging a code directory of ``--files`` files / ``--megabytes`` MB (random bytes,
   so nothing compresses) to a real OpenSSH server on 127.0.0.1, each way in a fresh
   process (wall time and the process's peak RSS): trialflow's streamed upload (pack
   while uploading + safe unpack), the archive built in memory first as before
   (``--no-before`` leaves it out), and ``scp -r`` of the same folder (the ratio's
   base); then a second experiment with the same code (should be ~0: nothing uploaded).
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
import json
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

from tests.helpers import sshd  # noqa: E402
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
    from trialflow.platforms.event_loop import run_sync

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


#: Staging in a fresh process, so its peak RSS is the staging's own: "stream" is how a machine
#: gets its code now, "memory" the archive built whole first (the way before issue 15).
STAGE_CHILD = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from bench.remote import remote_platform, stage
from tests.helpers import sshd
from trialflow.platforms.event_loop import run_sync
from trialflow.trial.packing import pack
server = sshd.SshServer(**json.loads(sys.argv[1]))
code, work, how = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
platform = remote_platform(server, work)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
if how == "stream":
    stage(platform, work.name, code)
else:
    platform.prepare_sync(work.name)
    run_sync(platform.staging.stage(platform.machines[0], pack(code), "code"))
wall = time.perf_counter() - started
print(json.dumps({{"wall": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_before_mb": base / 1024}}))
"""


def stage_in_child(server: sshd.SshServer, code: Path, work: Path, how: str) -> dict:
    fields = {k: str(v) if isinstance(v, Path) else v for k, v in server.__dict__.items()}
    out = subprocess.run(
        [sys.executable, "-c", STAGE_CHILD.format(root=str(ROOT)), json.dumps(fields), str(code), str(work), how],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "TRIALFLOW_CACHE": str(work / "cache")},  # a cold digest cache: a real upload
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def forget_staged(server: sshd.SshServer) -> None:
    """The machine forgets the code, so the next way uploads it in full too."""
    subprocess.run(["rm", "-rf", str(server.home / "trialflow-experiments" / ".code"), str(server.home / "scp-copy")])


def scp_copy(server: sshd.SshServer, code: Path) -> float:
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
    return time.perf_counter() - started


def staging(server: sshd.SshServer, code: Path, tmp: Path, repeat: int, before: bool) -> dict[str, list]:
    """Each way ``repeat`` times, interleaved (so a slow minute of the machine hits all)."""
    results: dict[str, list] = {"stream": [], "memory": [], "scp": [], "second": []}
    for r in range(repeat):
        for how in ("stream", "memory") if before else ("stream",):
            forget_staged(server)
            results[how].append(stage_in_child(server, code, tmp / f"{how}{r}", how))
        forget_staged(server)
        results["scp"].append(scp_copy(server, code))
    stage(remote_platform(server, tmp / "first"), "first", code)  # one experiment uploads it...
    started = time.perf_counter()
    stage(remote_platform(server, tmp / "again"), "again", code)  # ...the next finds it there
    results["second"].append(time.perf_counter() - started)
    return results


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
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-before", action="store_true", help="leave out the in-memory archive (the old way)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/remote.py creates a local user for its SSH server: run it as root")

    tmp = Path(tempfile.mkdtemp(prefix="trialflow-bench-remote-"))
    server = sshd.make_server("bench")
    try:
        server.start()
        code = tmp / "code"
        make_code(code, args.files, args.megabytes)
        results = staging(server, code, tmp, args.repeat, not args.no_before)
        scp = statistics.median(results["scp"])
        print(f"\nStaging {args.files} files / {args.megabytes} MB to 127.0.0.1 over SSH (median of {args.repeat})")
        print(f"{'':28} {'wall s':>8} {'x scp -r':>9} {'peak RSS MB':>12} {'RSS at start':>13}")
        for how, label in (("stream", "trialflow, streamed"), ("memory", "archive in memory (before)")):
            if results[how]:
                wall = statistics.median(r["wall"] for r in results[how])
                rss = statistics.median(r["rss_mb"] for r in results[how])
                rss0 = statistics.median(r["rss_before_mb"] for r in results[how])
                print(f"{label:28} {wall:8.2f} {wall / scp:9.2f} {rss:12.0f} {rss0:13.0f}")
        print(f"{'scp -r':28} {scp:8.2f} {1:9.2f}")
        print(f"{'second experiment, same code':28} {results['second'][0]:8.2f}   (nothing uploaded)")

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
