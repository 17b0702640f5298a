"""1,000 trivial trials, 50 at a time: trialflow under the real scheduler, then NNI 3.0's local mode.

One experiment DAG (local platform, trivial trials that import the trial SDK, sleep
``--seconds`` and report) runs under a private Airflow (scheduler, triggerer,
dag-processor, api-server; LocalExecutor with parallelism C + 2, SQLite). While it
runs, the store is sampled every second for trials RUNNING at once. Printed: wall
time, trials per second, the most trials seen running at once (must not exceed
trialConcurrency), and the checks: every trial index once, every trial SUCCEEDED,
one task instance per trial, all successful. Then, in the same run, NNI 3.0's local mode on
the same trials (nnictl in its own virtualenv and a loopback-only network namespace, as
bench/overhead.py runs it): its wall time, or how it failed, as it happened. Printed side by
side: trialflow / NNI (target <= 0.5).

    python bench/thousand.py [--trials 1000] [--concurrency 50] [--seconds 1] [--no-nni]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.private_airflow import private_airflow  # noqa: E402
from trialflow.platforms.base import experiment_id_for  # noqa: E402
from trialflow.tuning.experiment_store import ExperimentStore, sqlite_url  # noqa: E402

TRIAL = """\
import sys, time
from trialflow import trial
p = trial.get_next_parameter()
time.sleep(float(sys.argv[1]))
trial.report_final_result(p["x"])
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--no-nni", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="trialflow-bench-scale-"))
    work = root / "experiment"
    work.mkdir()
    (work / "trial.py").write_text(TRIAL)
    (work / "config.yml").write_text(
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\n"
        f"trialCommand: {sys.executable} trial.py {args.seconds}\ntrialCodeDirectory: .\n"
        f"trialConcurrency: {args.concurrency}\nmaxTrialNumber: {args.trials}\n"
        "tuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    store_url = sqlite_url(root / "experiments.db")
    airflow = private_airflow(root, args.concurrency + 2, store_url, TRIALFLOW_CACHE_DIR=str(root / "plans"))
    dag_file = airflow.dags_folder / "scale.py"
    dag_file.write_text(
        "# airflow DAG\nfrom trialflow.dag import experiment_dag\n"
        f"dag = experiment_dag({str(work / 'config.yml')!r}, dag_id='scale')\n"
    )
    most_running = 0
    airflow.migrate()
    airflow.start()
    try:
        airflow.wait_healthy()
        airflow.wait_for_dag("scale", dag_file, timeout=180)
        started = time.monotonic()
        run_id = airflow.trigger("scale")
        experiment = experiment_id_for("scale", run_id)
        store = ExperimentStore(store_url)
        limit = started + args.trials * (args.seconds + 5) + 600
        while airflow.dag_run_state("scale", run_id) not in ("success", "failed"):
            if time.monotonic() > limit:
                raise TimeoutError("the experiment did not finish")
            if store.experiment_exists(experiment):
                running = sum(1 for r in store.trial_rows(experiment) if r["status"] == "RUNNING")
                most_running = max(most_running, running)
            time.sleep(1.0)
        wall = time.monotonic() - started
        state = airflow.dag_run_state("scale", run_id)
        tis = [ti for ti in airflow.task_instances("scale", run_id) if ti["task_id"] == "trial"]
        rows = store.trial_rows(experiment)
    finally:
        airflow.stop()
        shutil.rmtree(root, ignore_errors=True)
    indexes = [r["trial_index"] for r in rows]
    statuses = Counter(r["status"] for r in rows)
    ti_states = Counter(ti["state"] for ti in tis)
    checks = {
        "run succeeded": state == "success",
        "every trial index once": sorted(indexes) == list(range(args.trials)),
        "every trial SUCCEEDED": statuses == Counter({"SUCCEEDED": args.trials}),
        "one successful task instance per trial": ti_states == Counter({"success": args.trials})
        and len({ti["map_index"] for ti in tis}) == args.trials,
        f"never more than {args.concurrency} running": most_running <= args.concurrency,
    }
    print(f"{args.trials} trials of {args.seconds:g} s, trialConcurrency {args.concurrency}, local platform")
    print(f"  wall {wall:.0f} s, {args.trials / wall:.2f} trials/s, most seen running at once {most_running}")
    print(f"  store: {dict(statuses)}; task instances: {dict(ti_states)}")
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    if not args.no_nni:
        nni, how = nni_wall(args.trials, args.concurrency, args.seconds)
        if nni is None:
            print(f"NNI 3.0 local mode, same trials: did not finish: {how}")
        else:
            ratio = wall / nni
            print(f"NNI 3.0 local mode, same trials: wall {nni:.0f} s; trialflow / NNI = {ratio:.2f} (target <= 0.5)")
    return 0 if all(checks.values()) else 1


def nni_wall(trials: int, concurrency: int, seconds: float) -> tuple[float | None, str]:
    """NNI's wall time for the same trials, or None and what happened (its own words)."""
    from bench.overhead import NNI_TRIAL, ensure_nni, run_nni

    if not ensure_nni():
        return None, "its virtualenv could not be built"
    work = Path(tempfile.mkdtemp(prefix="trialflow-bench-nni-"))
    try:
        (work / "nni_trial.py").write_text(NNI_TRIAL)
        seconds_taken = run_nni(work, trials, concurrency, seconds, "thousand", timeout=1800)
        if seconds_taken is not None:
            return seconds_taken, ""
        logs = sorted(work.glob("*.nnictl.log"))
        tail = logs[-1].read_text(errors="replace")[-400:] if logs else "no log"
        return None, f"not every trial succeeded within its time; nnictl said: {tail}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
