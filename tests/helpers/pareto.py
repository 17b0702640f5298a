"""The Pareto set by brute force (every pair compared), to check the real one against."""

from __future__ import annotations

from trialflow.store.pareto import dominates


def brute_force(points, modes):
    return [
        i
        for i, p in enumerate(points)
        if p is not None and not any(q is not None and dominates(q, p, modes) for q in points)
    ]
