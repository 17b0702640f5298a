"""Tuner quality (not speed): the best value found in N trials on known functions, per tuner.

Branin (2-d, minimum 0.397887) and Hartmann-6 (6-d, minimum -3.32237), both
minimised; each tuner runs ``--trials`` trials sequentially for each of
``--seeds`` seeds, through the same code the trial tasks use (a sampler per
ask, seeded ``seed + trial index``). Printed: the median over seeds of the best
value, its gap to the known minimum, and the ratio of that gap to Random's
(below 1 = better than Random). TPE, GP, SMAC, Metis and DNGO must beat Random.

Then suggestion latency: per tuner, fresh processes (as trial tasks are) open a
SQLite experiment store that already holds ``--history`` finished trials and ask
twice, with trialflow's trial reader and, side by side, with Optuna's own (how
trialflow asked before). ``--latency-only`` skips the quality part.

    python bench/tuners.py [--trials 60] [--seeds 10] [--history 1000] [--jobs 2] [--latency-only]
                           [--tuners GP ...] [--quality-tuners Metis ...]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # imported by a driver that put the checkout under test first
    sys.path.insert(0, str(ROOT))
if os.environ.get("TRIALFLOW_BENCH_SOURCE"):  # a "before" child: another checkout's trialflow
    sys.path.insert(0, os.environ["TRIALFLOW_BENCH_SOURCE"])

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from trialflow.config.model import AlgorithmConfig  # noqa: E402
from trialflow.config.search_space import SearchSpace, parse_search_space  # noqa: E402

try:
    from trialflow.tuning.asker import ask
except ImportError:  # a "before" checkout older than the asker (issue 48): the store asked

    def ask(store: Any, *args: Any) -> Any:  # type: ignore[misc]
        return store.ask(*args)


from trialflow.tuning.tuners import make_sampler, sample_parameters  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
TUNERS = ("Random", "TPE", "GP", "Anneal", "Evolution", "SMAC", "Metis", "DNGO")
MUST_BEAT_RANDOM = ("TPE", "GP", "SMAC", "Metis", "DNGO")


def branin(p: dict[str, float]) -> float:
    x1, x2 = p["x1"], p["x2"]
    b, c, r, s, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


_HA = np.array([1.0, 1.2, 3.0, 3.2])
_HA_A = np.array(
    [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
)
_HA_P = 1e-4 * np.array(
    [
        [1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381],
    ]
)


def hartmann6(p: dict[str, float]) -> float:
    x = np.array([p[f"x{i}"] for i in range(1, 7)])
    return float(-np.sum(_HA * np.exp(-np.sum(_HA_A * (x - _HA_P) ** 2, axis=1))))


PROBLEMS: dict[str, tuple[Callable[[dict[str, float]], float], dict[str, Any], float]] = {
    "Branin": (
        branin,
        {"x1": {"_type": "uniform", "_value": [-5, 10]}, "x2": {"_type": "uniform", "_value": [0, 15]}},
        0.397887,
    ),
    "Hartmann6": (hartmann6, {f"x{i}": {"_type": "uniform", "_value": [0, 1]} for i in range(1, 7)}, -3.32237),
}


def best_found(tuner: str, problem: str, seed: int, trials: int) -> float:
    function, raw, _ = PROBLEMS[problem]
    space = parse_search_space(raw)
    algorithm = AlgorithmConfig(name=tuner, class_args={"optimize_mode": "minimize", "seed": seed})
    study = optuna.create_study(direction="minimize")
    for i in range(trials):
        study.sampler = make_sampler(algorithm, space, i)
        trial = study.ask()
        study.tell(trial, function(sample_parameters(algorithm, space, trial, i)))
    return float(study.best_value)


def _job(args: tuple[str, str, int, int]) -> tuple[str, str, int, float, float]:
    started = time.perf_counter()
    value = best_found(*args)
    return args[0], args[1], args[2], value, time.perf_counter() - started


LATENCY_SPACE = {
    "lr": {"_type": "loguniform", "_value": [1e-5, 1e-1]},
    "dropout": {"_type": "uniform", "_value": [0, 0.8]},
    "layers": {"_type": "randint", "_value": [1, 8]},
    "act": {"_type": "choice", "_value": ["relu", "tanh", "gelu"]},
}


def _ask_in_a_fresh_process(url: str, name: str, index: int, reader: str) -> tuple[float, float, float]:
    """(store open s, first ask s, second ask s) in this process, as a trial task pays them.

    ``reader="optuna"`` is the baseline, how trialflow asked before: Optuna's ORM reader and
    a fresh cache per ask (a Study made from the bare storage); ``"no-snapshot"`` is trialflow's
    reader with Optuna's plain cache (before the snapshot row: every finished trial read back)."""
    from optuna.storages import RDBStorage
    from optuna.storages._cached_storage import _CachedStorage

    from trialflow.store.experiment_store import ExperimentStore
    from trialflow.store.optuna_storage import TrialflowStorage

    if reader == "optuna":
        TrialflowStorage._get_trials = RDBStorage._get_trials  # type: ignore[method-assign]
    space = parse_search_space(LATENCY_SPACE)
    algorithm = AlgorithmConfig(name=name, class_args={"seed": 1})
    started = time.perf_counter()
    store = ExperimentStore(url)
    opened = time.perf_counter()
    if reader == "no-snapshot":
        store.sampling_storage = _CachedStorage(store.storage)
    took = []
    for i in range(2):
        if reader == "optuna":
            store.sampling_storage = _CachedStorage(store.storage)
        before = time.perf_counter()
        asked = ask(store, "latency", index + i, f"t{index + i}", algorithm, space)
        took.append(time.perf_counter() - before)
        store.storage.set_trial_state_values(asked.storage_id, optuna.trial.TrialState.COMPLETE, [0.5])
    return opened - started, took[0], took[1]


def seed_history(store: Any, experiment_id: str, space: SearchSpace, count: int, first_index: int = 0) -> None:
    """``count`` finished trials as trialflow writes them (parameters sampled the way its ask
    samples them, its attributes), drawn in memory and written in bulk (bench/seed.py)."""
    from bench.seed import bulk_add

    rng = np.random.RandomState(0)
    algorithm = AlgorithmConfig(name="Random", class_args={"seed": 0})
    trials: list[optuna.trial.FrozenTrial] = []
    drawn = []
    for start in range(0, count, 500):  # small in-memory studies: an ask there walks all its trials
        memory = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=start))
        for i in range(start, min(count, start + 500)):
            trial = memory.ask()
            parameters = sample_parameters(algorithm, space, trial, i)
            value = float(rng.uniform())
            memory.tell(trial, value)
            drawn.append((parameters, value))
        trials += memory.get_trials(deepcopy=False)
    for i, (frozen, (parameters, value)) in enumerate(zip(trials, drawn, strict=True)):
        frozen.user_attrs.update(
            {"trial_index": first_index + i, "trial_id": f"t{first_index + i}", "parameters": parameters}
        )
        frozen.user_attrs.update({"nni_status": "SUCCEEDED", "final_metric": value})
    bulk_add(store, experiment_id, trials)


def suggestion_latency(
    history: int,
    repeat: int = 3,
    tuners: tuple[str, ...] = TUNERS + ("BOHB", "Hyperband"),
    readers: tuple[str, ...] = ("trialflow", "no-snapshot", "optuna"),
    source: str | None = None,
) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Per tuner and reader: medians of ``repeat`` fresh processes, each opening the store and
    asking twice, against a SQLite store holding ``history`` finished trials."""
    import multiprocessing

    from trialflow.store.experiment_store import ExperimentStore, sqlite_url
    from trialflow.store.snapshot import SnapshotCache
    from trialflow.trial.status import TrialStatus

    space: SearchSpace = parse_search_space(LATENCY_SPACE)
    out: dict[str, dict[str, tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        url = sqlite_url(Path(tmp) / "latency.db")
        store = ExperimentStore(url)
        seed_algo = AlgorithmConfig(name="Random", class_args={"seed": 0})
        store.open_experiment("latency")
        seed_history(store, "latency", space, history)
        asked = ask(store, "latency", history, f"t{history}", seed_algo, space)
        store.finish(asked.storage_id, TrialStatus.SUCCEEDED, 0.5)
        # The snapshot row, as a long experiment has one (its trial tasks write it as they go).
        SnapshotCache(store.storage).get_all_trials(store.storage.get_study_id_from_name("latency"))
        index = history + 1
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=ctx, max_tasks_per_child=1) as pool:
            for name in tuners:
                for reader in readers:
                    runs = []
                    for _ in range(repeat):
                        if reader == "before":  # the child imports the other checkout (see the top)
                            os.environ["TRIALFLOW_BENCH_SOURCE"] = source or ""
                        try:
                            runs.append(pool.submit(_ask_in_a_fresh_process, url, name, index, reader).result())
                        finally:
                            os.environ.pop("TRIALFLOW_BENCH_SOURCE", None)
                        index += 2
                    out.setdefault(name, {})[reader] = tuple(  # type: ignore[assignment]
                        statistics.median(r[k] for r in runs) for k in range(3)
                    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--latency-only", action="store_true")
    parser.add_argument("--tuners", nargs="+", default=[*TUNERS, "BOHB", "Hyperband"], help="for the latency part")
    parser.add_argument(
        "--quality-tuners", nargs="+", default=list(TUNERS), help="for the quality part (Random is always run)"
    )
    parser.add_argument("--source", help="latency only, side by side with another checkout's asks")
    args = parser.parse_args()
    verdicts: list[tuple[str, str, bool, float]] = []
    if args.source:
        return latency_against(args)
    if not args.latency_only:
        verdicts = quality(args)
    print(
        f"\nSuggestion latency with {args.history} finished trials (SQLite store; a fresh process per run, as a "
        "trial task; medians of 3). Baseline: Optuna's own reader and a fresh cache per ask (trialflow before)."
    )
    print(
        f"{'tuner':<10}{'first ask':>12}{'no snapshot':>12}{'baseline':>12}{'ratio':>8}"
        f"{'next ask':>12}{'baseline':>12}{'open':>8}"
    )
    for name, by_reader in suggestion_latency(args.history, tuners=tuple(args.tuners)).items():
        (opened, first, again), (_, base_first, base_again) = by_reader["trialflow"], by_reader["optuna"]
        unseeded = by_reader["no-snapshot"][1]
        print(
            f"{name:<10}{first * 1000:>10.1f}ms{unseeded * 1000:>10.1f}ms{base_first * 1000:>10.1f}ms"
            f"{first / base_first:>8.2f}{again * 1000:>10.1f}ms{base_again * 1000:>10.1f}ms{opened * 1000:>6.0f}ms"
        )
    print("(targets with 1,000 finished trials: TPE/Random/Anneal ask < 50 ms, GP < 1 s)")
    return 0 if all(ok for *_, ok, _ in verdicts) else 1


#: Issue 30's targets for an ask at 20,000 finished trials (seconds).
ASK_TARGETS = {"Random": 0.1, "TPE": 0.1, "Anneal": 0.1, "GP": 1.0}


def latency_against(args: argparse.Namespace) -> int:
    """Asks with ``--history`` finished trials, this checkout beside ``--source``'s, each in fresh
    processes (medians of 3): the first ask of a process (what a trial task pays) and the next."""
    by_tuner = suggestion_latency(
        args.history, tuners=tuple(args.tuners), readers=("trialflow", "before"), source=args.source
    )
    print(
        f"\nAsk latency with {args.history} finished trials (SQLite; a fresh process per run, as a trial task; "
        f"medians of 3), this checkout beside {args.source}"
    )
    print(f"{'tuner':<10}{'first ask':>12}{'before':>12}{'ratio':>8}{'next ask':>12}{'before':>12}{'target':>10}")
    for name, by_reader in by_tuner.items():
        (_, first, again), (_, was_first, was_again) = by_reader["trialflow"], by_reader["before"]
        target = ASK_TARGETS.get(name)
        verdict = "" if target is None else ("met" if first < target else "NOT MET")
        print(
            f"{name:<10}{first * 1000:>10.1f}ms{was_first * 1000:>10.1f}ms{first / was_first:>8.2f}"
            f"{again * 1000:>10.1f}ms{was_again * 1000:>10.1f}ms"
            f"{'' if target is None else f'< {target * 1000:.0f}ms':>10} {verdict}"
        )
    return 0


def quality(args: argparse.Namespace) -> list[tuple[str, str, bool, float]]:
    tuners = ["Random", *(t for t in args.quality_tuners if t != "Random")]
    jobs = [(t, p, s, args.trials) for p in PROBLEMS for t in tuners for s in range(args.seeds)]
    results: dict[tuple[str, str], list[float]] = {}
    seconds: dict[str, list[float]] = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for tuner, problem, _seed, value, took in pool.map(_job, jobs):
            results.setdefault((tuner, problem), []).append(value)
            seconds.setdefault(tuner, []).append(took / args.trials)

    print(f"\nBest value after {args.trials} trials, median over {args.seeds} seeds (minimising; lower is better)")
    header = f"{'tuner':<10}" + "".join(f"{p + ' best':>16}{'gap/Random':>12}" for p in PROBLEMS) + f"{'s/ask':>8}"
    print(header)
    print("-" * len(header))
    verdicts = []
    for tuner in tuners:
        line = f"{tuner:<10}"
        for problem, (_, _, minimum) in PROBLEMS.items():
            median = statistics.median(results[(tuner, problem)])
            random_gap = statistics.median(results[("Random", problem)]) - minimum
            ratio = (median - minimum) / random_gap if random_gap > 0 else float("nan")
            line += f"{median:>16.5f}{ratio:>12.2f}"
            if tuner in MUST_BEAT_RANDOM:
                verdicts.append((tuner, problem, ratio < 1.0, ratio))
        line += f"{statistics.median(seconds[tuner]):>8.3f}"
        print(line)
    print("(known minima: " + ", ".join(f"{p} {m}" for p, (_, _, m) in PROBLEMS.items()) + ")")
    print("\nMust beat Random (gap ratio < 1):")
    for tuner, problem, ok, ratio in verdicts:
        print(f"  {tuner:<6} on {problem:<10} {ratio:5.2f}  {'PASS' if ok else 'FAIL'}")

    return verdicts


if __name__ == "__main__":
    sys.exit(main())
