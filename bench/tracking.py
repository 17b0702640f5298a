"""What logging to MLflow costs whoever passes (trialflow.tracking.sync): a first pass over an
experiment of N finished trials (every run made and filled) and a level pass (nothing to send:
what the run's watch does every few seconds), beside the store's own read of every trial
(``trial_rows``, what the end step's summary reads once) as the baseline. The tracking server
is a client that answers at once, so the figures are trialflow's side alone.

    python bench/tracking.py [--trials 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.platforms.base import TrialStatus
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.tracking.content import ExperimentFacts
from trialflow.tracking.sync import Tracked, sync_experiment
from trialflow.trial.protocol import Metric
from trialflow.tuning.asker import ask

EXPERIMENT = "ebenchtracking01"


class AtOnce:
    """A tracking server that answers at once (TrackingClient)."""

    made = 0

    def experiment_id(self, name: str) -> str:
        return "1"

    def find_run(self, experiment_id: str, key: str) -> None:
        return None

    def create_run(self, experiment_id: str, start_ms: int, tags: object) -> str:
        self.made += 1
        return f"run{self.made}"

    def log(self, run_id: str, batch: object) -> None:
        pass

    def end(self, run_id: str, status: str, end_ms: object) -> None:
        pass

    def delete_tag(self, run_id: str, key: str) -> None:
        pass

    def run_url(self, experiment_id: str, run_id: str) -> str:
        return f"http://mlflow/#/experiments/1/runs/{run_id}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    args = parser.parse_args()
    store = ExperimentStore(sqlite_url(Path(tempfile.mkdtemp()) / "store.db"))
    store.open_experiment(EXPERIMENT, "maximize")
    tuner = AlgorithmConfig(name="Random", class_args={"seed": 1})
    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    for index in range(args.trials):
        asked = ask(store, EXPERIMENT, index, f"{EXPERIMENT}-{index:05d}", tuner, space)
        store.set_status(asked.storage_id, TrialStatus.RUNNING, started_at=time.time())
        store.record_metrics(asked.storage_id, [Metric("PERIODICAL", s, 0.1 * s) for s in range(10)])
        store.finish(asked.storage_id, TrialStatus.SUCCEEDED, 0.5)
    tracked = Tracked(EXPERIMENT, "bench", ExperimentFacts(EXPERIMENT, "bench", None, {}), "maximize")
    started = time.perf_counter()
    store.trial_rows(EXPERIMENT)
    baseline = time.perf_counter() - started
    started = time.perf_counter()
    first = sync_experiment(store, tracked, AtOnce())
    first_time = time.perf_counter() - started
    started = time.perf_counter()
    level = sync_experiment(store, tracked, AtOnce())
    level_time = time.perf_counter() - started
    print(f"{args.trials} finished trials of 10 steps each")
    print(f"  baseline: the store's read of every trial (trial_rows)  {baseline * 1000:8.0f} ms")
    print(f"  first pass ({first.sent} runs made and filled)            {first_time * 1000:8.0f} ms")
    print(f"  level pass ({level.sent} runs sent: the watch's usual pass)        {level_time * 1000:8.0f} ms")


if __name__ == "__main__":
    main()
