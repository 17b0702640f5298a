"""The charts' data: the sample past the cap keeps what each chart claims about every trial, the
running-at-once series counts every trial, and the settled trials are read once (on SQLite and
PostgreSQL)."""

from __future__ import annotations

import random
import time

import pytest

from tests.helpers.filled_store import RANDOM, SPACE, fill
from trialflow.platforms.base import TrialStatus
from trialflow.queries import charts, settled
from trialflow.queries.charts import (
    chart_data,
    chosen_indexes,
    concurrency_series,
    even_spread,
    record_setters,
)
from trialflow.queries.settled import TrialFacts
from trialflow.tuning.asker import ask


def lean(index: int, value: float | None = None, live: bool = False, started=None, ended=None) -> TrialFacts:
    state = "RUNNING" if live else "COMPLETE"
    return TrialFacts(index, state, "RUNNING" if live else "SUCCEEDED", value, started, ended)


def best_line(trials: list[TrialFacts], minimize: bool) -> list[tuple[int, float]]:
    """The best-so-far line as the page draws it from the rows it got: (index, best) per valued trial."""
    out: list[tuple[int, float]] = []
    best = None
    for t in sorted(trials, key=lambda t: t.index):
        if t.value is None:
            continue
        best = t.value if best is None else (min(best, t.value) if minimize else max(best, t.value))
        out.append((t.index, best))
    return out


def steps(line: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Where a best-so-far line changes: the same steps whatever points lie between them."""
    return [p for i, p in enumerate(line) if i == 0 or p[1] != line[i - 1][1]]


def test_record_setters_are_the_steps_of_the_best_line():
    values = [None, 5.0, 7.0, 5.0, 3.0, None, 3.0, 9.0, 1.0]
    trials = [lean(i, v) for i, v in enumerate(values)]
    assert record_setters(trials, minimize=True) == [1, 4, 8]  # 3.0 again at 6 is a tie, not a record
    assert record_setters(trials, minimize=False) == [1, 2, 7]
    assert record_setters(list(reversed(trials)), minimize=True) == [1, 4, 8]  # by index, not by order given
    assert record_setters([lean(0), lean(1)], minimize=True) == []


@pytest.mark.parametrize(
    ("items", "room", "expected"),
    [
        (list(range(10)), 0, []),
        (list(range(10)), -3, []),
        (list(range(10)), 1, [9]),
        (list(range(10)), 2, [0, 9]),
        (list(range(10)), 4, [0, 3, 6, 9]),
        (list(range(3)), 5, [0, 1, 2]),
        ([], 5, []),
    ],
)
def test_even_spread(items, room, expected):
    assert even_spread(items, room) == expected


def test_under_the_cap_every_trial_is_drawn():
    trials = [lean(i, float(i)) for i in range(50)]
    assert chosen_indexes(trials, minimize=True, cap=50) == charts.Sample(list(range(50)), True)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("minimize", [True, False])
def test_a_sample_keeps_the_best_line_the_best_the_live_and_the_pareto_set(seed, minimize):
    rng = random.Random(seed)
    trials = [lean(i, None if rng.random() < 0.1 else rng.gauss(0, 1), live=rng.random() < 0.01) for i in range(5000)]
    pareto = rng.sample(range(5000), 7)
    cap = 200
    sample = chosen_indexes(trials, minimize, cap, also=pareto)
    chosen = sample.indexes
    assert sample.whole_best_line  # a random walk sets ~ln(5000) records
    assert chosen == sorted(set(chosen))
    drawn = [trials[i] for i in chosen]
    assert steps(best_line(drawn, minimize)) == steps(best_line(trials, minimize))
    valued = sorted((t for t in trials if t.value is not None), key=lambda t: t.value, reverse=not minimize)
    assert {t.index for t in valued[: cap // 4]} <= set(chosen)
    live = {t.index for t in trials if t.live}
    assert live and live <= set(chosen) and set(pareto) <= set(chosen)
    assert len(chosen) <= cap + len(live) + len(pareto)
    assert len(chosen) >= cap  # the spread fills the room the others left
    rest = [i for i in chosen if i not in live | set(pareto) | {t.index for t in valued[: cap // 4]}]
    assert rest[0] < 500 and rest[-1] > 4500  # spread over the whole experiment, not its start


def test_a_best_line_of_more_records_than_half_the_cap_keeps_the_last_and_a_spread():
    trials = [lean(i, float(-i)) for i in range(1000)]  # every trial a record when minimizing
    sample = chosen_indexes(trials, minimize=True, cap=100)
    assert 999 in sample.indexes and 0 in sample.indexes and len(sample.indexes) <= 100
    assert not sample.whole_best_line  # and the page does not claim it is


def naive_running(spans: list[tuple[float, float]], at: float) -> int:
    return sum(1 for s, e in spans if s <= at < e)


@pytest.mark.parametrize("seed", range(4))
def test_the_running_count_is_every_trials_at_each_instant(seed):
    rng = random.Random(seed)
    spans = []
    for _ in range(300):
        start = float(rng.randrange(0, 500))  # whole seconds: starts and ends at one instant happen
        spans.append((start, start + rng.randrange(0, 40)))
    trials = [lean(i, started=s, ended=e) for i, (s, e) in enumerate(spans)]
    trials.append(lean(300, started=None))  # never started: not counted
    series = concurrency_series(trials, now=1000.0, max_points=10_000)
    instants = sorted({t for span in spans for t in span})
    assert [p[0] for p in series] == [t * 1000 for t in instants]
    assert [p[1] for p in series] == [naive_running(spans, t) for t in instants]
    assert series[-1][1] == 0


def test_a_trial_not_ended_runs_until_now_and_the_thinned_series_keeps_peaks_and_gaps():
    now = 10_000.0
    spans = [(float(i), float(i) + 1.5) for i in range(0, 5000, 2)]
    spans += [(7000.0 + i / 100, 7000.5) for i in range(40)]  # a burst of 40 at once, then none
    trials = [lean(i, started=s, ended=e) for i, (s, e) in enumerate(spans)]
    trials.append(lean(len(trials), live=True, started=9000.0))
    series = concurrency_series(trials, now=now, max_points=100)
    assert len(series) <= 100
    full = concurrency_series(trials, now=now, max_points=1_000_000)
    assert max(p[1] for p in series) == max(p[1] for p in full) == 40
    assert min(p[1] for p in series) == 0
    assert series[0] == full[0] and series[-1] == full[-1] == [now * 1000, 0]
    assert [9000.0 * 1000, 1] in full
    assert concurrency_series([lean(0)], now=now) == []


@pytest.mark.both_databases
def test_chart_data_samples_past_the_cap_on_a_real_store(store):
    fill(store)  # 8 trials, minimize; trial 5 running; trial 0's 1.0 the best
    engine = store.storage.engine
    now = time.time() + 5
    whole = chart_data(engine, "eq000001", now=now)
    assert whole.total == 8 and not whole.sampled and [r["trial_index"] for r in whole.trials] == list(range(8))
    data = chart_data(engine, "eq000001", cap=4, now=now)
    assert data.sampled and data.total == 8 and len(data.trials) == 4
    drawn = {r["trial_index"]: r for r in data.trials}
    assert 0 in drawn and 5 in drawn and drawn[5]["status"] == "RUNNING"  # the best and the running
    assert drawn[0] == whole.trials[0]  # a drawn trial is read whole
    assert data.concurrency == whole.concurrency  # over every trial, sampled or not
    assert data.concurrency[-1] == [now * 1000, 0] and data.concurrency[-2][1] == 1  # trial 5 runs until now
    shown = data.as_dict()
    assert shown["total"] == 8 and shown["sampled"] is True and len(shown["concurrency"]) == len(data.concurrency)


@pytest.mark.both_databases
def test_chart_data_follows_trials_that_end_and_start(store):
    fill(store)
    engine = store.storage.engine
    later = time.time() + 2 * settled.SETTLE_S  # every ended trial settled by then
    first = chart_data(engine, "eq000001", cap=4, now=later)
    store.finish(store.find_trial_id("eq000001", 5), TrialStatus.SUCCEEDED, 0.5)
    asked = ask(store, "eq000001", 8, "eq000001-0008", RANDOM, SPACE)
    store.set_status(asked.storage_id, TrialStatus.RUNNING, handle={"platform": "local"})
    second = chart_data(engine, "eq000001", cap=4, now=later)
    assert first.total == 8 and second.total == 9
    drawn = {r["trial_index"]: r for r in second.trials}
    assert drawn[5]["metric"] == 0.5 and 8 in drawn  # the new best (a record) and the new running trial
    assert drawn[8]["status"] == "RUNNING" and 5 in {r["trial_index"] for r in first.trials}
    assert first.concurrency[-2][1] == 1 and second.concurrency[-2][1] == 1  # 5, then 8, runs until now
