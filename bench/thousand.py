"""1,000 trivial trials, 50 at a time: trialflow under the real scheduler, then NNI 3.0's local mode.

One experiment DAG (local platform, trivial trials that import the trial SDK, sleep
``--seconds`` and report) runs under a private Airflow (scheduler, triggerer,
dag-processor, api-server; LocalExecutor with parallelism C + 2, SQLite). While it
runs, the store is sampled every second for trials RUNNING at once. Printed: wall
time, trials per second, the most trials seen running at once (must not exceed
trialConcurrency), and the checks: every trial index once, every trial SUCCEEDED,
one task instance per trial, all successful. Then the same experiment on the CeleryExecutor
deployment of the fault tests (tests/cluster/deployment.py: Redis, PostgreSQL for Airflow and
the store, a worker host serving the trials' queue), and NNI 3.0's local mode on the same
trials (nnictl in its own virtualenv and a loopback-only network namespace, as
bench/overhead.py runs it): its wall time, or how it failed, as it happened. Printed side by
side: trialflow / NNI (target <= 0.5).

Beside them, a hand-written DAG of the same shape (--no-floor skips it): its mapped tasks start
in the triggerer (start_from_trigger), each waits for one of C places, runs a plain Python
process of the same seconds and ends: Airflow's own floor for these tasks on this machine.

    python bench/thousand.py [--trials 1000] [--concurrency 50] [--seconds 1] [--no-celery] [--no-nni] [--no-floor]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.private_airflow import experiment_folder, private_airflow, write_dag  # noqa: E402
from trialflow.platforms.base import experiment_id_for  # noqa: E402
from trialflow.store.experiment_store import ExperimentStore, sqlite_url  # noqa: E402

TRIAL = """\
import sys, time
from trialflow import trial
p = trial.get_next_parameter()
time.sleep(float(sys.argv[1]))
trial.report_final_result(p["x"])
"""


def experiment_files(root: Path, args: argparse.Namespace, trial_command: str) -> Path:
    return experiment_folder(
        root,
        TRIAL,
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\n"
        f"trialCommand: {trial_command} trial.py {args.seconds}\ntrialCodeDirectory: .\n"
        f"trialConcurrency: {args.concurrency}\nmaxTrialNumber: {args.trials}\n"
        "tuner: {name: Random}\ntrainingService: {platform: local}\n",
    )


def component_cpu(airflow: Any) -> dict[str, float]:
    """CPU seconds so far of each Airflow component's process tree (itself, its live
    descendants, and the children they reaped: a trial started in the triggerer is the
    triggerer's), and of the whole machine ("machine busy")."""
    import psutil

    seconds: dict[str, float] = {}
    for name, proc in airflow.processes.items():
        total = 0.0
        try:
            root = psutil.Process(proc.pid)
            for each in [root, *root.children(recursive=True)]:
                try:
                    t = each.cpu_times()
                    total += t.user + t.system + t.children_user + t.children_system
                except psutil.NoSuchProcess:
                    pass
        except psutil.NoSuchProcess:
            pass
        seconds[name] = total
        if name == "triggerer":
            seconds.update(triggerer_parts(proc.pid))
    machine = psutil.cpu_times()
    seconds["machine busy"] = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
    return seconds


def triggerer_parts(pid: int) -> dict[str, float]:
    """The triggerer's CPU in three: its supervisor (Airflow's loop that writes the triggers'
    events and serves their requests), its trigger runner (the triggers themselves, trialflow's
    starts, follows and closes among them) and the processes the runner started and reaped (the
    trials' wrappers and Pythons)."""
    import psutil

    try:
        supervisor = psutil.Process(pid)
        times = supervisor.cpu_times()
        parts = {"triggerer: supervisor": times.user + times.system}
        runner = runner_reaped = 0.0
        for child in supervisor.children():
            t = child.cpu_times()
            runner += t.user + t.system
            runner_reaped += t.children_user + t.children_system
    except psutil.NoSuchProcess:
        return {}
    return parts | {"triggerer: runner": runner, "triggerer: trials' processes": runner_reaped}


@dataclass
class TimedRun:
    """A DAG run the bench triggered and waited for, with the CPU each component spent on it."""

    run_id: str
    state: str
    wall: float
    cpu: dict[str, float]


def timed_run(
    airflow: Any, dag_id: str, args: argparse.Namespace, each_second: Callable[[str], None] = lambda run_id: None
) -> TimedRun:
    """Trigger ``dag_id`` and wait for its run to end (bounded by the trials' own time plus ten
    minutes), calling ``each_second`` with the run's id while it runs."""
    cpu_before = component_cpu(airflow)
    started = time.monotonic()
    run_id = airflow.trigger(dag_id)
    limit = started + args.trials * (args.seconds + 5) + 600
    while (state := airflow.dag_run_state(dag_id, run_id)) not in ("success", "failed"):
        if time.monotonic() > limit:
            raise TimeoutError(f"the run of {dag_id} did not finish")
        each_second(run_id)
        time.sleep(1.0)
    wall = time.monotonic() - started
    cpu_after = component_cpu(airflow)
    return TimedRun(run_id, state, wall, {name: cpu_after[name] - cpu_before.get(name, 0.0) for name in cpu_after})


def run_experiment(airflow: Any, store_url: str, dag_id: str, args: argparse.Namespace) -> dict[str, Any]:
    """Trigger the DAG, sample the store for trials running at once, check every trial once;
    with the CPU each component spent meanwhile."""
    store = ExperimentStore(store_url)
    most_running = 0

    def sample(run_id: str) -> None:
        nonlocal most_running
        experiment = experiment_id_for(dag_id, run_id)
        if store.experiment_exists(experiment):
            running = sum(1 for r in store.trial_rows(experiment) if r.status == "RUNNING")
            most_running = max(most_running, running)

    run = timed_run(airflow, dag_id, args, sample)
    run_id, state, wall, cpu = run.run_id, run.state, run.wall, run.cpu
    experiment = experiment_id_for(dag_id, run_id)
    tis = [ti for ti in airflow.task_instances(dag_id, run_id) if ti["task_id"] == "trial"]
    rows = store.trial_rows(experiment)
    indexes = [r.trial_index for r in rows]
    statuses = Counter(r.status for r in rows)
    ti_states = Counter(ti["state"] for ti in tis)
    checks = {
        "run succeeded": state == "success",
        "every trial index once": sorted(indexes) == list(range(args.trials)),
        "every trial SUCCEEDED": statuses == Counter({"SUCCEEDED": args.trials}),
        "one successful task instance per trial": ti_states == Counter({"success": args.trials})
        and len({ti["map_index"] for ti in tis}) == args.trials,
        f"never more than {args.concurrency} running": most_running <= args.concurrency,
    }
    return {
        "wall": wall,
        "most_running": most_running,
        "statuses": statuses,
        "tis": ti_states,
        "checks": checks,
        "cpu": cpu,
    }


def triggerer_sized(args: argparse.Namespace) -> dict[str, str]:
    """A triggerer with a place for every trial task and the run's own triggers: started in the
    triggerer, every trial task of the run is a trigger from the run's start, and at Airflow's
    default capacity (1,000) a run of 1,000 left the run's watch without a place until trials
    ended (nothing reconciled the run meanwhile; the DAG's doc says so, start_place)."""
    return {"AIRFLOW__TRIGGERER__CAPACITY": str(max(1000, args.trials + 100))}


def local_executor(args: argparse.Namespace, start_trials_in: str = "worker") -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="trialflow-bench-thousand-"))
    try:
        config = experiment_files(root, args, sys.executable)
        store_url = sqlite_url(root / "experiments.db")
        airflow = private_airflow(
            root, args.concurrency + 2, store_url, TRIALFLOW_CACHE_DIR=str(root / "plans"), **triggerer_sized(args)
        )
        dag_file = write_dag(airflow.dags_folder, "scale", config, start_trials_in=start_trials_in)
        airflow.migrate()
        airflow.start()
        try:
            airflow.wait_healthy()
            airflow.wait_for_dag("scale", dag_file, timeout=180)
            return run_experiment(airflow, store_url, "scale", args)
        finally:
            airflow.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


#: The hand-written floor's trigger (in the private Airflow's plugins folder, which every
#: component has on sys.path): it waits for one of C places in the triggerer, runs the trial's
#: process and ends its task; nothing else. A place per event loop: one triggerer, one loop.
FLOOR_TRIGGER = """\
import asyncio

from airflow.triggers.base import BaseTrigger, TaskFailedEvent, TaskSuccessEvent

_PLACES = {}


class FloorTrigger(BaseTrigger):
    def __init__(self, command, concurrency):
        super().__init__()
        self.command, self.concurrency = list(command), int(concurrency)

    def serialize(self):
        return ("bench_floor_trigger.FloorTrigger", {"command": self.command, "concurrency": self.concurrency})

    async def run(self):
        loop = asyncio.get_running_loop()
        places = _PLACES.setdefault(id(loop), asyncio.Semaphore(self.concurrency))
        async with places:
            process = await asyncio.create_subprocess_exec(*self.command)
            code = await process.wait()
        yield TaskSuccessEvent() if code == 0 else TaskFailedEvent()
"""
#: The hand-written DAG whose mapped tasks start in the triggerer (start_from_trigger) and run
#: the same trial process: what Airflow costs for this shape, whatever starts the trials.
FLOOR_DAG = """\
from airflow.sdk import DAG, BaseOperator
from airflow.triggers.base import StartTriggerArgs


class FloorOperator(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls="bench_floor_trigger.FloorTrigger",
        trigger_kwargs={{"command": {command!r}, "concurrency": {concurrency}}},
        next_method="execute_complete",
        next_kwargs=None,
        timeout=None,
    )

    def __init__(self, index, **kwargs):
        super().__init__(**kwargs)
        self.index = index

    def execute(self, context):
        raise RuntimeError("starts in the triggerer")

    def execute_complete(self, context, event=None):
        return None


with DAG("floor", schedule=None):
    FloorOperator.partial(task_id="trial").expand(index=list(range({trials})))
"""
PLAIN_TRIAL = "import sys, time\ntime.sleep(float(sys.argv[1]))\n"


def triggered_floor(args: argparse.Namespace) -> dict[str, Any]:
    """The hand-written DAG of FLOOR_DAG on the same private Airflow as local_executor: each
    task waits for one of C places, runs a plain Python process of ``--seconds`` (no SDK, no
    tuner, no store) and ends in the triggerer. Its wall is Airflow's own floor for 1,000
    triggered tasks on this machine; its CPU, Airflow's components' share."""
    root = Path(tempfile.mkdtemp(prefix="trialflow-bench-thousand-floor-"))
    try:
        (root / "plain.py").write_text(PLAIN_TRIAL)
        airflow = private_airflow(
            root, args.concurrency + 2, sqlite_url(root / "experiments.db"), **triggerer_sized(args)
        )
        plugins = airflow.home / "plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        (plugins / "bench_floor_trigger.py").write_text(FLOOR_TRIGGER)
        dag_file = airflow.dags_folder / "floor.py"
        command = [sys.executable, str(root / "plain.py"), str(args.seconds)]
        dag_file.write_text(FLOOR_DAG.format(command=command, concurrency=args.concurrency, trials=args.trials))
        airflow.migrate()
        airflow.start()
        try:
            airflow.wait_healthy()
            airflow.wait_for_dag("floor", dag_file, timeout=180)
            run = timed_run(airflow, "floor", args)
            ti_states = Counter(ti["state"] for ti in airflow.task_instances("floor", run.run_id))
            return {
                "wall": run.wall,
                "tis": ti_states,
                "cpu": run.cpu,
                "checks": {
                    "run succeeded": run.state == "success",
                    "one successful task instance per trial": ti_states == Counter({"success": args.trials}),
                },
            }
        finally:
            airflow.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def celery_executor(args: argparse.Namespace) -> dict[str, Any] | str:
    """The same experiment on the multi-host deployment of the fault tests: CeleryExecutor,
    Redis, PostgreSQL for Airflow and the store; local trials pinned to worker-a's queue."""
    from tests.helpers.deployment import Deployment, missing_reason
    from tests.helpers.postgres import PostgresServer
    from tests.helpers.postgres import missing_reason as no_postgres

    reason = missing_reason() or no_postgres()
    if reason:
        return reason
    root = Path(tempfile.mkdtemp(prefix="trialflow-bench-thousand-celery-"))
    server = PostgresServer.create()
    server.start()
    deployment = None
    try:
        deployment = Deployment(root / "cluster", server.url)
        deployment.airflow.parallelism = args.concurrency + 4
        deployment.airflow.extra_env["AIRFLOW__CELERY__WORKER_CONCURRENCY"] = str(args.concurrency + 4)
        config = experiment_files(root, args, "python3")
        dag_file = write_dag(deployment.airflow.dags_folder, "scale_celery", config, local_queue="box-a")
        deployment.start({"worker-a": ("box-a", "default")})
        deployment.wait_for_workers()
        deployment.airflow.wait_for_dag("scale_celery", dag_file, timeout=180)
        return run_experiment(deployment.airflow, deployment.store_url, "scale_celery", args)
    finally:
        if deployment is not None:
            deployment.stop()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def show(title: str, args: argparse.Namespace, result: dict[str, Any]) -> None:
    wall = result["wall"]
    ideal = args.trials * args.seconds / args.concurrency
    print(f"{title}: {args.trials} trials of {args.seconds:g} s, trialConcurrency {args.concurrency}, local platform")
    seen = f", most seen running at once {result['most_running']}" if "most_running" in result else ""
    print(f"  wall {wall:.0f} s ({wall / ideal:.1f}x the ideal {ideal:.0f} s), {args.trials / wall:.2f} trials/s{seen}")
    store = f"store: {dict(result['statuses'])}; " if "statuses" in result else ""
    print(f"  {store}task instances: {dict(result['tis'])}")
    cpu = result.get("cpu") or {}
    if cpu:
        cores = psutil_cores()
        parts = ", ".join(
            f"{name} {seconds:.0f} s ({1000 * seconds / args.trials:.0f} ms a trial)"
            for name, seconds in sorted(cpu.items(), key=lambda kv: -kv[1])
            if name != "machine busy" and not name.startswith("triggerer: ")
        )
        busy = cpu.get("machine busy", 0.0)
        print(f"  CPU while it ran: {parts}; the machine {busy:.0f} s of {cores * wall:.0f} ({cores} cores)")
        split = [(name.split(": ", 1)[1], seconds) for name, seconds in cpu.items() if name.startswith("triggerer: ")]
        if split:
            inside = ", ".join(f"{name} {1000 * seconds / args.trials:.0f}" for name, seconds in split)
            print(f"  the triggerer's, in ms a trial: {inside}")
    for name, ok in result["checks"].items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")


def psutil_cores() -> int:
    import psutil

    return psutil.cpu_count() or 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--start-in", choices=("worker", "triggerer", "both"), default="both")
    parser.add_argument("--no-nni", action="store_true")
    parser.add_argument("--no-celery", action="store_true")
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the hand-written DAG of triggered tasks (Airflow's floor)"
    )
    args = parser.parse_args()
    walls = {}
    ok = True
    for place in ("worker", "triggerer") if args.start_in == "both" else (args.start_in,):
        local = local_executor(args, place)
        show(f"trialflow, LocalExecutor (SQLite), trial tasks started in the {place}", args, local)
        walls[f"LocalExecutor, {place}"] = local["wall"]
        ok &= all(local["checks"].values())
    if not args.no_floor:
        floor = triggered_floor(args)
        show("hand-written DAG, tasks started in the triggerer (Airflow's floor: no tuner, no store)", args, floor)
        ok &= all(floor["checks"].values())
        for name, wall in walls.items():
            print(f"  trialflow ({name}) / hand-written = {wall / floor['wall']:.2f}")
    if not args.no_celery:
        celery = celery_executor(args)
        if isinstance(celery, str):
            print(f"trialflow, CeleryExecutor: skipped: {celery}")
        else:
            show("trialflow, CeleryExecutor (PostgreSQL, Redis; one worker host)", args, celery)
            walls["CeleryExecutor"] = celery["wall"]
            ok &= all(celery["checks"].values())
    if not args.no_nni:
        nni, how = nni_wall(args.trials, args.concurrency, args.seconds)
        if nni is None:
            print(f"NNI 3.0 local mode, same trials: did not finish: {how}")
        else:
            print(f"NNI 3.0 local mode, same trials: wall {nni:.0f} s")
            for name, wall in walls.items():
                print(f"  trialflow ({name}) / NNI = {wall / nni:.2f} (target <= 0.5)")
    return 0 if ok else 1


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
