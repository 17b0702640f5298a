"""The experiment page's chart data: every trial up to a cap, a faithful sample past it.

A page drawing 100,000 trials sent 25 MB of JSON (2.6 s over HTTP) and took Chromium 7 s to
draw a mass no one can read on a 300-pixel chart. Past ``CHART_CAP`` trials the charts get a
sample chosen from what is known of every trial without its parameters (trialflow.queries.
settled: index, state, value, times, the ended ones read once) so that what a chart claims
stays true of *all* trials:

- every trial that set a new best, in trial order: the optimisation history's best-so-far line
  drawn from the sample is the one drawn from every trial (when they are at most half the cap;
  the API says whether);
- the best quarter of the cap by value, every running or waiting trial, the Pareto set;
- an even spread of the others, to the cap;
- how many trials ran at once, counted over *every* trial (not the sample), thinned by min-max
  decimation so a peak is never hidden.

Only the chosen trials are then read whole (parameters, status, platform).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.engine import Engine

from trialflow.queries.objectives import objectives_of
from trialflow.queries.settled import TrialFacts, study_trials
from trialflow.queries.tables import optimize_mode, study_id_of
from trialflow.queries.trials import chart_rows

#: Trials the charts draw one by one before they get a sample: 1,000 lines already fill a chart,
#: and 2,000 kept the page drawing 0.6 s longer at 100,000 trials (bench/RESULTS.md).
CHART_CAP = 1000
#: Points of the running-at-once series: a few per pixel of the widest chart.
CONCURRENCY_POINTS = 2000


@dataclass(frozen=True)
class ChartData:
    """What the experiment page's charts draw: ``trials`` (all of them, or the sample), how many
    there are in all, and the running-at-once series over all of them as [ms, count] points."""

    trials: list[dict[str, Any]]
    total: int
    concurrency: list[list[float]] = field(default_factory=list)
    whole_best_line: bool = True  # the drawn trials hold every record setter

    @property
    def sampled(self) -> bool:
        return len(self.trials) < self.total

    def as_dict(self) -> dict[str, Any]:
        return {
            "trials": self.trials,
            "total": self.total,
            "sampled": self.sampled,
            "whole_best_line": self.whole_best_line,
            "concurrency": self.concurrency,
        }


def record_setters(trials: Sequence[TrialFacts], minimize: bool) -> list[int]:
    """The indexes, in trial order, of every trial whose value beat every value before it (the
    first valued trial included): the steps of the best-so-far line. A tie is not a record."""
    out: list[int] = []
    best: float | None = None
    for t in sorted(trials, key=lambda t: t.index):
        if t.value is None:
            continue
        if best is None or (t.value < best if minimize else t.value > best):
            best = t.value
            out.append(t.index)
    return out


def even_spread(items: Sequence[int], room: int) -> list[int]:
    """At most ``room`` of ``items``, evenly spaced, the first and the last kept when room >= 2."""
    if room <= 0:
        return []
    if len(items) <= room:
        return list(items)
    if room == 1:
        return [items[-1]]
    return [items[(i * (len(items) - 1)) // (room - 1)] for i in range(room)]


@dataclass(frozen=True)
class Sample:
    """The trials to draw (indexes in trial order), and whether every record setter is among
    them (then the best-so-far line drawn from them is every trial's)."""

    indexes: list[int]
    whole_best_line: bool


def chosen_indexes(
    trials: Sequence[TrialFacts], minimize: bool, cap: int = CHART_CAP, also: Iterable[int] = ()
) -> Sample:
    """All the trials up to ``cap``; past it the record setters (at most half the cap: past that
    an even spread of them, the last, the best, kept), the best quarter of the cap by value, the
    live trials and ``also`` (the Pareto set), then an even spread of the rest up to the cap.
    Live trials and ``also`` are kept even past the cap: there are as many as trialConcurrency
    allows, and the Pareto set is what its chart is about."""
    if len(trials) <= cap:
        return Sample(sorted(t.index for t in trials), True)
    records = record_setters(trials, minimize)
    keep: set[int] = set(even_spread(records, cap // 2))
    valued = [t for t in trials if t.value is not None]
    pick = heapq.nsmallest if minimize else heapq.nlargest
    keep.update(t.index for t in pick(cap // 4, valued, key=lambda t: (t.value, t.index if minimize else -t.index)))
    keep.update(t.index for t in trials if t.live)
    known = {t.index for t in trials}
    keep.update(i for i in also if i in known)
    rest = sorted(i for i in known if i not in keep)
    keep.update(even_spread(rest, cap - len(keep)))
    return Sample(sorted(keep), len(records) <= cap // 2)


def concurrency_series(
    trials: Iterable[TrialFacts], now: float, max_points: int = CONCURRENCY_POINTS
) -> list[list[float]]:
    """How many trials ran at once, as [epoch ms, count] at each instant a trial started or
    ended (a trial not ended runs until ``now``; starts and ends at one instant are counted
    together, so a slot handed on is not counted twice). Past ``max_points`` each stretch keeps
    its lowest and its highest count (min-max decimation), so a peak or a gap is never hidden.
    Vectorised: 100,000 trials' 200,000 events took 0.5 s as a Python loop."""
    spans = [(t.started, t.ended) for t in trials if t.started is not None]
    if not spans:
        return []
    starts = np.sort(np.fromiter((s for s, _ in spans), dtype=float, count=len(spans)))
    ends = np.sort(np.fromiter((e if e is not None else max(now, s) for s, e in spans), dtype=float, count=len(spans)))
    instants = np.unique(np.concatenate((starts, ends)))
    running = np.searchsorted(starts, instants, side="right") - np.searchsorted(ends, instants, side="right")
    keep = _min_max_kept(running, max_points)
    return [[float(instants[i]) * 1000, int(running[i])] for i in keep]


def _min_max_kept(values: np.ndarray, max_points: int) -> list[int]:
    """The positions of ``values`` to keep, in order: all up to ``max_points``; past it the first,
    the last, and each of ``(max_points - 2) // 2`` even stretches' lowest and highest."""
    n = len(values)
    if n <= max_points:
        return list(range(n))
    buckets = max(1, (max_points - 2) // 2)
    edges = np.linspace(1, n - 1, buckets + 1).astype(int)
    kept = {0, n - 1}
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        if hi > lo:
            stretch = values[lo:hi]
            kept.add(int(lo) + int(np.argmin(stretch)))
            kept.add(int(lo) + int(np.argmax(stretch)))
    return sorted(kept)


def chart_data(engine: Engine, experiment_id: str, cap: int = CHART_CAP, now: float | None = None) -> ChartData:
    """The experiment page's charts: every trial up to ``cap``, the sample past it (see the
    module), and the running-at-once series over every trial."""
    at = time.time() if now is None else now
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
    lean = study_trials(engine, [sid], at)[sid].trials()
    series = concurrency_series(lean, at)
    if len(lean) <= cap:
        return ChartData(chart_rows(engine, experiment_id), len(lean), series)
    minimize = optimize_mode(engine, experiment_id) == "minimize"
    pareto = objectives_of(engine, experiment_id).pareto
    sample = chosen_indexes(lean, minimize, cap, pareto)
    return ChartData(chart_rows(engine, experiment_id, sample.indexes), len(lean), series, sample.whole_best_line)
