"""Where a parameter column's value sits in a trial's stored parameters, as SQL: what the trial
table sorts by (trialflow.queries.kept_table reads it once per settled trial)."""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from trialflow.queries.tables import dialect_of


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


def json_field(engine: Engine, column: sa.ColumnElement, key: str) -> tuple[sa.ColumnElement, sa.ColumnElement]:
    """(numeric, text) expressions for the parameter column ``key`` inside ``column``'s JSON
    (nested choices included, see parameter_paths), for sorting; keys are bound values, never
    SQL. A path that leads to an object or a list is no value: the next candidate is tried."""
    numerics: list[sa.ColumnElement] = []
    texts: list[sa.ColumnElement] = []
    for path in parameter_paths(key):
        if dialect_of(engine) == "postgresql":
            from sqlalchemy.dialects import postgresql

            document = sa.cast(column, postgresql.JSON)[path]
            kind = sa.func.json_typeof(document)
            text = document.as_string()
            numerics.append(sa.case((kind == "number", sa.cast(text, sa.Float)), else_=None))
            texts.append(sa.case((kind.in_(["number", "string", "boolean"]), text), else_=None))
            continue
        where = "$" + "".join("." + json.dumps(part) for part in path)  # $."a"."b": any characters
        bound = sa.bindparam(None, where, type_=sa.String)
        kind = sa.func.json_type(column, bound)
        extracted = sa.func.json_extract(column, bound)
        numerics.append(sa.case((kind.in_(["integer", "real"]), extracted), else_=None))
        texts.append(
            sa.case((kind.in_(["integer", "real", "text", "true", "false"]), sa.cast(extracted, sa.Text)), else_=None)
        )
    return sa.func.coalesce(*numerics, None), sa.func.coalesce(*texts, None)
