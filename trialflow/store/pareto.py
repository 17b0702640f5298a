"""Several objectives: the Pareto set (a trial's values come from trialflow.store.results). No Optuna.

With two or more objectives there is no single best trial: a trial is in the Pareto set when no
other trial is at least as good on every objective and better on one. The end step, the CLI,
the published Asset and the pages all ask this module, so "best" means the same everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from trialflow.store.results import TrialRow

#: The experiment attribute holding its objectives: [{"metric": ..., "mode": ...}, ...].
OBJECTIVES_ATTR = "objectives"


def dominates(a: Sequence[float], b: Sequence[float], modes: Sequence[str]) -> bool:
    """``a`` is at least as good as ``b`` on every objective and better on one."""
    better = False
    for x, y, mode in zip(a, b, modes, strict=True):
        if mode == "minimize":
            x, y = -x, -y
        if x < y:
            return False
        if x > y:
            better = True
    return better


def pareto_set(points: Sequence[Sequence[float] | None], modes: Sequence[str]) -> list[int]:
    """Indexes (into ``points``) of the Pareto set, in input order; None points are skipped.

    Points are visited best-first by the sum of their signed values, so a point already on
    the front is never dominated by a later one and each comparison is against the front only
    (n x front size, not n squared)."""
    signs = [-1.0 if m == "minimize" else 1.0 for m in modes]
    present = {i: p for i, p in enumerate(points) if p is not None}
    order = sorted(present, key=lambda i: -sum(s * v for s, v in zip(signs, present[i], strict=True)))
    front: list[int] = []
    for i in order:
        if not any(dominates(present[j], present[i], modes) for j in front):
            front.append(i)
    return sorted(front)


def pareto_rows(rows: Sequence[TrialRow], objectives: Sequence[dict[str, str]]) -> list[TrialRow]:
    """The Pareto set among trial rows that carry ``values`` ({metric: value}), ordered by the
    first objective, best first."""
    names = [o["metric"] for o in objectives]
    modes = [o["mode"] for o in objectives]
    candidates = [r for r in rows if r.values is not None and all(n in r.values for n in names)]
    points = [[float(r.values[n]) for n in names] for r in candidates if r.values is not None]
    chosen = [candidates[i] for i in pareto_set(points, modes)]
    first = -1.0 if modes[0] == "maximize" else 1.0
    return sorted(chosen, key=lambda r: first * (r.values or {})[names[0]])


def with_values(rows: Sequence[TrialRow], objectives: Sequence[dict[str, str]]) -> list[TrialRow]:
    """Rows (ExperimentStore.trial_rows) with ``values``: {metric: value} for a trial Optuna
    completed with one value per objective, else None."""
    names = [o["metric"] for o in objectives]
    out = []
    for row in rows:
        raw = row.objective_values
        ok = row.counted and raw is not None and len(raw) == len(names)
        out.append(replace(row, values=dict(zip(names, raw or (), strict=True)) if ok else None))
    return out


def fronts(rows: Sequence[TrialRow], objectives: Sequence[dict[str, str]]) -> list[TrialRow]:
    """Rows with values, front by front (the Pareto set, then the set that is Pareto once it is
    gone, ...): an order "best first" for several objectives, as NSGA-II ranks."""
    left = [r for r in rows if r.values is not None]
    out: list[TrialRow] = []
    while left:
        front = pareto_rows(left, objectives)
        out += front
        taken = {id(r) for r in front}
        left = [r for r in left if id(r) not in taken]
    return out
