"""Many trial tasks asking at the same moment: latency, "database is locked", nothing lost.

A parent process imports the core (as an Airflow worker does with ``preload_core``), seeds an
experiment with ``--history`` finished trials, then forks ``--tasks`` children that wait on
one barrier and, released together, each do what a trial task's start does: open the store,
ask for its own trial index (TPE), record a result and close the trial. Printed, side by side
with one ask alone in the same store (the baseline: no contention): the asks' median, p95 and
max, errors by kind (any "database is locked" named), and the checks: every index recorded
once, each closed with its result. On SQLite, then on PostgreSQL (one started here, as the
tests start it).

    python bench/asks_at_once.py [--tasks 50] [--history 1000] [--no-postgres]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tuners import LATENCY_SPACE, seed_history  # noqa: E402
from trialflow.config.model import AlgorithmConfig  # noqa: E402
from trialflow.config.search_space import parse_search_space  # noqa: E402
from trialflow.store.experiment_store import ExperimentStore, sqlite_url  # noqa: E402
from trialflow.trial.status import TrialStatus  # noqa: E402
from trialflow.tuning.asker import ask  # noqa: E402

TPE = AlgorithmConfig(name="TPE", class_args={"seed": 1})
SPACE = parse_search_space(LATENCY_SPACE)
EXPERIMENT = "eatonce1"


def _task(url: str, index: int, barrier: Any, out: Any) -> None:
    """One trial task's start and end, released with the others."""
    barrier.wait()
    began = time.perf_counter()
    try:
        store = ExperimentStore(url)
        asked = ask(store, EXPERIMENT, index, f"{EXPERIMENT}-{index:04d}", TPE, SPACE)
        asked_at = time.perf_counter()
        store.finish(asked.storage_id, TrialStatus.SUCCEEDED, 0.001 * index)
        out.put({"index": index, "ask": asked_at - began, "total": time.perf_counter() - began})
    except Exception as exc:  # reported, not raised: the bench counts failures by kind
        out.put({"index": index, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})


def run(url: str, tasks: int, history: int) -> dict[str, Any]:
    store = ExperimentStore(url)
    store.open_experiment(EXPERIMENT)
    seed_history(store, EXPERIMENT, SPACE, history)
    first = history
    # the baseline: one ask alone, in a fresh child, the same way (three times, median)
    ctx = multiprocessing.get_context("fork")
    alone = []
    for i in range(3):
        barrier, out = ctx.Barrier(1), ctx.Queue()
        child = ctx.Process(target=_task, args=(url, first + i, barrier, out))
        child.start()
        alone.append(out.get(timeout=300))
        child.join()
    failed = [r["error"] for r in alone if "error" in r]
    if failed:
        raise RuntimeError(f"an ask alone failed: {failed[0]}")
    first += 3
    barrier, out = ctx.Barrier(tasks), ctx.Queue()
    children = [ctx.Process(target=_task, args=(url, first + i, barrier, out)) for i in range(tasks)]
    for child in children:
        child.start()
    results = [out.get(timeout=600) for _ in children]
    for child in children:
        child.join(timeout=60)
    errors: dict[str, int] = {}
    for r in results:
        if "error" in r:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    asks = sorted(r["ask"] for r in results if "ask" in r)
    check = ExperimentStore(url)
    recorded = [check.find_trial(EXPERIMENT, first + i) for i in range(tasks)]
    rows = {r.trial_index: r for r in check.trial_rows(EXPERIMENT)}
    return {
        "alone": statistics.median(r["ask"] for r in alone if "ask" in r),
        "asks": asks,
        "errors": errors,
        "locked": sum(n for e, n in errors.items() if "database is locked" in e),
        "every index once": all(r is not None for r in recorded)
        and len({r.storage_id for r in recorded if r is not None}) == tasks,
        "each closed with its result": all(
            (first + i) in rows
            and rows[first + i].status == "SUCCEEDED"
            and rows[first + i].final_metric == 0.001 * (first + i)
            for i in range(tasks)
        ),
    }


def report(db: str, tasks: int, history: int, r: dict[str, Any]) -> bool:
    asks = r["asks"]
    p95 = asks[max(0, int(len(asks) * 0.95) - 1)] if asks else float("nan")
    print(f"\n{tasks} trial tasks asking at once, {db}, TPE with {history} finished trials")
    print(f"{'':24}{'alone':>10}{'at once':>10}")
    print(f"{'ask median (ms)':24}{r['alone'] * 1000:>10.0f}{statistics.median(asks) * 1000 if asks else 0:>10.0f}")
    print(f"{'ask p95 (ms)':24}{'':>10}{p95 * 1000:>10.0f}")
    print(f"{'ask max (ms)':24}{'':>10}{(asks[-1] if asks else 0) * 1000:>10.0f}")
    print(f"  errors: {json.dumps(r['errors']) if r['errors'] else 'none'}; 'database is locked': {r['locked']}")
    ok = not r["errors"] and r["every index once"] and r["each closed with its result"]
    for name in ("every index once", "each closed with its result"):
        print(f"  {'PASS' if r[name] else 'FAIL'}  {name}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="trialflow-bench-atonce-"))
    ok = True
    try:
        ok &= report("SQLite", args.tasks, args.history, run(sqlite_url(root / "s.db"), args.tasks, args.history))
        if not args.no_postgres:
            from tests.helpers.postgres import PostgresServer, missing_reason

            reason = missing_reason()
            if reason:
                print(f"\nPostgreSQL skipped: {reason}")
            else:
                server = PostgresServer.create()
                server.start()
                try:
                    url = server.url.replace("postgresql://", "postgresql+psycopg://")
                    ok &= report("PostgreSQL", args.tasks, args.history, run(url, args.tasks, args.history))
                finally:
                    server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
