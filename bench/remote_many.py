"""Remote machines over SSH: many trials deferred to one triggerer, from job end to task end.

``--machines`` real OpenSSH servers on 127.0.0.1 (the tests' servers: a user and an sshd each)
are the machine list of one experiment DAG of ``--trials`` trials, all at once
(``trialConcurrency`` = trials) and all deferred (``defer_after=0``) to the one triggerer of a
private Airflow (scheduler, triggerer; LocalExecutor, parallelism 8, SQLite). Each trial sleeps
``--seconds``, reports, and writes the time it ended as its last act. Printed: trials
succeeded, the run's wall time, the latency from a trial's end to its task instance ending
(median, p95, min, max: target 1 s median, 3 s p95), and the triggerer's CPU and memory per
deferred trial (bench/kube.py's sampler).

Needs root (it adds the servers' users) and sshd.

    python bench/remote_many.py [--trials 200] [--machines 4] [--seconds 90]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.private_airflow import experiment_folder, private_airflow, run_to_end, write_dag  # noqa: E402
from tests.helpers.sshd import make_server, remove  # noqa: E402
from trialflow.platforms.base import experiment_id_for, trial_id_for  # noqa: E402
from trialflow.store.experiment_store import sqlite_url  # noqa: E402

TRIAL = """\
import os, sys, time
from trialflow import trial
p = trial.get_next_parameter()
time.sleep(float(sys.argv[1]))
trial.report_final_result(p["x"])
with open(os.path.join(sys.argv[2], os.environ["NNI_TRIAL_JOB_ID"]), "w") as out:
    out.write(repr(time.time()))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--machines", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=90.0)
    args = parser.parse_args()
    if not shutil.which("sshd") and not Path("/usr/sbin/sshd").exists():
        print("cannot run: no sshd (Debian package openssh-server)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="trialflow-bench-remote-many-"))
    root.chmod(0o755)
    ends = root / "ends"
    ends.mkdir()
    ends.chmod(0o1777)  # each machine's user writes its trials' end times here
    servers = [make_server(f"bm{i}") for i in range(args.machines)]
    airflow = None
    try:
        for server in servers:
            server.start()
        machines = "".join(
            f"    - {{host: 127.0.0.1, port: {s.port}, user: {s.user}, sshKeyFile: {s.client_key}, "
            f"hostKey: '{s.host_key_line}', pythonPath: /usr/bin}}\n"
            for s in servers
        )
        config = experiment_folder(
            root,
            TRIAL,
            "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
            f"trialCommand: python3 trial.py {args.seconds} {ends}\ntrialCodeDirectory: .\n"
            f"trialConcurrency: {args.trials}\nmaxTrialNumber: {args.trials}\ntuner: {{name: Random}}\n"
            f"trainingService:\n  platform: remote\n  machineList:\n{machines}",
        )
        airflow = private_airflow(root, 8, sqlite_url(root / "experiments.db"))
        dag_file = write_dag(airflow.dags_folder, "remote_many", config, defer_after=0, cleanup=True)
        airflow.migrate()
        airflow.start()
        airflow.wait_healthy()
        done = run_to_end(airflow, "remote_many", dag_file, args.seconds * 4 + 900)
    finally:
        if airflow is not None:
            airflow.stop()
        for server in servers:
            remove(server)
    run_id, state, wall, tis, triggerer = done.run_id, done.state, done.wall, done.trials, done.triggerer
    experiment = experiment_id_for("remote_many", run_id)
    latencies = []
    for ti in tis:
        ended = ends / trial_id_for(experiment, ti["map_index"])
        if ti.get("end_date") and ended.exists():
            latencies.append(datetime.fromisoformat(ti["end_date"]).timestamp() - float(ended.read_text()))
    shutil.rmtree(root, ignore_errors=True)
    latencies.sort()
    succeeded = sum(1 for ti in tis if ti["state"] == "success")
    print(
        f"{args.trials} remote trials of {args.seconds:.0f} s on {args.machines} SSH machines, all deferred to one "
        f"triggerer (LocalExecutor, parallelism 8): run {state}, {succeeded} succeeded, wall {wall:.0f} s"
    )
    if latencies:
        p95 = latencies[max(0, int(len(latencies) * 0.95) - 1)]
        print(
            f"  trial ended -> task instance ended ({len(latencies)} measured): median "
            f"{statistics.median(latencies):.2f} s, p95 {p95:.2f} s, min {latencies[0]:.2f} s, "
            f"max {latencies[-1]:.2f} s (target: median < 1 s, p95 < 3 s)"
        )
    grown_kb = (triggerer.peak_rss - triggerer.first_rss) / 2**10 / args.trials
    print(
        f"  triggerer: {triggerer.cpu - triggerer.first_cpu:.1f} CPU s = "
        f"{(triggerer.cpu - triggerer.first_cpu) / args.trials:.3f} s per deferred trial; resident memory "
        f"{triggerer.first_rss / 2**20:.0f} MB before, {triggerer.peak_rss / 2**20:.0f} MB at peak = "
        f"{grown_kb:.0f} KB per deferred trial"
    )
    return 0 if state == "success" and succeeded == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
