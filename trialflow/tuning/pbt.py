"""Population Based Training as NNI's PBTTuner ran it, over trial indices instead of one
dispatcher's memory.

NNI kept the population in its tuner process: ``population_size`` trials ran one step each, and
when all had reported, the worst ``fraction`` took a copy of a top trial's parameters, perturbed,
and its checkpoint, and the rest went on from their own. Here every trial asks from its own
process, so the population is read from the trial indices: trial ``i`` is member
``i % population_size`` of generation ``i // population_size``, and it is planned from the
finished trials of the generation before (:func:`plan_member`), which are in the store. A trial
of generation ``g`` is not given parameters before every trial of generation ``g - 1`` has ended
(:class:`PopulationNotReady`); then its plan is a function of their results and its index alone,
so a retry, a twin ask or a resumed run plans the same member the same way.

What differs from NNI (said in the docs' algorithm table): the random choices are seeded per trial
index when ``seed`` is given, a trial that failed ranks last (NNI's -inf/+inf), and a perturbed
value that is not a point of the space (a q-type pushed off its grid by NNI's bounds) keeps the
top trial's value. Checkpoints do not live on a shared disk: the parent's last kept checkpoint is
fetched from the experiment's artifact store where the trial runs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trialflow.config.search_space import Parameter, SearchSpace, SearchSpaceError, encode
from trialflow.store.records import Lineage
from trialflow.store.results import scalar
from trialflow.trial.status import TrialStatus
from trialflow.trial.wire import PBT_LOAD_KEY, PBT_SAVE_KEY
from trialflow.tuning.seeds import trial_seed

if TYPE_CHECKING:
    from trialflow.store.records import TrialRecord

#: The experiment attribute listing trial indices whose task ended without asking (marked
#: failed or success while it waited, skipped): a later generation does not wait for them.
UNASKED_ATTR = "unasked_indices"

#: NNI's parameter keys for the folders a PBT trial loads from and saves to (set where it runs).
FOLDER_KEYS = (PBT_LOAD_KEY, PBT_SAVE_KEY)


def unasked_of(raw: Any) -> frozenset[int]:
    """The indexes UNASKED_ATTR holds, as stored (what is not an index is not read as one)."""
    return frozenset(i for i in raw if isinstance(i, int)) if isinstance(raw, list) else frozenset()


@dataclass(frozen=True)
class PbtArgs:
    """PBTTuner's classArgs, with NNI's defaults."""

    optimize_mode: str = "maximize"
    population_size: int = 10
    factor: float = 0.2
    resample_probability: float = 0.25
    fraction: float = 0.2
    seed: int | None = None

    @classmethod
    def from_class_args(cls, args: Mapping[str, Any]) -> PbtArgs:
        """From a checked config's classArgs (``factors`` is the name NNI's validator knew,
        ``factor`` the one its constructor took: either is read)."""
        factor = args.get("factor", args.get("factors", 0.2))
        seed = args.get("seed")
        return cls(
            optimize_mode=str(args.get("optimize_mode", "maximize")).lower(),
            population_size=int(args.get("population_size", 10)),
            factor=float(factor),
            resample_probability=float(args.get("resample_probability", 0.25)),
            fraction=float(args.get("fraction", 0.2)),
            seed=None if seed is None else int(seed),
        )


@dataclass(frozen=True)
class Ended:
    """A trial of the generation before, as the plan needs it: its index and id, its
    parameters, and its scalar result (None: it failed or reported nothing)."""

    index: int
    trial_id: str
    parameters: dict[str, Any]
    value: float | None


@dataclass(frozen=True)
class MemberPlan:
    """What a trial of generation >= 1 runs with: its parameters and lineage."""

    parameters: dict[str, Any]
    lineage: Lineage


class PopulationNotReady(Exception):
    """The generation before has trials still running (or not started): this trial waits."""

    def __init__(self, index: int, generation: int, waiting_for: Sequence[int]):
        self.index, self.generation, self.waiting_for = index, generation, tuple(waiting_for)
        shown = ", ".join(map(str, self.waiting_for[:5])) + (", ..." if len(self.waiting_for) > 5 else "")
        super().__init__(
            f"trial {index} (generation {generation}) waits for generation {generation - 1} to end "
            f"(trial indices {shown})"
        )


def generation_of(index: int, size: int) -> tuple[int, int]:
    """(generation, member) of trial ``index``."""
    return divmod(index, size)


def previous_generation(index: int, size: int) -> range:
    """The trial indices of the generation before ``index``'s (empty in the first)."""
    generation = index // size
    return range((generation - 1) * size, generation * size) if generation else range(0)


def generation_before(
    generation: Mapping[int, TrialRecord | None],
    trial_index: int,
    size: int,
    floor: int,
    unasked: frozenset[int],
) -> list[Ended]:
    """The ended trials of the generation before ``trial_index``'s (``generation``: its
    trials by index, None where one was never asked), or PopulationNotReady naming those still
    running or not yet asked (below ``floor``, or whose task ended without asking, UNASKED_ATTR:
    a missing one never will be). A trial that did not succeed has no result to rank by (it
    ranks last). Pure."""
    ended, waiting = [], []
    for index in previous_generation(trial_index, size):
        record = generation.get(index)
        if record is None:
            if index >= floor and index not in unasked:
                waiting.append(index)
            continue
        if not record.finished:
            waiting.append(index)
            continue
        value = scalar(record.final) if record.status is TrialStatus.SUCCEEDED else None
        ended.append(Ended(index, record.trial_id, record.parameters, value))
    if waiting:
        raise PopulationNotReady(trial_index, trial_index // size, waiting)
    return ended


def ranked(ended: Sequence[Ended], optimize_mode: str) -> list[Ended]:
    """Best first; a trial without a finite result ranks last, as NNI's -inf (maximize)."""
    sign = -1.0 if optimize_mode == "maximize" else 1.0

    def key(e: Ended) -> tuple[int, float, int]:
        usable = e.value is not None and math.isfinite(e.value)
        return (0 if usable else 1, sign * e.value if usable and e.value is not None else 0.0, e.index)

    return sorted(ended, key=key)


def plan_member(index: int, args: PbtArgs, space: SearchSpace, ended: Sequence[Ended]) -> MemberPlan | None:
    """Trial ``index``'s plan from its generation-before (``ended``: every trial of it that ran).

    NNI's ``_proceed_next_epoch``: ``cutoff = ceil(fraction * n)``; the last ``cutoff`` of the
    ranking (the bottoms) each copy a random one of the first ``cutoff`` (the tops), perturbed
    (:func:`exploit_and_explore`), and load its checkpoint; the others keep their parameters
    and load their own. The member's own trial of the generation before decides which it is;
    a member whose trial never ran (its run ended first) copies a top trial as a bottom does."""
    generation, member = generation_of(index, args.population_size)
    rng = _rng(args.seed, index)
    order = ranked(ended, args.optimize_mode)
    if not order:
        return None  # none of the generation before ran (its runs ended first): a fresh member
    cutoff = max(1, math.ceil(args.fraction * len(order)))
    tops, bottoms = order[:cutoff], order[len(order) - cutoff :]
    own_index = index - args.population_size
    own = next((e for e in order if e.index == own_index), None)
    if own is not None and own not in bottoms:
        return MemberPlan(dict(own.parameters), Lineage(generation, member, own.index, own.trial_id, False))
    top = tops[rng.randrange(len(tops))]
    parameters = exploit_and_explore(top.parameters, space, args.factor, args.resample_probability, rng)
    return MemberPlan(parameters, Lineage(generation, member, top.index, top.trial_id, True))


def _rng(seed: int | None, index: int) -> random.Random:
    # Seeded per index: every trial plans in its own process, and a retry plans the same.
    return random.Random(None if seed is None else trial_seed(seed, index, "PBT"))


def exploit_and_explore(
    parameters: Mapping[str, Any], space: SearchSpace, factor: float, resample_probability: float, rng: random.Random
) -> dict[str, Any]:
    """``parameters`` (a top trial's) with every parameter perturbed as NNI's PBTTuner does:
    resampled with ``resample_probability``, else moved one step up or down (a choice's
    neighbour, randint +-1, a q-type +-q, a continuous one +-``factor`` of its range or sigma),
    held to the space's bounds. A value that is still not a point of the space keeps the top's."""
    out = dict(parameters)
    for p in space.params:
        if p.key in out:
            out[p.key] = _perturbed(p, out[p.key], factor, resample_probability, rng)
    for _ in range(len(space.params)):
        try:
            encode(space, out)
            return out
        except SearchSpaceError as exc:
            key = str(exc.path[0]) if exc.path else None
            if key is None or key not in parameters or out.get(key) == parameters[key]:
                break
            out[key] = parameters[key]
    return dict(parameters)


class _Draw:
    """A SuggestingTrial that draws from ``rng``: a resample, outside any Optuna study."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return choices[self.rng.randrange(len(choices))]

    def suggest_int(self, name: str, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def suggest_float(self, name: str, low: float, high: float, *, log: bool = False) -> float:
        if log:
            return math.exp(self.rng.uniform(math.log(low), math.log(high)))
        return self.rng.uniform(low, high)


def _perturbed(p: Parameter, value: Any, factor: float, resample_probability: float, rng: random.Random) -> Any:
    if rng.random() < resample_probability:
        return SearchSpace((p,)).sample(_Draw(rng))[p.key]
    up = rng.random() > 0.5
    step = _STEPS.get(p.type)
    if step is None or p.is_nested:
        return value
    return step(p.values, value, factor, up)


def _choice(v: tuple[Any, ...], value: Any, factor: float, up: bool) -> Any:
    index = next((i for i, o in enumerate(v) if o == value), None)
    if index is None:
        return value
    return v[min(index + 1, len(v) - 1)] if up else v[max(index - 1, 0)]


def _randint(v: tuple[Any, ...], value: Any, factor: float, up: bool) -> Any:
    return min(value + 1, v[1] - 1) if up else max(value - 1, v[0])


def _uniform(v: tuple[Any, ...], value: Any, factor: float, up: bool) -> Any:
    move = (v[1] - v[0]) * factor
    return min(value + move, v[1]) if up else max(value - move, v[0])


def _quantized(v: tuple[Any, ...], value: Any, factor: float, up: bool) -> Any:
    q = v[2]
    multiple = round(value / q)
    return _clean(min((multiple + 1) * q, v[1]) if up else max((multiple - 1) * q, v[0]))


def _loguniform(v: tuple[Any, ...], value: Any, factor: float, up: bool) -> Any:
    move = (math.log(v[1]) - math.log(v[0])) * factor
    if up:
        return math.exp(min(math.log(value) + move, math.log(v[1])))
    return math.exp(max(math.log(value) - move, math.log(v[0])))


def _normal(v: tuple[Any, ...], value: Any, factor: float, up: bool) -> Any:
    return value + v[1] * factor if up else value - v[1] * factor


def _qnormal(v: tuple[Any, ...], value: Any, factor: float, up: bool) -> Any:
    return _clean(value + v[2] if up else value - v[2])


def _lognormal(v: tuple[Any, ...], value: Any, factor: float, up: bool) -> Any:
    return math.exp(math.log(value) + v[1] * factor) if up else math.exp(math.log(value) - v[1] * factor)


def _qlognormal(v: tuple[Any, ...], value: Any, factor: float, up: bool) -> Any:
    return _clean(value + v[2] if up else max(value - v[2], 0.0))


def _clean(value: float) -> float:
    # Float noise (0.30000000000000004) off a multiple of q, as the space's own draws are.
    return float(f"{value:.12g}")


_STEPS: dict[str, Callable[[tuple[Any, ...], Any, float, bool], Any]] = {
    "choice": _choice,
    "randint": _randint,
    "uniform": _uniform,
    "quniform": _quantized,
    "loguniform": _loguniform,
    "qloguniform": _quantized,
    "normal": _normal,
    "qnormal": _qnormal,
    "lognormal": _lognormal,
    "qlognormal": _qlognormal,
}
