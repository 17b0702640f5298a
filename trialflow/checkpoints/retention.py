"""Which of a trial's checkpoints to keep: the newest ``keepLast``, the best ``keepBest``, and
any still in use; the rest are deleted as the trial goes (trialflow.config.checkpoints).

Resuming after a fault needs the newest checkpoint; promoting the model that won, or handing
weights on in Population Based Training, needs the best one; a checkpoint another trial is
starting from (PBT's parent) or a restart is loading must outlive both rules until that load is
done (``pinned``). A checkpoint's quality is the intermediate result the trial reported at its
step: a step with none, or a non-finite one (a diverged run), is never "best".

Pure and total: any list, in any order, with repeated steps (a retried attempt saving a step
again: the later save stands) gives one answer, in O(n log n).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Set
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Checkpoint:
    """One saved checkpoint of a trial: its step, and the result reported at that step."""

    step: int
    metric: float | None = None

    @property
    def ranked(self) -> bool:
        """Whether it can be among the best: a finite result was reported at its step."""
        return self.metric is not None and math.isfinite(self.metric)


@dataclass(frozen=True)
class Retention:
    """What to keep and what to delete, each newest first."""

    keep: list[Checkpoint]
    delete: list[Checkpoint]


def retain(
    checkpoints: Iterable[Checkpoint],
    keep_last: int,
    keep_best: int,
    mode: Literal["maximize", "minimize"] = "maximize",
    pinned: Set[int] = frozenset(),
) -> Retention:
    """Split ``checkpoints`` into those kept (the ``keep_last`` newest steps, the ``keep_best``
    best ranked ones, ties to the newer, and every step in ``pinned``) and those to delete."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1 (a restart needs the newest), got {keep_last}")
    if keep_best < 0:
        raise ValueError(f"keep_best must be 0 or more, got {keep_best}")
    by_step: dict[int, Checkpoint] = {}
    for checkpoint in checkpoints:
        by_step[checkpoint.step] = checkpoint  # a step saved again: the later save stands
    newest_first = sorted(by_step.values(), key=lambda c: c.step, reverse=True)
    sign = 1.0 if mode == "maximize" else -1.0
    best_first = sorted(
        (c for c in newest_first if c.ranked),
        key=lambda c: (sign * (c.metric or 0.0), c.step),
        reverse=True,
    )
    kept = {c.step for c in newest_first[:keep_last]} | {c.step for c in best_first[:keep_best]} | set(pinned)
    return Retention(
        keep=[c for c in newest_first if c.step in kept],
        delete=[c for c in newest_first if c.step not in kept],
    )
