"""Runs one NNI 3.0 local-mode experiment and prints its wall time as JSON.

Executed by bench/overhead.py with the nni virtualenv's Python, inside a
loopback-only network namespace (NNI's REST server listens on all interfaces)
and with a temporary HOME (NNI writes ~/nni-experiments whatever the config says).
With a fifth argument (a folder), it also writes NNI's own exports of the finished experiment
there before stopping it (``nnictl experiment export`` as JSON and CSV, with the intermediate
results): the import tests compare trialflow's import with them. Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def trial_jobs(port: int) -> list[dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nni/trial-jobs", timeout=5) as response:
            return json.loads(response.read())
    except (OSError, ValueError):  # not up yet, or a half-written answer while it starts
        return []


#: ``nnictl`` with more patience for NNI's own manager to come up: nnictl gives it 3 s (three
#: tries a second apart, nni/experiment/launcher.py) and then fails the experiment; on a loaded
#: machine its Node.js process took longer (seen in the test suite: "Create experiment failed:
#: ... Connection refused", no trial run). 60 tries; a manager that is up answers the first.
PATIENT_NNICTL = (
    "import sys\n"
    "import nni.experiment.launcher as launcher\n"
    "launcher._check_rest_server.__defaults__ = (60, None)\n"
    "from nni.tools.nnictl.nnictl import parse_args\n"
    "sys.argv[0] = 'nnictl'\n"
    "sys.exit(parse_args())\n"
)


def main() -> None:
    config, port, total, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    exports = Path(sys.argv[5]) if len(sys.argv) > 5 else None
    nnictl = str(Path(sys.executable).parent / "nnictl")
    log = open(Path(config).with_suffix(".nnictl.log"), "wb")
    started = time.perf_counter()
    # Not --foreground: its own status loop gives up on a slow start (seen here); the manager
    # runs detached inside the namespace either way and is stopped below.
    proc = subprocess.Popen(
        [sys.executable, "-c", PATIENT_NNICTL, "create", "--config", config, "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    elapsed, done = None, 0
    try:
        while time.perf_counter() - started < timeout:
            jobs = trial_jobs(port)
            done = sum(1 for j in jobs if j.get("status") == "SUCCEEDED" and j.get("finalMetricData"))
            if done >= total:
                elapsed = time.perf_counter() - started
                break
            time.sleep(0.2)
        if exports is not None and elapsed is not None:
            for kind in ("json", "csv"):
                subprocess.run(
                    [
                        nnictl,
                        "experiment",
                        "export",
                        "--filename",
                        str(exports / f"export.{kind}"),
                        "--type",
                        kind,
                        "--intermediate",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=120,
                    env=os.environ,
                    check=False,
                )
    finally:
        subprocess.run(
            [nnictl, "stop", "--all"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, env=os.environ
        )
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
    print(json.dumps({"seconds": elapsed, "succeeded": done}))


if __name__ == "__main__":
    main()
