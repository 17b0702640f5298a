"""NNI search spaces with NNI's exact semantics, sampled through any Optuna-like trial.

Why sample the *underlying* distribution and transform it here rather than use
Optuna's own ``step=``: NNI defines ``quniform`` as
``clip(round(uniform(low, high) / q) * q, low, high)``, which Optuna's stepped
floats cannot express (they require ``high - low`` to be a multiple of ``q``),
and Optuna has no normal distributions at all. Normal-family values are drawn
by the inverse CDF of a uniform quantile, so random sampling is exactly NNI's
distribution and model-based samplers (TPE, GP) learn in quantile space.

This module imports nothing heavy: the config loader validates spaces with it.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Protocol

NUMERIC_TYPES = (
    "randint",
    "uniform",
    "quniform",
    "loguniform",
    "qloguniform",
    "normal",
    "qnormal",
    "lognormal",
    "qlognormal",
)
ALL_TYPES = ("choice",) + NUMERIC_TYPES
_Q_TYPES = {"quniform", "qloguniform", "qnormal", "qlognormal"}
_NORMAL_FAMILY = {"normal", "qnormal", "lognormal", "qlognormal"}
# Quantiles are kept off 0 and 1 so the inverse CDF stays finite (+-7 sigma).
_QUANTILE_EPS = 1e-12


class SearchSpaceError(ValueError):
    """A search-space entry NNI would reject; ``path`` locates it inside the space."""

    def __init__(self, path: Sequence[str | int], message: str):
        self.path = tuple(path)
        self.message = message
        super().__init__(f"{'.'.join(map(str, path)) or '(search space)'}: {message}")


class SuggestingTrial(Protocol):
    """The part of ``optuna.Trial`` a search space needs (kept structural: no Optuna import)."""

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...
    def suggest_int(self, name: str, low: int, high: int) -> int: ...
    def suggest_float(self, name: str, low: float, high: float, *, log: bool = False) -> float: ...


@dataclass(frozen=True)
class NestedOption:
    """A dict option of a nested ``choice``: ``{"_name": ..., <sub-parameters or constants>}``."""

    name: Any
    params: tuple[Parameter, ...]
    constants: tuple[tuple[str, Any], ...] = ()


Option = NestedOption | Any


@dataclass(frozen=True)
class Parameter:
    key: str
    type: str
    values: tuple[Any, ...]
    #: Unique name for the sampler; nested parameters carry their branch in it.
    sampler_name: str

    @property
    def is_nested(self) -> bool:
        return self.type == "choice" and any(isinstance(v, NestedOption) for v in self.values)


@dataclass(frozen=True)
class SearchSpace:
    params: tuple[Parameter, ...]
    raw: dict[str, Any] = field(compare=False, repr=False, default_factory=dict)

    def sample(self, trial: SuggestingTrial) -> dict[str, Any]:
        """Draw one parameter set in NNI's shape (what ``nni.get_next_parameter()`` returns)."""
        return {p.key: _sample_param(p, trial) for p in self.params}

    def grid(self) -> Grid:
        """Every combination, for GridSearch, computed per index (never listed); raises
        SearchSpaceError for spaces that have no finite grid."""
        return Grid(self.params)

    @property
    def names(self) -> list[str]:
        return [p.key for p in self.params]

    def walk(self) -> Iterator[tuple[tuple[str, ...], Parameter]]:
        """Every parameter with its key path, nested ones included (for per-tuner type checks)."""
        yield from _walk(self.params, ())

    @property
    def is_nested(self) -> bool:
        return any(p.is_nested for _, p in self.walk())


def _walk(params: tuple[Parameter, ...], path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Parameter]]:
    for p in params:
        yield path + (p.key,), p
        for i, option in enumerate(p.values if p.type == "choice" else ()):
            if isinstance(option, NestedOption):
                yield from _walk(option.params, path + (p.key, "_value", str(i)))


# --- parsing and validation (NNI's rules) ---------------------------------------------


def parse_search_space(raw: Any, namespace: str = "") -> SearchSpace:
    """The space ``raw`` (NNI's JSON); ``namespace`` prefixes every sampler name (a space changed
    while the experiment runs samples under names of its own: trialflow.tuning.space_versions)."""
    if not isinstance(raw, dict):
        raise SearchSpaceError(
            (), f"expected a mapping of parameter name -> {{_type, _value}}, got {type(raw).__name__}"
        )
    return SearchSpace(_parse_params(raw, (), namespace), raw)


def _parse_params(raw: dict[str, Any], path: tuple[str | int, ...], prefix: str) -> tuple[Parameter, ...]:
    return tuple(_parse_param(str(key), spec, path + (str(key),), prefix) for key, spec in raw.items())


def _number(value: Any) -> bool:
    """A finite int or float (an int too large for a float, 10**400, is not one: it is refused
    like any other bad value instead of raising OverflowError)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlist, _SHOWN.maxdict = 2, 60, 60, 6, 6


def _shown(value: Any) -> str:
    """A value as an error message shows it: bounded in length and depth (a person's 1 MB
    string or 500-deep list is named, not echoed back)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit integer"
    return _SHOWN.repr(value)


def _parse_param(key: str, spec: Any, path: tuple[str | int, ...], prefix: str) -> Parameter:
    if not isinstance(spec, dict) or "_type" not in spec or "_value" not in spec:
        raise SearchSpaceError(path, "expected {_type: <type>, _value: [...]}")
    extra = set(spec) - {"_type", "_value"}
    if extra:
        raise SearchSpaceError(path, f"unexpected keys {sorted(extra)}; a parameter has only _type and _value")
    kind, values = spec["_type"], spec["_value"]
    sampler_name = f"{prefix}{key}"
    if kind not in ALL_TYPES:
        raise SearchSpaceError(path + ("_type",), f"unknown type {kind!r}; expected one of {', '.join(ALL_TYPES)}")
    if not isinstance(values, list):
        raise SearchSpaceError(path + ("_value",), f"expected a list, got {type(values).__name__}")
    if kind == "choice":
        if not values:
            raise SearchSpaceError(path + ("_value",), "choice needs at least one option")
        options = tuple(
            _parse_option(option, path + ("_value", i), f"{sampler_name}/{i}/") for i, option in enumerate(values)
        )
        return Parameter(key, kind, options, sampler_name)
    expected = 3 if kind in _Q_TYPES else 2
    shape = (
        "[low, high, q]"
        if kind in {"quniform", "qloguniform"}
        else (
            "[mu, sigma, q]"
            if kind in _Q_TYPES
            else "[lower, upper)"
            if kind == "randint"
            else "[mu, sigma]"
            if kind in _NORMAL_FAMILY
            else "[low, high]"
        )
    )
    if len(values) != expected or not all(_number(v) for v in values):
        raise SearchSpaceError(path + ("_value",), f"{kind} takes {expected} numbers {shape}, got {values!r}")
    if kind == "randint":
        if not all(float(v).is_integer() for v in values):
            raise SearchSpaceError(path + ("_value",), f"randint bounds must be integers, got {values!r}")
        if values[0] >= values[1]:
            raise SearchSpaceError(path + ("_value",), f"randint needs lower < upper, got {values!r}")
        return Parameter(key, kind, (int(values[0]), int(values[1])), sampler_name)
    if kind in _NORMAL_FAMILY:
        if values[1] <= 0:
            raise SearchSpaceError(path + ("_value",), f"{kind} needs sigma > 0, got {values!r}")
    else:
        if values[0] >= values[1]:
            raise SearchSpaceError(path + ("_value",), f"{kind} needs low < high, got {values!r}")
        if kind in {"loguniform", "qloguniform"} and values[0] <= 0:
            raise SearchSpaceError(path + ("_value",), f"{kind} needs low > 0, got {values!r}")
    if kind in _Q_TYPES and values[2] <= 0:
        raise SearchSpaceError(path + ("_value",), f"{kind} needs q > 0, got {values!r}")
    return Parameter(key, kind, tuple(float(v) for v in values), sampler_name)


def _parse_option(option: Any, path: tuple[str | int, ...], prefix: str) -> Option:
    if not isinstance(option, dict):
        return option
    if "_name" not in option:
        # A plain dict value is a constant option, not a nested space (NNI does the same).
        return option
    params: list[Parameter] = []
    constants: list[tuple[str, Any]] = []
    for key, value in option.items():
        if key == "_name":
            continue
        if isinstance(value, dict) and "_type" in value:
            params.append(_parse_param(str(key), value, path + (str(key),), prefix))
        else:
            constants.append((str(key), value))
    return NestedOption(option["_name"], tuple(params), tuple(constants))


# --- sampling -------------------------------------------------------------------------


def _is_plain_choice(values: tuple[Any, ...]) -> bool:
    """Optuna stores categorical choices only if they are None/bool/int/float/str."""
    return all(v is None or isinstance(v, (bool, int, float, str)) for v in values) and len(
        set((type(v), v) for v in values)
    ) == len(values)


def _quantize(value: float, q: float, low: float | None = None, high: float | None = None) -> float:
    value = round(value / q) * q
    if low is not None and high is not None:
        value = min(max(value, low), high)
    # Strip float noise (0.30000000000000004) without changing the grid NNI defines.
    return float(f"{value:.12g}")


def _normal(trial: SuggestingTrial, name: str, mu: float, sigma: float) -> float:
    quantile = trial.suggest_float(name, _QUANTILE_EPS, 1 - _QUANTILE_EPS)
    return NormalDist(mu, sigma).inv_cdf(quantile)


def _sample_param(p: Parameter, trial: SuggestingTrial) -> Any:
    v = p.values
    if p.type == "choice":
        if _is_plain_choice(v):
            picked = trial.suggest_categorical(p.sampler_name, list(v))
        else:
            picked = v[trial.suggest_categorical(p.sampler_name, list(range(len(v))))]
        return _materialize(picked, trial)
    if p.type == "randint":
        return trial.suggest_int(p.sampler_name, v[0], v[1] - 1)
    if p.type == "uniform":
        return trial.suggest_float(p.sampler_name, v[0], v[1])
    if p.type == "quniform":
        return _quantize(trial.suggest_float(p.sampler_name, v[0], v[1]), v[2], v[0], v[1])
    if p.type == "loguniform":
        return trial.suggest_float(p.sampler_name, v[0], v[1], log=True)
    if p.type == "qloguniform":
        return _quantize(trial.suggest_float(p.sampler_name, v[0], v[1], log=True), v[2], v[0], v[1])
    if p.type == "normal":
        return _normal(trial, p.sampler_name, v[0], v[1])
    if p.type == "qnormal":
        return _quantize(_normal(trial, p.sampler_name, v[0], v[1]), v[2])
    if p.type == "lognormal":
        return math.exp(_normal(trial, p.sampler_name, v[0], v[1]))
    if p.type == "qlognormal":
        return _quantize(math.exp(_normal(trial, p.sampler_name, v[0], v[1])), v[2])
    raise AssertionError(p.type)  # parse_search_space admits nothing else


def _materialize(option: Option, trial: SuggestingTrial) -> Any:
    if not isinstance(option, NestedOption):
        return option
    out: dict[str, Any] = {"_name": option.name}
    out.update(option.constants)
    out.update({sub.key: _sample_param(sub, trial) for sub in option.params})
    return out


# --- chosen parameters ----------------------------------------------------------------
#
# A person's own trial (the pages' "add a trial", a re-run) must run with exactly the values
# given, and the tuner must learn from it like from its own: the values are checked against
# the space and turned into what the sampler would have drawn to produce them (per sampler
# name), so a fixed sampler replays them through ``sample``.


def encode(space: SearchSpace, parameters: Any) -> dict[str, Any]:
    """The sampler values that make ``space.sample`` return ``parameters``; SearchSpaceError
    naming the parameter's path and what was expected when they are not a point of the space."""
    if not isinstance(parameters, dict):
        raise SearchSpaceError((), f"expected a mapping of parameter name -> value, got {type(parameters).__name__}")
    out: dict[str, Any] = {}
    _encode_params(space.params, parameters, (), out)
    return out


def point_problems(space: SearchSpace, parameters: Any) -> list[SearchSpaceError]:
    """Every reason ``parameters`` are not a point of the space (empty when they are): a form
    that showed only the first made a person fix a ten-parameter trial one field at a time."""
    if not isinstance(parameters, dict):
        return [SearchSpaceError((), f"expected a mapping of parameter name -> value, got {type(parameters).__name__}")]
    problems: list[SearchSpaceError] = []
    _encode_params(space.params, parameters, (), {}, problems)
    return problems


def _encode_params(
    params: tuple[Parameter, ...],
    given: dict[str, Any],
    path: tuple[str, ...],
    out: dict,
    problems: list[SearchSpaceError] | None = None,
) -> None:
    """``problems`` None: raise the first; a list: collect every one there."""

    def refuse(error: SearchSpaceError) -> None:
        if problems is None:
            raise error
        problems.append(error)

    known = {p.key for p in params}
    # No "_name" here either: a nested choice's own is taken off before its parameters are
    # checked, and one anywhere else let any value through (a 500-deep list broke every page).
    for key in sorted(set(given) - known, key=str):
        refuse(SearchSpaceError(path + (key[:60],), f"not in the search space; expected {', '.join(sorted(known))}"))
    for p in params:
        if p.key not in given:
            refuse(SearchSpaceError(path + (p.key,), f"missing: the search space has {p.type} {p.key!r}"))
            continue
        try:
            _encode_param(p, given[p.key], path + (p.key,), out, problems)
        except SearchSpaceError as error:
            refuse(error)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or _number(a) and _number(b) and float(a) == float(b)


def _encode_param(
    p: Parameter, value: Any, path: tuple[str, ...], out: dict, problems: list[SearchSpaceError] | None = None
) -> None:
    v = p.values
    if p.type == "choice":
        if isinstance(value, dict) and "_name" in value:
            matches = [i for i, o in enumerate(v) if isinstance(o, NestedOption) and _same(o.name, value["_name"])]
        else:
            matches = [i for i, o in enumerate(v) if not isinstance(o, NestedOption) and _same(o, value)]
        if not matches:
            shown = [o.name if isinstance(o, NestedOption) else o for o in v]
            raise SearchSpaceError(path, f"expected one of {shown!r}, got {_shown(value)}")
        index = matches[0]
        out[p.sampler_name] = v[index] if _is_plain_choice(v) else index
        option = v[index]
        if isinstance(option, NestedOption):
            rest = {k: x for k, x in value.items() if k != "_name"}
            for key, constant in option.constants:
                if not _same(rest.pop(key, None), constant):
                    raise SearchSpaceError(path + (key,), f"expected {constant!r} (a constant of {option.name!r})")
            _encode_params(option.params, rest, path, out, problems)
        return
    if not _number(value):
        raise SearchSpaceError(path, f"expected a number ({p.type}), got {_shown(value)}")
    x = float(value)
    if p.type == "randint":
        if not x.is_integer() or not v[0] <= x < v[1]:
            raise SearchSpaceError(path, f"expected a whole number in [{v[0]}, {v[1]}) (randint), got {_shown(value)}")
        out[p.sampler_name] = int(x)
        return
    if p.type in ("uniform", "quniform", "loguniform", "qloguniform"):
        if not v[0] <= x <= v[1]:
            raise SearchSpaceError(path, f"expected a number in [{v[0]:g}, {v[1]:g}] ({p.type}), got {_shown(value)}")
        if p.type in _Q_TYPES and _quantize(x, v[2], v[0], v[1]) != x:
            raise SearchSpaceError(
                path, f"expected a multiple of q={v[2]:g} in [{v[0]:g}, {v[1]:g}], got {_shown(value)}"
            )
        out[p.sampler_name] = x
        return
    if p.type == "lognormal":
        if x <= 0:
            raise SearchSpaceError(path, f"expected a positive number ({p.type}), got {_shown(value)}")
        point = math.log(x)
    elif p.type == "qlognormal":
        if x < 0 or _quantize(x, v[2]) != x:
            raise SearchSpaceError(
                path, f"expected a multiple of q={v[2]:g}, 0 or more ({p.type}), got {_shown(value)}"
            )
        point = math.log(x if x > 0 else v[2] / 4)  # 0 is what rounds every draw below q/2
    else:
        if p.type == "qnormal" and _quantize(x, v[2]) != x:
            raise SearchSpaceError(path, f"expected a multiple of q={v[2]:g}, got {_shown(value)}")
        point = x
    quantile = NormalDist(v[0], v[1]).cdf(point)
    if not _QUANTILE_EPS <= quantile <= 1 - _QUANTILE_EPS:
        raise SearchSpaceError(
            path, f"{_shown(value)} is too far from mu={v[0]:g} to be drawn ({p.type}, sigma={v[1]:g})"
        )
    out[p.sampler_name] = quantile


# --- grids ---------------------------------------------------------------------------
#
# A grid is never materialised: six randint [0, 1000] parameters make 10**18 points, and
# GridSearch only ever needs its size (the trial count) and point i (trial i). Every
# sequence below answers both from the parameters alone. The order is the one trialflow
# always used (the first parameter varies fastest), so trial i of a resumed experiment
# still gets point i.

#: Up to this many values a q-typed parameter is enumerated exactly (sorted, deduplicated),
#: as before; beyond it, values are computed per index.
_EXACT_Q_VALUES = 100_000


class GridSequence(Sequence):
    """A sized, indexable sequence whose size may exceed ``sys.maxsize``: use ``size``."""

    size: int

    def __len__(self) -> int:
        return self.size  # OverflowError past sys.maxsize: callers use .size

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self.at(i) for i in range(*index.indices(self.size))]
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError(f"grid point {index} of {self.size}")
        return self.at(index)

    def __iter__(self) -> Iterator[Any]:
        i = 0
        while i < self.size:
            yield self.at(i)
            i += 1

    def at(self, index: int) -> Any:
        raise NotImplementedError


class _Values(GridSequence):
    def __init__(self, values: Sequence[Any]):
        self.values = values
        self.size = len(values)

    def at(self, index: int) -> Any:
        return self.values[index]


def listed(values: Sequence[Any]) -> GridSequence:
    """Explicit points (BatchTuner's combinations) as a grid sequence."""
    return _Values(values)


class _QValues(GridSequence):
    """quniform / qloguniform: round(k * q) clipped to [low, high] for every k in reach."""

    def __init__(self, low: float, high: float, q: float):
        self.low, self.high, self.q = low, high, q
        self.first = math.floor(low / q)
        self.size = math.ceil(high / q) + 1 - self.first

    def at(self, index: int) -> Any:
        return _quantize((self.first + index) * self.q, self.q, self.low, self.high)


class _Concat(GridSequence):
    def __init__(self, parts: list[GridSequence]):
        self.parts = parts
        self.size = sum(part.size for part in parts)

    def at(self, index: int) -> Any:
        for part in self.parts:
            if index < part.size:
                return part.at(index)
            index -= part.size
        raise IndexError(index)


class _Nested(GridSequence):
    """One nested option of a choice: its ``_name``, constants, and a point of its own grid."""

    def __init__(self, option: NestedOption):
        self.option = option
        self.grid = Grid(option.params)
        self.size = self.grid.size

    def at(self, index: int) -> Any:
        return {"_name": self.option.name, **dict(self.option.constants), **self.grid.at(index)}


class Grid(GridSequence):
    """Every combination of ``params`` as dicts; point ``i`` by mixed radix, the first parameter
    varying fastest."""

    def __init__(self, params: tuple[Parameter, ...]):
        self.keys = [p.key for p in params]
        self.axes = [grid_values(p) for p in params]
        self.size = math.prod(axis.size for axis in self.axes)

    def at(self, index: int) -> dict[str, Any]:
        point = {}
        for key, axis in zip(self.keys, self.axes):
            index, offset = divmod(index, axis.size)
            point[key] = axis.at(offset)
        return point


def grid_values(p: Parameter) -> GridSequence:
    """The finite values of one parameter, or a SearchSpaceError saying why there are none."""
    v = p.values
    if p.type == "choice":
        parts: list[GridSequence] = []
        plain: list[Any] = []
        for option in v:
            if isinstance(option, NestedOption):
                if plain:
                    parts.append(_Values(plain))
                    plain = []
                parts.append(_Nested(option))
            else:
                plain.append(option)
        if plain:
            parts.append(_Values(plain))
        return parts[0] if len(parts) == 1 else _Concat(parts)
    if p.type == "randint":
        return _Values(range(v[0], v[1]))
    if p.type in {"quniform", "qloguniform"}:
        low, high, q = v
        lazy = _QValues(low, high, q)
        if lazy.size > _EXACT_Q_VALUES:
            return lazy
        return _Values(sorted({lazy.at(i) for i in range(lazy.size)}))
    raise SearchSpaceError(
        (p.key,),
        f"GridSearch needs a finite space, but {p.key!r} is {p.type}; use choice, randint, quniform or qloguniform",
    )
