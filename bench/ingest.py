"""Intermediate results into the store: a real trial that reports many, followed to its end.

A local trial reports ``--results`` intermediate results through trialflow's SDK (NNI's
``.nni/metrics`` file), as fast as it can; the follow loop (the one the operator and the
trigger run) reads and stores them. Printed: the trial's own time, how long after its end
every result was in the store, the rows per second, and the same rows written the way the
store wrote them before (Optuna's set_trial_intermediate_value, one commit per step) on a
sample, side by side. Every result is checked present once.

    python bench/ingest.py [--results 1000000] [--baseline-sample 5000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trialflow.config.model import AlgorithmConfig  # noqa: E402
from trialflow.config.platforms import LocalConfig  # noqa: E402
from trialflow.config.search_space import parse_search_space  # noqa: E402
from trialflow.experiment.follow import follow_trial  # noqa: E402
from trialflow.platforms.base import TrialSpec  # noqa: E402
from trialflow.platforms.local import LocalPlatform  # noqa: E402
from trialflow.store.experiment_store import ExperimentStore, sqlite_url  # noqa: E402
from trialflow.tuning.asker import ask  # noqa: E402

TRIAL = """\
import sys, time
from trialflow import trial
trial.get_next_parameter()
start = time.time()
for step in range(int(sys.argv[1])):
    trial.report_intermediate_result(step / 1e6)
trial.report_final_result(1.0)
print("reported in", round(time.time() - start, 2), "s")
"""
SPACE = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
RANDOM = AlgorithmConfig(name="Random")


def store_for(root: Path, postgres: str | None, name: str) -> ExperimentStore:
    if postgres is None:
        return ExperimentStore(sqlite_url(root / f"{name}.db"))
    import sqlalchemy as sa

    with sa.create_engine(postgres, isolation_level="AUTOCOMMIT").connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    return ExperimentStore(postgres.rsplit("/", 1)[0] + f"/{name}")


def trialflow_run(root: Path, results: int, postgres: str | None) -> dict[str, float]:
    code = root / "code"
    code.mkdir()
    (code / "t.py").write_text(TRIAL)
    store = store_for(root, postgres, "ingest_new")
    store.open_experiment("eingest1")
    asked = ask(store, "eingest1", 0, "eingest1-0000", RANDOM, SPACE)
    spent = [0.0]
    record = store.record_metrics

    def timed(storage_id: int, metrics: list) -> list[str]:
        begun = time.perf_counter()
        try:
            return record(storage_id, metrics)
        finally:
            spent[0] += time.perf_counter() - begun

    store.record_metrics = timed  # type: ignore[method-assign]
    platform = LocalPlatform(LocalConfig(), root / "work")
    platform.prepare_sync("eingest1")
    spec = TrialSpec("eingest1", "eingest1-0000", 0, 0, asked.parameters, f"{sys.executable} t.py {results}", code)
    begun = time.perf_counter()
    handle = platform.submit_sync(spec)
    outcome = asyncio.run(follow_trial(platform, store, handle, asked.storage_id, poll_interval=0.5))
    done = time.perf_counter()
    state = Path(handle["trial_dir"]) / ".nni" / "state"
    ended = state.stat().st_mtime  # the wrapper writes the exit code as the trial ends
    stored = store.storage.get_trial(asked.storage_id).intermediate_values
    assert len(stored) == results and stored[results - 1] == (results - 1) / 1e6, "results lost"
    assert outcome.status is not None and outcome.status.value == "SUCCEEDED", outcome
    after_end = time.time() - ended - (time.perf_counter() - done)
    return {
        "wall": done - begun,
        "after_end": after_end,
        "rows_per_s": results / (done - begun),
        "store_rows_per_s": results / spent[0],
    }


def baseline_rows_per_s(root: Path, sample: int, postgres: str | None) -> float:
    """The store's old path: Optuna's own per-step write, one transaction (and fsync) each."""
    store = store_for(root, postgres, "ingest_old")
    store.open_experiment("eingest0")
    sid = ask(store, "eingest0", 0, "eingest0-0000", RANDOM, SPACE).storage_id
    begun = time.perf_counter()
    for step in range(sample):
        store.storage.set_trial_intermediate_value(sid, step, step / 1e6)
    return sample / (time.perf_counter() - begun)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=int, default=1_000_000)
    parser.add_argument("--baseline-sample", type=int, default=5000)
    parser.add_argument(
        "--postgres",
        help="a PostgreSQL server's URL (postgresql+psycopg://...), or 'local' for one started here on "
        "127.0.0.1 as the tests start it (fsync off); default SQLite",
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="trialflow-bench-ingest-"))
    server = None
    if args.postgres == "local":
        from tests.helpers.postgres import PostgresServer

        server = PostgresServer.create()
        server.start()
        args.postgres = server.url.replace("postgresql://", "postgresql+psycopg://")
    try:
        new = trialflow_run(root, args.results, args.postgres)
        old = baseline_rows_per_s(root, args.baseline_sample, args.postgres)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
    db = "PostgreSQL" if args.postgres else "SQLite"
    print(f"{args.results:,} intermediate results, {db}")
    print(f"  trialflow (batched): {new['wall']:.1f} s from submit to stored; all stored {new['after_end']:.1f} s")
    print(f"    after the trial ended; {new['rows_per_s']:,.0f} rows/s over the whole run (trial time included)")
    print(f"    the store's own writes: {new['store_rows_per_s']:,.0f} rows/s")
    print(f"  before (one commit per step, {args.baseline_sample:,} sampled): {old:,.0f} rows/s")
    print(f"    -> {args.results / old:,.0f} s for the same results; store writes {new['store_rows_per_s'] / old:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
