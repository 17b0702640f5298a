"""Tuner quality (not speed): the best value found in N trials on known functions, per tuner.

Branin (2-d, minimum 0.397887) and Hartmann-6 (6-d, minimum -3.32237), both
minimised; each tuner runs ``--trials`` trials sequentially for each of
``--seeds`` seeds, through the same code the trial tasks use (a sampler per
ask, seeded ``seed + trial index``). Printed: the median over seeds of the best
value, its gap to the known minimum, and the ratio of that gap to Random's
(below 1 = better than Random). TPE and GP must beat Random.

Then suggestion latency: one ask per tuner against a SQLite experiment store
that already holds ``--history`` finished trials (median of 3 asks).

    python bench/tuners.py [--trials 60] [--seeds 10] [--history 1000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from trialflow.config.model import AlgorithmConfig  # noqa: E402
from trialflow.config.search_space import SearchSpace, parse_search_space  # noqa: E402
from trialflow.tuning.tuners import make_sampler, sample_parameters  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
TUNERS = ("Random", "TPE", "GP", "Anneal", "Evolution")
MUST_BEAT_RANDOM = ("TPE", "GP")


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


def suggestion_latency(history: int) -> dict[str, float]:
    """Seconds for one ask (sampler + store round trips) with ``history`` finished trials."""
    from trialflow.tuning.store import ExperimentStore, sqlite_url

    space: SearchSpace = parse_search_space(LATENCY_SPACE)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = ExperimentStore(sqlite_url(Path(tmp) / "latency.db"))
        seed_algo = AlgorithmConfig(name="Random", class_args={"seed": 0})
        store.open_experiment("latency", seed_algo, space)
        study = "latency"
        study.sampler = make_sampler(seed_algo, space)
        rng = np.random.RandomState(0)
        for _ in range(history):
            trial = study.ask()
            params = space.sample(trial)
            study.tell(trial, float(rng.uniform()) + params["dropout"])
        index = history
        for name in TUNERS + ("BOHB", "Hyperband"):
            algorithm = AlgorithmConfig(name=name, class_args={"seed": 1})
            times = []
            for _ in range(3):
                started = time.perf_counter()
                asked = store.ask(study, index, f"t{index}", algorithm, space)
                times.append(time.perf_counter() - started)
                store.storage.set_trial_state_values(asked.storage_id, optuna.trial.TrialState.COMPLETE, [0.5])
                index += 1
            out[name] = statistics.median(times)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()

    jobs = [(t, p, s, args.trials) for p in PROBLEMS for t in TUNERS for s in range(args.seeds)]
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
    for tuner in TUNERS:
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
        print(f"  {tuner:<5} on {problem:<10} {ratio:5.2f}  {'PASS' if ok else 'FAIL'}")

    print(f"\nSuggestion latency with {args.history} finished trials (SQLite store, median of 3 asks)")
    for name, took in suggestion_latency(args.history).items():
        print(f"  {name:<10} {took * 1000:9.1f} ms")
    return 0 if all(ok for *_, ok, _ in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
