"""Checkpoint retention, checked against its rule written the plain way over every small case
(all lists of up to three checkpoints over a few steps and results, every keep setting, both
modes, with and without a pinned step), and at its edges."""

from __future__ import annotations

import itertools
import math

import pytest

from trialflow.checkpoints.retention import Checkpoint, retain

METRICS = (None, 0.1, 0.5, math.nan, math.inf, -0.2)


def _rule(checkpoints, keep_last, keep_best, mode, pinned):
    """The rule as the docs say it: the last save of each step; the keep_last newest steps;
    the keep_best best finite results, ties to the newer step; and the pinned steps."""
    latest = {}
    for c in checkpoints:
        latest[c.step] = c
    steps = sorted(latest, reverse=True)
    newest = set(steps[:keep_last])
    finite = [s for s in steps if latest[s].metric is not None and math.isfinite(latest[s].metric)]
    better = (lambda a, b: a > b) if mode == "maximize" else (lambda a, b: a < b)
    chosen: list[int] = []
    for _ in range(keep_best):
        candidates = [s for s in finite if s not in chosen]
        if not candidates:
            break
        best = candidates[0]
        for s in candidates[1:]:
            a, b = latest[s].metric, latest[best].metric
            if better(a, b) or (a == b and s > best):
                best = s
        chosen.append(best)
    keep = newest | set(chosen) | set(pinned)
    return [s for s in steps if s in keep], [s for s in steps if s not in keep]


def _cases():
    for n in range(4):
        for steps in itertools.product(range(3), repeat=n):
            for metrics in itertools.product(METRICS[:4], repeat=n):
                yield [Checkpoint(s, m) for s, m in zip(steps, metrics)]


def test_every_small_case_follows_the_rule():
    checked = 0
    for checkpoints in _cases():
        for keep_last, keep_best, mode, pinned in itertools.product(
            (1, 2), (0, 1, 2), ("maximize", "minimize"), (frozenset(), frozenset({0}))
        ):
            got = retain(checkpoints, keep_last, keep_best, mode, pinned)
            keep, delete = _rule(checkpoints, keep_last, keep_best, mode, pinned)
            assert [c.step for c in got.keep] == keep, (checkpoints, keep_last, keep_best, mode, pinned)
            assert [c.step for c in got.delete] == delete
            checked += 1
    assert checked > 40_000


def test_the_newest_and_the_best_are_kept_and_the_rest_deleted_newest_first():
    checkpoints = [Checkpoint(step, metric) for step, metric in [(1, 0.9), (2, 0.3), (3, 0.5), (4, 0.4), (5, 0.2)]]
    got = retain(checkpoints, keep_last=2, keep_best=1)
    assert [c.step for c in got.keep] == [5, 4, 1]
    assert [c.step for c in got.delete] == [3, 2]
    assert [c.step for c in retain(checkpoints, 2, 1, "minimize").keep] == [5, 4]  # 0.2 is both


def test_a_diverged_or_silent_step_is_never_the_best_but_may_be_the_newest():
    checkpoints = [Checkpoint(1, 0.5), Checkpoint(2, math.nan), Checkpoint(3, math.inf), Checkpoint(4, None)]
    got = retain(checkpoints, keep_last=1, keep_best=1)
    assert [c.step for c in got.keep] == [4, 1]


def test_a_step_saved_again_keeps_its_later_save():
    got = retain([Checkpoint(1, 0.9), Checkpoint(2, 0.1), Checkpoint(1, 0.0)], keep_last=1, keep_best=1)
    assert got.keep == [Checkpoint(2, 0.1)] and got.delete == [Checkpoint(1, 0.0)]


def test_a_pinned_parent_outlives_both_rules():
    checkpoints = [Checkpoint(step, 0.1) for step in range(10)]
    got = retain(checkpoints, keep_last=1, keep_best=0, pinned={3})
    assert [c.step for c in got.keep] == [9, 3]
    assert len(got.delete) == 8


@pytest.mark.parametrize(
    ("keep_last", "keep_best", "message"), [(0, 1, "keep_last must be at least 1"), (1, -1, "keep_best")]
)
def test_settings_that_would_lose_the_restart_point_are_refused(keep_last, keep_best, message):
    with pytest.raises(ValueError, match=message):
        retain([Checkpoint(1)], keep_last, keep_best)


def test_nothing_saved_keeps_nothing():
    assert retain([], 2, 1) == retain((), 2, 1)
    assert retain([], 2, 1).keep == [] and retain([], 2, 1).delete == []
