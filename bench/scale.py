"""Issue 30's targets at scale, each section side by side with its baseline: `make bench-scale`.

Sections (``--only`` picks some), each its own script, run one after the other so they do not
share the machine:

  ingest    1,000,000 intermediate results from a real trial, SQLite then PostgreSQL, beside the
            store's old one-commit-per-step path (bench/ingest.py)
  pages     20,000 trials x 100 results + one trial of 1,000,000, 300 other experiments beside
            them: every data call in process and
            over HTTP, the page in Chromium, streamed exports; the queries beside the baseline
            checkout's on the same store (bench/ui.py)
  asks      an ask at 20,000 finished trials, Random/TPE/Anneal/GP, beside the baseline checkout:
            in a fresh interpreter (bench/tuners.py) and as a trial task asks, forked from a
            process that preloaded the core as Airflow's workers do (bench/trial_task.py)
  at-once   50 trial tasks asking at the same moment, SQLite and PostgreSQL, beside one ask
            alone (bench/asks_at_once.py)
  deferred  200 Kubeflow trials deferred to one triggerer on the real kube-apiserver, the task
            ended by the trigger beside a worker resuming it; triggerer CPU and memory per trial
            (bench/kube.py), and 200 remote trials over SSH on four machines (bench/remote_many.py)
  nni       1,000 trivial trials at concurrency 50, trialflow beside NNI 3.0's local mode
            (bench/thousand.py)

The baseline checkout (``--baseline REV``, default the last commit before issue 30's work) is a
git worktree under .bench/. Everything printed is also written to .bench/scale-<time>.txt;
bench/RESULTS.md keeps the figures of a run.

    python bench/scale.py [--only pages asks ...] [--baseline REV]
    python bench/scale.py --only asks pages --trials 100000 --no-baseline   # issue 47's scale
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / ".bench"
#: The last landed commit before issue 30's changes: what "before" means in each section.
DEFAULT_BASELINE = "0a59879"


def baseline_checkout(rev: str) -> Path:
    """A worktree of ``rev`` under .bench/ (made once; its trialflow is imported by path)."""
    path = BENCH / f"baseline-{rev}"
    if not (path / "trialflow").is_dir():
        BENCH.mkdir(exist_ok=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(path), rev], check=True)
    return path


def sections(base: Path | None, trials: int = 20000) -> dict[str, list[list[str]]]:
    """Each section's commands; ``base`` None: no baseline columns (at 100,000 trials the
    baseline reads every trial per call, minutes each, and the 20,000 figures are the baseline)."""
    py = [sys.executable]
    source = ["--source", str(base)] if base is not None else []
    history = str(trials)
    return {
        "ingest": [py + ["bench/ingest.py"], py + ["bench/ingest.py", "--postgres", "local"]],
        "pages": [
            py + ["bench/ui.py", "--trials", history, "--big", "1000000", "--others", "300", "--no-dashboard"] + source
        ],
        "asks": [
            py + ["bench/tuners.py", "--history", history, "--tuners", "Random", "TPE", "Anneal", "GP"] + source,
            *(
                py
                + ["bench/trial_task.py", "--trials", "8", "--repeat", "1", "--history", history]
                + ["--tuner", tuner]
                + source
                for tuner in ("Random", "TPE", "Anneal", "GP")
            ),
            py
            + ["bench/trial_task.py", "--trials", "8", "--repeat", "1", "--history", history, "--tuner", "GP"]
            + ["--preload-tuners", "GP"]
            + source,
        ],
        "at-once": [py + ["bench/asks_at_once.py", "--tasks", "50", "--history", "1000"]],
        "deferred": [
            py + ["bench/kube.py", "--trials", "0", "--airflow", "200", "--airflow-seconds", "90"],
            py + ["bench/remote_many.py", "--trials", "200", "--machines", "4", "--seconds", "90"],
        ],
        "nni": [py + ["bench/thousand.py", "--trials", "1000", "--concurrency", "50", "--seconds", "1"]],
    }


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of trials >= 1, got {text}")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", help="sections to run (default all)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="the checkout the 'before' columns run")
    parser.add_argument("--no-baseline", action="store_true", help="no 'before' columns")
    parser.add_argument(
        "--trials", type=_positive, default=20000, help="finished trials of the pages' and asks' experiments (20,000)"
    )
    args = parser.parse_args()
    base = None if args.no_baseline else baseline_checkout(args.baseline)
    plan = sections(base, args.trials)
    chosen = args.only or list(plan)
    unknown = [s for s in chosen if s not in plan]
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(plan)}")
    BENCH.mkdir(exist_ok=True)
    report = BENCH / f"scale-{datetime.datetime.now():%Y%m%d-%H%M%S}.txt"
    failed = []
    with report.open("w") as out:
        for name in chosen:
            for command in plan[name]:
                header = f"\n=== {name}: {' '.join(Path(c).name if c == sys.executable else c for c in command)}\n"
                print(header, flush=True)
                out.write(header)
                proc = subprocess.Popen(
                    command,
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    # the test controller talks to the local kube-apiserver's self-signed TLS
                    env={**os.environ, "PYTHONWARNINGS": "ignore:Unverified HTTPS request"},
                )
                assert proc.stdout is not None
                for line in proc.stdout:
                    sys.stdout.write(line)
                    out.write(line)
                if proc.wait() != 0:
                    failed.append(f"{name} ({command[1]}: exit {proc.returncode})")
                out.flush()
    print(f"\nwritten to {report}")
    if failed:
        print("sections that failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
