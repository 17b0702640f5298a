"""Where a parameter column (flatten_parameters' name) sits in a trial's nested parameters, and
the value the trial table sorts it by (trialflow.queries.kept_table keeps it per settled trial)."""

from __future__ import annotations

import math
from typing import Any


def parameter_paths(name: str) -> list[tuple[str, ...]]:
    """Where a parameter column (flatten_parameters' name) may sit in NNI's nested parameters:
    ``loss/alpha`` is ``{"loss": {"_name": ..., "alpha": ...}}``, and a nested choice's own
    column (``loss``) sorts by its ``_name``. A name may itself contain '/', so every split is
    a candidate (the name whole first); past four slashes only the whole and the full split."""
    parts = name.split("/")
    if len(parts) > 5:
        splits = [(name,), tuple(parts)]
    else:
        splits = []
        for mask in range(2 ** (len(parts) - 1)):
            path, current = [], parts[0]
            for i, part in enumerate(parts[1:]):
                if mask >> i & 1:
                    path.append(current)
                    current = part
                else:
                    current += "/" + part
            splits.append((*path, current))
        splits.sort(key=len)
    return [p for split in splits for p in (split, (*split, "_name"))]


def sort_value(parameters: Any, name: str) -> tuple[float | None, str | None]:
    """The parameter column ``name`` of a trial's parameters as the trial table sorts it: the
    first of parameter_paths that leads to a number gives (the number, None), to a string or a
    boolean (None, its text); an object or a list is no value and the next path is tried.

    Read in Python from the stored JSON, the same on every database (in SQL, SQLite's JSON
    functions refused a parameter stored as NaN, a malformed-JSON error for the whole table, and
    the two databases wrote a boolean's text differently). A number past a float is an infinity;
    NaN, which no order holds, sorts as its text."""
    for path in parameter_paths(name):
        value = parameters
        for part in path:
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            if isinstance(value, bool):
                return None, "true" if value else "false"
            if isinstance(value, int):
                try:
                    return float(value), None
                except OverflowError:
                    return (math.inf if value > 0 else -math.inf), None
            if isinstance(value, float):
                return (None, "NaN") if math.isnan(value) else (value, None)
            if isinstance(value, str):
                return None, value
    return None, None
