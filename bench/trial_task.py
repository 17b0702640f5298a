"""A trial task's own cost, without the scheduler's noise: CPU, SQL statements and wall time.

Airflow runs a trial task as a fork of a process that has (with ``preload_core``) imported the
core already. This bench does the same: a parent process imports what the trialflow plugin
preloads, creates the experiment (what the start step does), then forks one child per trial, one
after the other, and each child does what SubmitTrialOperator.execute does without Airflow: load
the experiment, open the store, start the trial (ask, record, launch), follow it to its end in
the worker, finish it. The child's CPU comes from the kernel (``wait4``'s rusage), so the
figure is repeatable to a few ms where the overhead bench moves by +-30 %. The start step's
work runs in a child of its own, so the forking parent has only what the preload gave it, and the
parent freezes its objects before forking (``gc.freeze()``, as the LocalExecutor does). The trial itself
(``python light.py 0``) runs in its own processes and is not counted.

    python bench/trial_task.py [--trials 20] [--tuner Random] [--history 0] [--source OLD_CHECKOUT]

``--history N`` puts N finished trials in the experiment first, written in bulk by this
checkout's bench/seed.py (the ask latency with 20,000 finished trials, the way a trial task asks).

``--source`` runs the same children from another checkout (side by side: before/after).

``--in-process`` measures the triggerer's way instead: one warm process starts and closes every
trial, one after the other (the store's engine, its compiled statements and the experiment
shared, as a triggerer shares them), and prints the CPU of a start and of a close
(``time.process_time`` around each: the trial's own processes are not counted).
``TRIALFLOW_BENCH_PROFILE=DIR`` writes each ask's cProfile to DIR (where an ask's time goes);
``TRIALFLOW_BENCH_SQL=DIR`` each task's SQL statements, in order (what a store call costs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

DRIVER = r"""
import json, os, sys, time
from pathlib import Path

work, trials, tuner, history = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
os.environ["AIRFLOW__TRIALFLOW__PRELOAD_CORE"] = "True"
os.environ["AIRFLOW__CORE__LAZY_LOAD_PLUGINS"] = "False"
import trialflow.ui.plugin  # noqa: F401  (preload_core(), as in each Airflow component)

from trialflow.experiment import Experiment
try:
    from trialflow.lifecycle import trial_lifecycle
except ImportError:  # a checkout from before trialflow/lifecycle/ (--source)
    try:
        from trialflow import trial_lifecycle
    except ImportError:  # from before the module was named for one trial's life
        from trialflow import lifecycle as trial_lifecycle
try:
    from trialflow.store.experiment_store import ExperimentStore
except ImportError:  # a checkout from before trialflow/store was a room of its own (--source)
    try:
        from trialflow.tuning.experiment_store import ExperimentStore
    except ImportError:  # from before the module was named for what it holds
        from trialflow.tuning.store import ExperimentStore

url = f"sqlite:///{work / 'experiments.db'}"
config = str(work / "config.yml")
dag_id, run_id = "bench", "manual__bench"
# The start step's work, in a child of its own: the forking parent keeps only what the
# preload gave it, as an Airflow worker does.
starter = os.fork()
if starter == 0:
    experiment = Experiment.for_run(config, dag_id, run_id, check=True)
    store = ExperimentStore(url)
    experiment.open(store)
    try:
        from trialflow.runs import allot_window
    except ImportError:  # a checkout from before a run's policy had its own package (--source)
        experiment.start_run(store, run_id)
    else:
        allot_window(experiment, store, run_id)
    from trialflow.platforms.base import TrialStatus

    if history:  # finished trials of earlier runs, as trialflow writes them, written in bulk
        import importlib.util

        sys.path.append(os.environ["TRIALFLOW_BENCH_ROOT"])  # after the checkout under test
        path = Path(os.environ["TRIALFLOW_BENCH_ROOT"]) / "bench" / "tuners.py"
        spec = importlib.util.spec_from_file_location("bench_seeder", path)
        seeder = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(seeder)
        seeder.seed_history(store, experiment.experiment_id, experiment.space, history, first_index=100000)
    os._exit(0)
_, status = os.waitpid(starter, 0)
assert status == 0, "the start step's work failed"

# The tuner's own share of a task: the ask, timed where start_trial makes it.
asks = []
# The asker drives the tuner since issue 48 (start_trial calls its ask); before, the store did.
_asks_in_store = hasattr(ExperimentStore, "ask")
# Since issue 65 a start calls ask_new (it read whether the trial was asked with the rest).
_ask_name = "ask_new" if hasattr(trial_lifecycle, "ask_new") else "ask"
_ask = ExperimentStore.ask if _asks_in_store else getattr(trial_lifecycle, _ask_name)


def timed_ask(self, *args, **kwargs):
    profile = os.environ.get("TRIALFLOW_BENCH_PROFILE")  # a folder: each ask's cProfile there
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    before = time.perf_counter()
    try:
        return _ask(self, *args, **kwargs)
    finally:
        asks.append(time.perf_counter() - before)
        if profile:
            profiler.disable()
            profiler.dump_stats(f"{profile}/ask.{os.getpid()}.prof")


if _asks_in_store:
    ExperimentStore.ask = timed_ask
else:
    setattr(trial_lifecycle, _ask_name, timed_ask)


def task(index: int, report: int) -> None:
    import sqlalchemy as sa

    started = time.perf_counter()
    from trialflow.hooks import airflow_connections

    experiment = Experiment.for_run(config, dag_id, run_id, check=False)
    store = ExperimentStore(url)
    counts = {"statements": 0, "commits": 0}
    def count(kind):
        return lambda *args: counts.__setitem__(kind, counts[kind] + 1)

    sa.event.listen(store.engine, "before_cursor_execute", count("statements"))
    sql_dir = os.environ.get("TRIALFLOW_BENCH_SQL")  # a folder: each task's statements there, in order
    if sql_dir:
        said = open(f"{sql_dir}/task.{os.getpid()}.sql", "w", buffering=1)
        sa.event.listen(
            store.engine,
            "before_cursor_execute",
            lambda conn, cursor, statement, *rest: said.write(" ".join(statement.split())[:300] + "\n"),
        )
        sa.event.listen(store.engine, "commit", lambda conn: said.write("-- commit\n"))
    sa.event.listen(store.engine, "commit", count("commits"))
    trial = trial_lifecycle.start_trial(experiment, store, run_id, index, connections=airflow_connections())
    launched = time.perf_counter()
    outcome = trial_lifecycle.wait_in_worker(trial, store, None, 1.0)
    ended = time.perf_counter()
    result = trial_lifecycle.finish_trial(store, trial.record.storage_id, outcome.status, outcome.message)
    done = time.perf_counter()
    os.write(report, json.dumps({
        "status": result.status.value, "wall": done - started, "to_launch": launched - started,
        "noticed": ended - launched, "finish": done - ended, "ask": sum(asks), **counts,
    }).encode() + b"\n")


# As the LocalExecutor does before it forks its workers: what the parent holds moves to the
# permanent generation, so a collection in a child does not walk (and copy) all of it.
import gc

gc.freeze()
rows = []
for index in range(trials):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            task(index, write)
        finally:
            os._exit(0)
    os.close(write)
    _, _, usage = os.wait4(pid, 0)
    with os.fdopen(read) as pipe:
        row = json.loads(pipe.read())
    row["cpu"] = usage.ru_utime + usage.ru_stime
    rows.append(row)
print(json.dumps(rows))
"""

IN_PROCESS = r"""
import json, os, sys, time
from pathlib import Path

work, trials = Path(sys.argv[1]), int(sys.argv[2])
os.environ["AIRFLOW__TRIALFLOW__PRELOAD_CORE"] = "True"
os.environ["AIRFLOW__CORE__LAZY_LOAD_PLUGINS"] = "False"
import trialflow.ui.plugin  # noqa: F401
import sqlalchemy as sa
from trialflow.experiment import Experiment
from trialflow.hooks import airflow_connections
from trialflow.lifecycle import trial_lifecycle
from trialflow.runs import allot_window
from trialflow.store.experiment_store import ExperimentStore

experiment = Experiment.for_run(str(work / "config.yml"), "bench", "manual__bench", check=True)
store = ExperimentStore(f"sqlite:///{work / 'experiments.db'}")
experiment.open(store)
allot_window(experiment, store, "manual__bench")
connections = airflow_connections()
said = [0]
sa.event.listen(store.engine, "before_cursor_execute", lambda *args: said.__setitem__(0, said[0] + 1))
rows = []
for index in range(trials):
    before, cpu = said[0], time.process_time()
    trial = trial_lifecycle.start_trial(experiment, store, "manual__bench", index, connections=connections)
    start_cpu, start_said = time.process_time() - cpu, said[0] - before
    outcome = trial_lifecycle.wait_in_worker(trial, store, None, 0.05)
    before, cpu = said[0], time.process_time()
    result = trial_lifecycle.finish_trial(store, trial.record.storage_id, outcome.status, outcome.message)
    rows.append({
        "status": result.status.value, "start_cpu": start_cpu, "close_cpu": time.process_time() - cpu,
        "start_statements": start_said, "close_statements": said[0] - before,
    })
print(json.dumps(rows))
"""

LIGHT_TRIAL = """\
import sys
from trialflow import trial
p = trial.get_next_parameter()
trial.report_final_result(p.get("x", 0.0))
"""


def run(
    source: Path, trials: int, tuner: str, history: int = 0, preload_tuners: str = "", in_process: bool = False
) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="trialflow-task-bench-"))
    (work / "light.py").write_text(LIGHT_TRIAL)
    (work / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}, y: {_type: choice, _value: [a, b, c]}}\n"
        f"trialCommand: {sys.executable} light.py\ntrialCodeDirectory: {work}\n"
        f"trialConcurrency: 1\nmaxTrialNumber: {trials}\ntuner: {{name: {tuner}}}\n"
        f"trainingService: {{platform: local}}\nexperimentWorkingDirectory: {work / 'runs'}\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(source),
        "AIRFLOW_HOME": str(work / "airflow"),
        "TRIALFLOW_CACHE_DIR": str(work / "cache"),
        "TRIALFLOW_BENCH_ROOT": str(ROOT),
        "AIRFLOW__TRIALFLOW__PRELOAD_TUNERS": preload_tuners,
    }
    driver = (
        [IN_PROCESS, str(work), str(trials)] if in_process else [DRIVER, str(work), str(trials), tuner, str(history)]
    )
    out = subprocess.run(
        [sys.executable, "-c", *driver],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=600,
    )
    if out.returncode != 0:
        raise SystemExit(f"{source}: the driver failed:\n{out.stderr[-3000:]}")
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    bad = [r for r in rows if r["status"] != "SUCCEEDED"]
    if bad:
        raise SystemExit(f"{source}: {len(bad)} trials did not succeed: {bad[:3]}")
    return rows


def summary(rows: list[dict]) -> dict[str, float]:
    rows = rows[1:]  # the first child also pays what the parent left lazy (first statement, caches)
    med = statistics.median
    return {
        "cpu_ms": 1000 * med(r["cpu"] for r in rows),
        "wall_ms": 1000 * med(r["wall"] for r in rows),
        "to_launch_ms": 1000 * med(r["to_launch"] for r in rows),
        "noticed_ms": 1000 * med(r["noticed"] for r in rows),
        "finish_ms": 1000 * med(r["finish"] for r in rows),
        "ask_ms": 1000 * med(r["ask"] for r in rows),
        "statements": med(r["statements"] for r in rows),
        "commits": med(r["commits"] for r in rows),
    }


def in_process_summary(rows: list[dict]) -> dict[str, float]:
    rows = rows[5:]  # the first starts fill the engine's compiled cache and the lazy imports
    med = statistics.median
    return {
        "start_cpu_ms": 1000 * med(r["start_cpu"] for r in rows),
        "close_cpu_ms": 1000 * med(r["close_cpu"] for r in rows),
        "start_statements": med(r["start_statements"] for r in rows),
        "close_statements": med(r["close_statements"] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--tuner", default="Random")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--history", type=int, default=0, help="finished trials in the experiment before")
    parser.add_argument("--source", help="another checkout to run side by side (before)")
    parser.add_argument("--preload-tuners", default="", help="[trialflow] preload_tuners for the parent (GP)")
    parser.add_argument("--in-process", action="store_true", help="the triggerer's way: one warm process (Random)")
    args = parser.parse_args()
    sources = {"this checkout": ROOT}
    if args.source:
        sources = {"before": Path(args.source).resolve(), "after": ROOT}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
    if args.in_process:
        return print_in_process(sources, results, args)
    for _ in range(args.repeat):  # interleaved, so both see the same machine
        for name, source in sources.items():
            results[name].append(summary(run(source, args.trials, args.tuner, args.history, args.preload_tuners)))
    keys = ["cpu_ms", "wall_ms", "to_launch_ms", "ask_ms", "noticed_ms", "finish_ms", "statements", "commits"]
    print(
        f"\nOne trial task ({args.tuner}, {args.history} finished trials before, trivial local trial"
        f"{', preload_tuners = ' + args.preload_tuners if args.preload_tuners else ''}), "
        f"medians over {args.trials - 1} tasks, "
        f"then the median of {args.repeat} runs\n"
    )
    print("| checkout | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, runs in results.items():
        cells = [f"{statistics.median(r[k] for r in runs):.1f}" for k in keys]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if len(results) == 2:
        before, after = (statistics.median(r["cpu_ms"] for r in runs) for runs in results.values())
        print(f"\nCPU per trial task: after / before = {after / before:.2f}")


def print_in_process(sources: dict[str, Path], results: dict[str, list[dict[str, float]]], args: Any) -> None:
    """Starts and closes in one warm process, checkouts interleaved (see module)."""
    trials = max(args.trials, 6)
    for _ in range(args.repeat):
        for name, source in sources.items():
            results[name].append(in_process_summary(run(source, trials, "Random", in_process=True)))
    keys = ["start_cpu_ms", "close_cpu_ms", "start_statements", "close_statements"]
    print(
        f"\nA trial's start and close in one warm process (the triggerer's way; Random, trivial local "
        f"trial), medians over {trials - 5} trials, then the median of {args.repeat} runs\n"
    )
    print("| checkout | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, runs in results.items():
        print(f"| {name} | " + " | ".join(f"{statistics.median(r[k] for r in runs):.1f}" for k in keys) + " |")
    if len(results) == 2:
        (before, after) = ([statistics.median(r[k] for r in runs) for k in keys[:2]] for runs in results.values())
        print(f"\nCPU of a start and a close: after / before = {sum(after) / sum(before):.2f}")


if __name__ == "__main__":
    main()
