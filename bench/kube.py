"""Kubernetes: following many trials at once from one process, watch vs poll, side by side.

N trials (200 by default) run at once on the test cluster (a real kube-apiserver
+ etcd; the test controller plays the operator and the kubelet, as in the
tests), each reporting an intermediate result every 10 s for ``--seconds``.
One event loop follows all of them with trialflow's own follow loop — what
one triggerer runs for N deferred trial tasks — at the DAG's default
poll_interval of 1 s, once with ``statusUpdates: watch`` and once with
``poll``. Printed per mode:

* API requests per trial per minute (counted by trialflow's client; a watch
  stream counts once however long it stays open);
* follower CPU seconds per trial-hour (CPU time of the loop's thread);
* status latency: from the test controller writing the terminal status to
  the follower returning it (median, p95, max).

With ``--airflow N``, the same experiment also runs as a DAG under a real
scheduler and triggerer (LocalExecutor, parallelism 8, SQLite): N trials, all
deferred to the one triggerer, and the latency printed is from the test
controller writing Succeeded to the Airflow task instance ending. It runs twice,
side by side: the trigger ending the task itself (the default,
``end_from_trigger=True``) and the trigger event resuming the task on a free
worker slot (``end_from_trigger=False``, how trialflow did it before).

Needs root (the test controller runs pods in private mount namespaces) and
the kube-apiserver that tests/helpers/kube/build-apiserver.sh builds.

    python bench/kube.py [--trials 200] [--seconds 60] [--airflow 200 --airflow-seconds 150]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from datetime import datetime  # noqa: E402

from bench.private_airflow import experiment_folder, private_airflow, run_to_end, write_dag  # noqa: E402
from tests.helpers.kube.cluster import KubeCluster, missing_reason  # noqa: E402
from tests.helpers.kube.controller import TestController  # noqa: E402
from trialflow.config.platforms import KubeflowConfig  # noqa: E402
from trialflow.experiment.follow import follow_trial  # noqa: E402
from trialflow.platforms.base import (  # noqa: E402
    TrialSpec,
    TrialStatus,
    experiment_id_for,
)
from trialflow.platforms.event_loop import run_sync  # noqa: E402
from trialflow.platforms.kubernetes.client import POOL  # noqa: E402
from trialflow.platforms.kubernetes.informer import INFORMERS  # noqa: E402
from trialflow.platforms.kubernetes.kubeflow import KubeflowPlatform  # noqa: E402
from trialflow.platforms.kubernetes.manifests import object_name  # noqa: E402
from trialflow.store.experiment_store import sqlite_url  # noqa: E402

TRIAL = """\
import sys, time
import trialflow.trial as t
t.get_next_parameter()
end = time.time() + float(sys.argv[1])
step = 0
while time.time() < end:
    time.sleep(min(10, max(0, end - time.time())))
    t.report_intermediate_result(step)
    step += 1
t.report_final_result(1.0)
"""


class Sink:
    """Where follow_trial puts metrics: counted, not stored (the store is not what is measured)."""

    def __init__(self) -> None:
        self.metrics = 0

    def record_metrics(self, storage_id: int, metrics: list) -> None:
        self.metrics += len(metrics)

    def set_status(self, storage_id: int, status: TrialStatus) -> None:
        pass


def run_mode(
    mode: str, cluster: KubeCluster, controller: TestController, root: Path, trials: int, seconds: float
) -> dict[str, float]:
    code = root / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "trial.py").write_text(TRIAL)
    config = KubeflowConfig.model_validate(
        {
            "platform": "kubeflow",
            "operator": "tf-operator",
            "kubeconfig": str(cluster.kubeconfig),
            "statusUpdates": mode,
            "worker": {"replicas": 1, "command": f"python3 trial.py {seconds}", "cpuNumber": 1, "memorySize": "128mb"},
        }
    )
    platform = KubeflowPlatform(config, root / "exp")
    exp = f"b{mode[0]}{int(time.time()) % 100000:05d}"
    platform.prepare_sync(exp)

    async def submit_all() -> list[dict]:
        specs = [TrialSpec(exp, f"{exp}-{i:04d}", i, i, {}, "", code) for i in range(trials)]
        return await asyncio.gather(*(platform.submit(s) for s in specs))

    handles = run_sync(submit_all())
    sink = Sink()

    async def follow_all() -> tuple[float, float, int, list[float], list[TrialStatus]]:
        cpu0, wall0, requests0 = time.thread_time(), time.monotonic(), POOL.requests
        done_at: list[float] = [0.0] * len(handles)

        async def one(i: int) -> TrialStatus | None:
            outcome = await follow_trial(platform, sink, handles[i], i, {}, poll_interval=1.0)
            done_at[i] = time.time()
            return outcome.status

        statuses = await asyncio.gather(*(one(i) for i in range(len(handles))))
        return time.thread_time() - cpu0, time.monotonic() - wall0, POOL.requests - requests0, done_at, statuses

    cpu, wall, requests, done_at, statuses = run_sync(follow_all())
    latencies = [
        done_at[i] - controller.completed_at[h["name"]]
        for i, h in enumerate(handles)
        if h["name"] in controller.completed_at
    ]
    run_sync(INFORMERS.stop_all())
    platform.cleanup_sync(exp)
    succeeded = sum(1 for s in statuses if s == TrialStatus.SUCCEEDED)
    return {
        "trials": len(handles),
        "succeeded": succeeded,
        "wall_s": wall,
        "requests": requests,
        "req_per_trial_min": requests / len(handles) / (wall / 60),
        "cpu_s": cpu,
        "cpu_s_per_trial_hour": cpu / (len(handles) * wall / 3600),
        "lat_median": statistics.median(latencies),
        "lat_p95": sorted(latencies)[int(len(latencies) * 0.95) - 1],
        "lat_max": max(latencies),
        "metrics": sink.metrics,
    }


def run_airflow(
    cluster: KubeCluster, controller: TestController, root: Path, trials: int, seconds: float, end_from_trigger: bool
) -> dict[str, Any]:
    """The experiment as a DAG: latency from Succeeded written to the trial task instance ending."""
    config = experiment_folder(
        root,
        TRIAL,
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialConcurrency: {trials}\n"
        f"maxTrialNumber: {trials}\ntuner: {{name: Random}}\ntrialCodeDirectory: .\n"
        f"trainingService: {{platform: kubeflow, operator: tf-operator, kubeconfig: {cluster.kubeconfig},\n"
        f"  worker: {{replicas: 1, command: python3 trial.py {seconds}, cpuNumber: 1, memorySize: 128mb}}}}\n",
    )
    store_url = sqlite_url(root / "experiments.db")
    airflow = private_airflow(root, 8, store_url)
    dag_file = write_dag(airflow.dags_folder, "kube_bench", config, defer_after=0, cleanup=True)
    if not end_from_trigger:  # the old way, for comparison: the trial operator's own switch, set on the mapped task
        with dag_file.open("a") as f:
            f.write('dag.task_dict["trial"].partial_kwargs["end_from_trigger"] = False\n')
    airflow.migrate()
    airflow.start()
    try:
        airflow.wait_healthy()
        done = run_to_end(airflow, "kube_bench", dag_file, seconds * 4 + 900)
    finally:
        airflow.stop()
    run_id, state, wall, tis, triggerer = done.run_id, done.state, done.wall, done.trials, done.triggerer
    exp = experiment_id_for("kube_bench", run_id)
    latencies = []
    for ti in tis:
        name = object_name(f"{exp}-{ti['map_index']:04d}")
        if ti.get("end_date") and name in controller.completed_at:
            latencies.append(datetime.fromisoformat(ti["end_date"]).timestamp() - controller.completed_at[name])
    latencies.sort()
    return {
        "state": state,
        "trials": len(tis),
        "succeeded": sum(1 for ti in tis if ti["state"] == "success"),
        "wall_s": wall,
        "lat_median": statistics.median(latencies),
        "lat_p95": latencies[int(len(latencies) * 0.95) - 1],
        "lat_max": latencies[-1],
        "lat_min": latencies[0],
        "triggerer_cpu_s": triggerer.cpu - triggerer.first_cpu,
        "triggerer_rss_mb_before": triggerer.first_rss / 2**20,
        "triggerer_rss_mb_peak": triggerer.peak_rss / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--airflow", type=int, default=0, help="also run this many trials as a DAG")
    parser.add_argument("--airflow-seconds", type=float, default=150.0)
    args = parser.parse_args()
    reason = missing_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="trialflow-bench-kube-"))
    cluster = KubeCluster(root / "cluster")
    cluster.start()
    try:
        controller = TestController(
            cluster.kubeconfig, root / "controller", path_prefix=str(Path(sys.executable).parent), interval=0.2
        ).start()
    except BaseException:
        cluster.stop()
        raise
    try:
        results = (
            {
                mode: run_mode(mode, cluster, controller, root / mode, args.trials, args.seconds)
                for mode in ("watch", "poll")
            }
            if args.trials
            else {}
        )
        dags = {
            ending: run_airflow(
                cluster, controller, root / ending, args.airflow, args.airflow_seconds, ending == "trigger"
            )
            for ending in (("trigger", "worker") if args.airflow else ())
        }
    finally:
        controller.stop()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    if dags:
        print(
            f"\nAs a DAG under the real scheduler + triggerer (LocalExecutor, parallelism 8): {args.airflow} "
            f"trials of {args.airflow_seconds:.0f} s, all deferred; Succeeded written -> task instance ended"
        )
        print(
            f"{'task ended by':16}{'succeeded':>10}{'run':>10}{'wall s':>8}{'median':>8}{'p95':>8}{'min':>8}{'max':>8}"
        )
        for ending, dag in dags.items():
            print(
                f"{ending:16}{dag['succeeded']:>10}{dag['state']:>10}{dag['wall_s']:>8.0f}{dag['lat_median']:>8.2f}"
                f"{dag['lat_p95']:>8.2f}{dag['lat_min']:>8.2f}{dag['lat_max']:>8.2f}"
            )
        for ending, dag in dags.items():
            per = args.airflow
            grown_kb = (dag["triggerer_rss_mb_peak"] - dag["triggerer_rss_mb_before"]) / per * 1024
            print(
                f"triggerer ({ending}): {dag['triggerer_cpu_s']:.1f} CPU s over the run = "
                f"{dag['triggerer_cpu_s'] / per:.3f} s per deferred trial; resident memory "
                f"{dag['triggerer_rss_mb_before']:.0f} MB before, {dag['triggerer_rss_mb_peak']:.0f} MB at peak = "
                f"{grown_kb:.0f} KB per deferred trial"
            )
        if "worker" in dags and dags["trigger"]["lat_median"] > 0:
            ratio = dags["worker"]["lat_median"] / dags["trigger"]["lat_median"]
            print(f"median latency, worker / trigger: {ratio:.1f} x (target: trigger median < 1 s, p95 < 3 s)")
    if not results:
        return 0
    print(f"\n{args.trials} trials of {args.seconds:.0f} s at once, followed from one event loop, poll_interval 1 s")
    print(f"{'':28}{'watch':>12}{'poll':>12}{'poll/watch':>12}")
    rows = [
        ("succeeded", "succeeded", "{:.0f}"),
        ("wall time (s)", "wall_s", "{:.1f}"),
        ("API requests", "requests", "{:.0f}"),
        ("requests / trial / minute", "req_per_trial_min", "{:.2f}"),
        ("follower CPU (s)", "cpu_s", "{:.1f}"),
        ("CPU s / trial-hour", "cpu_s_per_trial_hour", "{:.2f}"),
        ("status latency median (s)", "lat_median", "{:.2f}"),
        ("status latency p95 (s)", "lat_p95", "{:.2f}"),
        ("status latency max (s)", "lat_max", "{:.2f}"),
        ("metrics received", "metrics", "{:.0f}"),
    ]
    for label, key, fmt in rows:
        w, p = results["watch"][key], results["poll"][key]
        ratio = f"{p / w:.2f}x" if w else "-"
        print(f"{label:28}{fmt.format(w):>12}{fmt.format(p):>12}{ratio:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
