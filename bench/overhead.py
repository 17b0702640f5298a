"""Orchestration overhead, side by side in one run on trivial trials (N trials, C at once, S s each):

    trialflow experiment DAG (its trial tasks where the default puts them: the triggerer for these
    cases; and started by workers, start_trials_in='worker')
    vs  a hand-written Airflow DAG (BashOperator.expand, same scheduler)
    vs  the same hand-written DAG with a start task before the trials (trialflow's shape: the
        floor Airflow sets for a DAG with a start step, whatever the start step does)
    vs  a hand-written DAG that tunes: each mapped task asks Optuna for the parameter, runs the
        same trial and tells Optuna its result, in an Optuna RDB storage (SQLite) of its own (the
        floor of hyperparameter tuning in Airflow tasks, whatever does it)
    vs  NNI 3.0 local mode (nnictl, its own venv)  vs  `xargs -P C` (the floor)

plus `trialflow run` including Airflow's start-up (cold) and on a home kept up (warm), and
orchestration memory (PSS). Airflow's runs come first, then `trialflow run`, then NNI's (see
main). ``--only-run``: `trialflow run` cold and warm beside NNI, nothing else.
Prints medians and ratios; targets from issue #2 are shown beside them. Not a test:
figures depend on the machine, so read them side by side.

    python bench/overhead.py [--repeat 3] [--cases 20,4,0 20,4,3 40,8,1] [--skip-nni]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC
from pathlib import Path

import optuna
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.private_airflow import private_airflow  # noqa: E402
from tests.helpers.nni_venv import NNI_VENV, build_nni_venv  # noqa: E402
from trialflow.cli.embedded import EmbeddedAirflow  # noqa: E402
from trialflow.platforms.base import experiment_id_for  # noqa: E402
from trialflow.store.experiment_store import ExperimentStore, sqlite_url  # noqa: E402

PY = sys.executable
LIGHT_TRIAL = """\
import sys, time
from trialflow import trial
p = trial.get_next_parameter()
time.sleep(float(sys.argv[1]))
trial.report_final_result(p.get("x", 0.0))
"""
PLAIN_TRIAL = """\
import sys, time
time.sleep(float(sys.argv[1]))
print(float(sys.argv[2]))
"""
#: The hand-written tuning DAG: what a user writes with Optuna and no trialflow.
OPTUNA_DAG = """\
from airflow.sdk import DAG, task

STORAGE, PY, SCRIPT, SECONDS = {storage!r}, {py!r}, {script!r}, {seconds!r}


@task(max_active_tis_per_dagrun={c})
def trial(index, dag_run=None):
    import subprocess

    import optuna

    study = optuna.load_study(study_name=dag_run.run_id, storage=STORAGE)
    asked = study.ask()
    x = asked.suggest_float("x", 0.0, 1.0)
    out = subprocess.run([PY, SCRIPT, str(SECONDS), str(x)], check=True, capture_output=True, text=True)
    study.tell(asked, float(out.stdout))
    return x


with DAG({dag_id!r}, schedule=None):
    trial.expand(index=list(range({n})))
"""
NNI_TRIAL = """\
import sys, time
import nni
p = nni.get_next_parameter()
time.sleep(float(sys.argv[1]))
nni.report_final_result(p.get("x", 0.0))
"""


def config_text(n: int, c: int, s: float, python: str, script: str) -> str:
    return (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {python} {script} {s}\n"
        f"trialConcurrency: {c}\nmaxTrialNumber: {n}\ntuner: {{name: Random}}\n"
        "trainingService: {platform: local}\n"
    )


class PssSampler:
    """Peak summed PSS of a set of process trees, sampled in the background."""

    def __init__(self, roots: list[int]):
        self.roots, self.peak, self._stop = roots, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for root in self.roots:
                try:
                    procs = [psutil.Process(root)] + psutil.Process(root).children(recursive=True)
                except psutil.NoSuchProcess:
                    continue
                for proc in procs:
                    try:
                        total += proc.memory_full_info().pss
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        pass
            self.peak = max(self.peak, total)
            self._stop.wait(0.5)

    def __enter__(self) -> PssSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join()


def run_xargs(work: Path, n: int, c: int, s: float) -> float:
    started = time.perf_counter()
    subprocess.run(f"seq {n} | xargs -P {c} -I{{}} {PY} light.py {s} > /dev/null", shell=True, cwd=work, check=True)
    return time.perf_counter() - started


#: Per DAG, seconds from its last result to its run's end (the end steps, and for trialflow the
#: watch that the end step waits for), one per run.
RUN_ENDED_AFTER: dict[str, list[float]] = {}


def run_dag(airflow: EmbeddedAirflow, dag_id: str, dag_file: Path, done, before=None) -> float:
    """Seconds from the trigger until ``done(run_id)``; ``before(run_id)`` runs first, untimed
    (the run id is chosen here, as EmbeddedAirflow.trigger chooses it)."""
    airflow.wait_for_dag(dag_id, dag_file, timeout=120)
    run_id = None
    if before is not None:
        from datetime import datetime

        run_id = f"manual__{datetime.now(UTC).isoformat()}"
        before(run_id)
    started = time.perf_counter()
    run_id = airflow.trigger(dag_id, run_id=run_id)
    while not done(run_id):
        if airflow.dag_run_state(dag_id, run_id) == "failed":
            raise RuntimeError(f"{dag_id} failed")
        time.sleep(0.2)
    elapsed = time.perf_counter() - started
    while airflow.dag_run_state(dag_id, run_id) not in ("success", "failed"):  # let it finish before the next
        time.sleep(0.1)
    RUN_ENDED_AFTER.setdefault(dag_id, []).append(time.perf_counter() - started - elapsed)
    return elapsed


def run_nni(work: Path, n: int, c: int, s: float, tag: str, timeout: float = 600) -> float | None:
    namespace = f"tfbench{os.getpid()}{tag}"
    config = work / f"nni_{tag}.yml"
    config.write_text(
        config_text(n, c, s, str(NNI_VENV / "bin" / "python"), "nni_trial.py").replace(
            "tuner: {name: Random}", "tuner: {name: Random}\nexperimentWorkingDirectory: " + str(work / "nni-exp")
        )
    )
    home = Path(tempfile.mkdtemp(prefix="nni-home-"))
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"], check=True)
        out = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                namespace,
                str(NNI_VENV / "bin" / "python"),
                str(ROOT / "bench" / "nni_runner.py"),
                str(config),
                "8080",
                str(n),
                str(timeout),
            ],
            capture_output=True,
            text=True,
            cwd=work,
            env={**os.environ, "HOME": str(home)},
            timeout=timeout + 300,
        )
        lines = out.stdout.strip().splitlines()
        if not lines:
            print(f"NNI run {tag} printed nothing: {out.stderr[-500:]}", file=sys.stderr)
            return None
        return json.loads(lines[-1])["seconds"]
    finally:
        subprocess.run(["ip", "netns", "delete", namespace])
        shutil.rmtree(home, ignore_errors=True)


def ensure_nni() -> bool:
    try:
        build_nni_venv(NNI_VENV)
        return True
    except RuntimeError as exc:
        print(f"NNI baseline skipped: {exc}", file=sys.stderr)
        return False


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the finally blocks: stop Airflow, netns
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=["20,4,0", "20,4,3", "40,8,1"])
    parser.add_argument("--skip-nni", action="store_true")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--only-run",
        action="store_true",
        help="only `trialflow run` (cold and warm) beside NNI, no DAG on a shared Airflow",
    )
    which.add_argument(
        "--skip-run",
        action="store_true",
        help="only the DAGs on a shared Airflow (and NNI), no `trialflow run` cold and warm",
    )
    args = parser.parse_args()
    cases = [tuple(float(v) if i == 2 else int(v) for i, v in enumerate(case.split(","))) for case in args.cases]
    with_nni = not args.skip_nni and ensure_nni()

    work = Path(tempfile.mkdtemp(prefix="trialflow-bench-"))
    (work / "light.py").write_text(LIGHT_TRIAL)
    (work / "plain.py").write_text(PLAIN_TRIAL)
    (work / "nni_trial.py").write_text(NNI_TRIAL)
    store_url = sqlite_url(work / "experiments.db")
    optuna_url = sqlite_url(work / "optuna.db")
    max_c = max(c for _, c, _ in cases)
    airflow = private_airflow(work, max_c + 1, store_url)
    dag_files: dict[str, Path] = {}
    for n, c, s in cases:
        tag = f"{n}_{c}_{str(s).replace('.', '_')}"
        cfg = work / f"tf_{tag}.yml"
        cfg.write_text(
            config_text(n, c, s, PY, str(work / "light.py")).replace(
                "trialCommand:", f"trialCodeDirectory: {work}\ntrialCommand:"
            )
        )
        dag_files[f"tf_{tag}"] = airflow.dags_folder / f"tf_{tag}.py"
        dag_files[f"tf_{tag}"].write_text(
            "# airflow dag\nfrom trialflow.dag import experiment_dag\n"
            f"dag = experiment_dag({str(cfg)!r}, dag_id='tf_{tag}')\n"
        )
        dag_files[f"tfw_{tag}"] = airflow.dags_folder / f"tfw_{tag}.py"
        dag_files[f"tfw_{tag}"].write_text(
            "# airflow dag\nfrom trialflow.dag import experiment_dag\n"
            f"dag = experiment_dag({str(cfg)!r}, dag_id='tfw_{tag}', start_trials_in='worker')\n"
        )
        dag_files[f"hand_{tag}"] = airflow.dags_folder / f"hand_{tag}.py"
        dag_files[f"hand_{tag}"].write_text(
            "from airflow.sdk import DAG\nfrom airflow.providers.standard.operators.bash import BashOperator\n"
            f"with DAG('hand_{tag}', schedule=None):\n"
            f"    BashOperator.partial(task_id='trial', max_active_tis_per_dagrun={c}, cwd={str(work)!r}).expand(\n"
            f"        bash_command=[{f'{PY} light.py {s}'!r}] * {n})\n"
        )
        dag_files[f"optuna_{tag}"] = airflow.dags_folder / f"optuna_{tag}.py"
        dag_files[f"optuna_{tag}"].write_text(
            OPTUNA_DAG.format(
                storage=optuna_url, py=PY, script=str(work / "plain.py"), seconds=s, c=c, n=n, dag_id=f"optuna_{tag}"
            )
        )
        dag_files[f"shape_{tag}"] = airflow.dags_folder / f"shape_{tag}.py"
        dag_files[f"shape_{tag}"].write_text(
            "from airflow.sdk import DAG\nfrom airflow.providers.standard.operators.bash import BashOperator\n"
            f"with DAG('shape_{tag}', schedule=None):\n"
            "    BashOperator(task_id='start', bash_command='true') >> "
            f"BashOperator.partial(task_id='trial', max_active_tis_per_dagrun={c}, cwd={str(work)!r}).expand(\n"
            f"        bash_command=[{f'{PY} light.py {s}'!r}] * {n})\n"
        )

    results: dict[tuple, dict[str, list[float]]] = {case: {} for case in cases}
    peaks: dict[str, int] = {}
    if not args.only_run:
        airflow.migrate()
        airflow.start()
    try:
        if not args.only_run:
            airflow.wait_healthy()
        roots = [p.pid for p in airflow.processes.values()]
        for rep in range(0 if args.only_run else args.repeat):
            for case in cases:
                n, c, s = case
                tag = f"{n}_{c}_{str(s).replace('.', '_')}"
                r = results[case]
                r.setdefault("xargs", []).append(run_xargs(work, n, c, s))

                def hand_done(run_id: str, tag: str = tag, n: int = n, prefix: str = "hand") -> bool:
                    tis = airflow.task_instances(f"{prefix}_{tag}", run_id)
                    return sum(ti["state"] == "success" and ti["task_id"] == "trial" for ti in tis) >= n

                def shape_done(run_id: str, tag: str = tag, n: int = n) -> bool:
                    return hand_done(run_id, tag, n, "shape")

                def tf_done(run_id: str, tag: str = tag, n: int = n, prefix: str = "tf") -> bool:
                    try:
                        rows = ExperimentStore(store_url).trial_rows(experiment_id_for(f"{prefix}_{tag}", run_id))
                    except KeyError:
                        return False
                    return sum(row.status == "SUCCEEDED" for row in rows) >= n

                with PssSampler(roots) as hand_mem:
                    r.setdefault("hand-written DAG", []).append(
                        run_dag(airflow, f"hand_{tag}", dag_files[f"hand_{tag}"], hand_done)
                    )
                r.setdefault("hand-written, start step", []).append(
                    run_dag(airflow, f"shape_{tag}", dag_files[f"shape_{tag}"], shape_done)
                )

                def optuna_done(run_id: str, tag: str = tag, n: int = n) -> bool:
                    return hand_done(run_id, tag, n, "optuna")

                with PssSampler(roots) as optuna_mem:
                    r.setdefault("hand-written, Optuna", []).append(
                        run_dag(
                            airflow,
                            f"optuna_{tag}",
                            dag_files[f"optuna_{tag}"],
                            optuna_done,
                            before=lambda run_id: optuna.create_study(study_name=run_id, storage=optuna_url),
                        )
                    )
                with PssSampler(roots) as tf_mem:
                    r.setdefault("trialflow DAG", []).append(
                        run_dag(airflow, f"tf_{tag}", dag_files[f"tf_{tag}"], tf_done)
                    )

                def tfw_done(run_id: str, tag: str = tag, n: int = n) -> bool:
                    return tf_done(run_id, tag, n, "tfw")

                r.setdefault("trialflow DAG, started by workers", []).append(
                    run_dag(airflow, f"tfw_{tag}", dag_files[f"tfw_{tag}"], tfw_done)
                )
                if c == max_c:
                    peaks[f"hand-written DAG, C={c}"] = max(peaks.get(f"hand-written DAG, C={c}", 0), hand_mem.peak)
                    peaks[f"hand-written DAG with Optuna, C={c}"] = max(
                        peaks.get(f"hand-written DAG with Optuna, C={c}", 0), optuna_mem.peak
                    )
                    peaks[f"trialflow DAG, C={c}"] = max(peaks.get(f"trialflow DAG, C={c}", 0), tf_mem.peak)
                print(
                    f"rep {rep + 1}/{args.repeat} {case}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in r.items()),
                    f"(then the run ended: hand-written +{RUN_ENDED_AFTER[f'hand_{tag}'][-1]:.2f}s,"
                    f" trialflow +{RUN_ENDED_AFTER[f'tf_{tag}'][-1]:.2f}s)",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        airflow.stop()

    # NNI's runs come after all of Airflow's, never between them: after each one the machine was
    # still busy with its aftermath (its files written back, its network namespace torn down)
    # when the next DAG ran, and every Airflow figure measured after an NNI run was slower
    # (same day: the hand-written DAG 2.9 s on (20,4,0) with no NNI run between, 5.1 s with).
    run_times, run_peak = [], 0
    warm_times: list[float] = []
    trigger_times: dict[str, list[float]] = {"cold": [], "warm": []}
    if (20, 4, 3.0) in cases and not args.skip_run:
        cfg = work / "run_20_4_3.yml"
        cfg.write_text(
            config_text(20, 4, 3, PY, str(work / "light.py")).replace(
                "trialCommand:", f"trialCodeDirectory: {work}\ntrialCommand:"
            )
        )
        for rep in range(args.repeat):
            seconds, triggered, peak = timed_run(cfg, work / f"run-home-{rep}")
            run_times.append(seconds)
            trigger_times["cold"].append(triggered)
            run_peak = max(run_peak, peak)
            print(f"rep {rep + 1}/{args.repeat}: trialflow run cold {seconds:.2f}s", file=sys.stderr, flush=True)
        # warm: the home's Airflow kept up (`trialflow up`), each run a new experiment in it
        warm_home = work / "warm-home"
        up = [PY, "-m", "trialflow.cli", "up", str(cfg), "--home", str(warm_home)]
        subprocess.run(up, check=True, capture_output=True, timeout=300)
        try:
            for rep in range(args.repeat):
                seconds, triggered, _ = timed_run(cfg, warm_home, "--new")
                warm_times.append(seconds)
                trigger_times["warm"].append(triggered)
                print(f"rep {rep + 1}/{args.repeat}: trialflow run warm {seconds:.2f}s", file=sys.stderr, flush=True)
        finally:
            subprocess.run([PY, "-m", "trialflow.cli", "down", "--home", str(warm_home)], timeout=300)

    # NNI's runs last: the machine is busy with each one's aftermath for a while (see above)
    if with_nni:
        for rep in range(args.repeat):
            for case in cases:
                n, c, s = case
                tag = f"{n}_{c}_{str(s).replace('.', '_')}"
                seconds = run_nni(work, n, c, s, f"{tag}_{rep}")
                if seconds is not None:
                    results[case].setdefault("NNI 3.0 local", []).append(seconds)
                print(f"rep {rep + 1}/{args.repeat} {case}: NNI 3.0 local {seconds}", file=sys.stderr, flush=True)

    if not args.only_run:
        print_report(cases, results, run_times, run_peak, peaks, args.repeat)
    if warm_times:
        print_run_table(results, run_times, warm_times, trigger_times, args.repeat)
    shutil.rmtree(work, ignore_errors=True)


def timed_run(cfg: Path, home: Path, *extra: str) -> tuple[float, float, int]:
    """`trialflow run CONFIG`: (seconds to its end, seconds until the run was triggered, peak PSS)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [PY, "-m", "trialflow.cli", "run", str(cfg), "--json", "--home", str(home), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    triggered = float("nan")
    with PssSampler([proc.pid]) as mem:
        assert proc.stderr is not None
        for line in proc.stderr:
            if triggered != triggered and " started (DAG " in line:
                triggered = time.perf_counter() - started
        proc.wait(timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"trialflow run {cfg} failed (exit {proc.returncode})")
    return time.perf_counter() - started, triggered, mem.peak


def print_run_table(results, cold, warm, triggered, repeat) -> None:
    med = statistics.median
    nni = results.get((20, 4, 3.0), {}).get("NNI 3.0 local")
    print(f"\n`trialflow run` on (20,4,3), wall seconds from the command to its exit, median of {repeat}:\n")
    print("| | seconds | run triggered after | x NNI 3.0 local |")
    print("|---|---|---|---|")
    for name, times in (("cold (starts and stops Airflow)", cold), ("warm (`trialflow up` first)", warm)):
        ratio = f"{med(times) / med(nni):.2f}" if nni else "-"
        key = "cold" if name.startswith("cold") else "warm"
        print(f"| {name} | {med(times):.2f} | {med(triggered[key]):.2f} s | {ratio} |")
    if nni:
        print(f"| NNI 3.0 local (nnictl create to its last result) | {med(nni):.2f} | - | 1.00 |")
    print("\ntargets: warm <= 0.6 x NNI; cold as it is")


def print_report(cases, results, run_times, run_peak, peaks, repeat) -> None:
    med = statistics.median
    print(
        f"\nWall seconds from start to all final results, median of {repeat} "
        f"(same machine, same run; Airflow already running except for `trialflow run`)\n"
    )
    columns = [
        "xargs",
        "hand-written DAG",
        "hand-written, start step",
        "hand-written, Optuna",
        "trialflow DAG",
        "trialflow DAG, started by workers",
        "NNI 3.0 local",
    ]
    print(
        "| N,C,S | "
        + " | ".join(columns)
        + " | trialflow / hand-written (target <= 1.1) | started by workers / hand-written"
        " | trialflow / same shape | trialflow / hand-written with Optuna | trialflow / NNI (target <= 0.5) |"
    )
    print("|---" * (len(columns) + 6) + "|")
    for case in cases:
        r = results[case]
        cells = [f"{med(r[c]):.2f}" if r.get(c) else "-" for c in columns]
        tf = med(r["trialflow DAG"])
        hand = f"{tf / med(r['hand-written DAG']):.2f}"
        by_workers = r.get("trialflow DAG, started by workers")
        hand += f" | {med(by_workers) / med(r['hand-written DAG']):.2f}" if by_workers else " | -"
        shape = f"{tf / med(r['hand-written, start step']):.2f}"
        tuned = f"{tf / med(r['hand-written, Optuna']):.2f}"
        nni = f"{tf / med(r['NNI 3.0 local']):.2f}" if r.get("NNI 3.0 local") else "-"
        print(f"| {case[0]},{case[1]},{case[2]:g} | " + " | ".join(cells) + f" | {hand} | {shape} | {tuned} | {nni} |")
    if run_times:
        line = f"\n`trialflow run` on (20,4,3) including Airflow start-up and shutdown: {med(run_times):.2f} s"
        nni = results.get((20, 4, 3.0), {}).get("NNI 3.0 local")
        if nni:
            line += f" = {med(run_times) / med(nni):.2f} x NNI (target <= 0.8)"
        print(line + f"; peak PSS {run_peak / 2**30:.2f} GiB")
    for name, peak in peaks.items():
        print(f"Peak orchestration PSS (all Airflow components), {name}: {peak / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
