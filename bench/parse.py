"""DAG parse time: an experiment DAG file against a hand-written DAG of the same shape.

Airflow parses a DAG file in a fresh process that already imported Airflow (the
dag-processor's child, and each task process before it runs). Here each parse is a
fresh Python process that imports ``airflow.sdk`` first, then times importing the
DAG file: trialflow's one-line DAG (``experiment_dag(config)``) and, side by side, a
hand-written DAG with the same shape (a start task, N mapped BashOperator tasks with
max_active_tis_per_dagrun, an end task). trialflow is timed twice: "first" with an
empty plan cache (the config checked in full, as after an edit) and "again" (the
plan kept from that check: what every later parse and every task pays).

    python bench/parse.py [--trials 10 1000 10000] [--repeat 5] [--source OLD_CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TIMER = """\
import importlib.util, json, sys, time
import airflow.sdk  # what the dag-processor and the task runner have imported already
before = set(sys.modules)
t0 = time.perf_counter()
spec = importlib.util.spec_from_file_location("bench_dag", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
took = time.perf_counter() - t0
watched = ("optuna", "pydantic", "trialflow.config.model", "sqlalchemy.orm", "airflow.models.dagrun")
heavy = [m for m in watched if m in sys.modules and m not in before]
print(json.dumps({"seconds": took, "tasks": len(module.dag.task_ids), "heavy": heavy}))
"""

HAND_WRITTEN = """\
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

with DAG("hand_written", schedule=None, catchup=False, max_active_runs=1) as dag:
    trials = BashOperator.partial(task_id="trial", max_active_tis_per_dagrun=8).expand(
        bash_command=[f"python3 t.py {{i}}" for i in range({n})]
    )
    EmptyOperator(task_id="start") >> trials >> EmptyOperator(task_id="end", trigger_rule="all_done")
"""

TRIALFLOW = """\
from trialflow.dag import experiment_dag

dag = experiment_dag({config!r}, dag_id="trialflow_bench")
"""

CONFIG = """\
searchSpace:
  lr: {{_type: loguniform, _value: [0.00001, 0.1]}}
  layers: {{_type: randint, _value: [1, 8]}}
trialCommand: python3 t.py
trialCodeDirectory: .
trialConcurrency: 8
maxTrialNumber: {n}
tuner: {{name: TPE, classArgs: {{optimize_mode: maximize}}}}
trainingService: {{platform: local}}
"""


def parse_once(dag_file: Path, cache: Path, source: str | None = None) -> dict:
    env = {"TRIALFLOW_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "HOME": str(cache.parent)}
    if source:
        env["PYTHONPATH"] = source
    out = subprocess.run(
        [sys.executable, "-c", TIMER, str(dag_file)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
        cwd=dag_file.parent,  # not this checkout: -c puts the working folder first on sys.path
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[10, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--source", help="time the trialflow package of another checkout (e.g. an older commit)")
    args = parser.parse_args()
    print(f"DAG file import in a fresh process with Airflow imported, median of {args.repeat} (ms)")
    print(f"{'trials':>7}{'hand-written':>14}{'trialflow first':>17}{'trialflow again':>17}{'again / hand':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n in args.trials:
            folder = root / f"n{n}"
            folder.mkdir()
            (folder / "t.py").write_text("print(1)\n")
            config = folder / "config.yml"
            config.write_text(CONFIG.format(n=n))
            hand, mine = folder / "hand.py", folder / "mine.py"
            hand.write_text(HAND_WRITTEN.format(n=n))
            mine.write_text(TRIALFLOW.format(config=str(config)))
            parse_once(hand, root / "warm-up")  # the first Python start pays for cold files
            hand_s, first_s, again_s, heavy = [], [], [], set()
            for i in range(args.repeat):
                hand_s.append(parse_once(hand, root / "unused")["seconds"])
                cache = root / f"cache-{n}-{i}"
                first_s.append(parse_once(mine, cache, args.source)["seconds"])
                again = parse_once(mine, cache, args.source)
                again_s.append(again["seconds"])
                heavy.update(again["heavy"])
            h, f, a = (statistics.median(x) * 1000 for x in (hand_s, first_s, again_s))
            print(f"{n:>7}{h:>14.1f}{f:>17.1f}{a:>17.1f}{a / h:>14.2f}")
            if heavy:
                print(f"        (a parse with the plan kept still imported: {', '.join(sorted(heavy))})")
    print("(target: the experiment DAG parses in < 100 ms whatever maxTrialNumber)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
