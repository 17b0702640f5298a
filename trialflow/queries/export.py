"""Every trial as CSV (safe to open in a spreadsheet) or JSON (the values exactly)."""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from trialflow.queries.importance import flatten_parameters
from trialflow.queries.objectives import objectives_of
from trialflow.queries.tables import (
    INTERMEDIATE,
    TRIAL_ATTRS,
    TRIAL_INDEX,
    UnknownExperiment,
    decoded,
    storage_id_of,
    study_id_of,
)
from trialflow.queries.trials import iter_trial_rows

_FORMULA_START = frozenset("=+-@")


def spreadsheet_safe(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula gets a leading apostrophe (OWASP's CSV
    injection advice); numbers stay numbers.

    Spreadsheets skip leading spaces and control characters before a formula and read the
    full-width forms (``＝``, ``＋``) as the ASCII ones, so a cell that starts with any
    whitespace or control character is guarded, and so is one whose first character is a
    formula start once normalised (NFKC)."""
    if not isinstance(value, str) or not value:
        return value
    first = value[0]
    if (
        first.isspace()
        or unicodedata.category(first) in ("Cc", "Cf")
        or unicodedata.normalize("NFKC", first)[:1] in _FORMULA_START
    ):
        return "'" + value
    return value


def parameter_names(engine: Engine, experiment_id: str) -> list[str]:
    """Every flattened parameter name any trial has, sorted: the export's columns, known before
    its first row (one streamed pass that keeps the names only)."""
    names: set[str] = set()
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        query = (
            sa.select(TRIAL_ATTRS.c.value_json)
            .select_from(TRIAL_INDEX.join(TRIAL_ATTRS, TRIAL_ATTRS.c.trial_id == TRIAL_INDEX.c.trial_id))
            .where(TRIAL_INDEX.c.study_id == sid, TRIAL_ATTRS.c.key == "parameters")
        )
        for (raw,) in conn.execution_options(yield_per=2000).execute(query):
            names.update(flatten_parameters(decoded(raw) or {}))
    return sorted(names)


def export_columns(engine: Engine, experiment_id: str) -> tuple[list[str], list[str], list[str]]:
    """(columns, parameter names, objective names) of the export."""
    params = parameter_names(engine, experiment_id)
    names = [o["metric"] for o in objectives_of(engine, experiment_id).objectives]
    columns = [
        "trial_index",
        "trial_id",
        "status",
        "parameter_source",
        "added_by",
        "metric",
        *(f"objective:{n}" for n in names),
        *(["pareto"] if names else []),
        "final",
        "duration_s",
        "platform",
        "host",
        "intermediate_count",
        "message",
    ] + [f"param:{p}" for p in params]
    return columns, params, names


def _record(r: dict[str, Any], params: list[str], names: list[str]) -> dict[str, Any]:
    record = {
        "trial_index": r["trial_index"],
        "trial_id": r["trial_id"],
        "status": r["status"],
        "parameter_source": r["parameter_source"],
        "added_by": r["added_by"],
        "metric": r["metric"],
        "final": r["final"] if not isinstance(r["final"], (dict, list)) else json.dumps(r["final"], sort_keys=True),
        "duration_s": None if r["duration"] is None else round(r["duration"], 3),
        "platform": r["platform"],
        "host": r["host"],
        "intermediate_count": r["intermediate_count"],
        "message": r["message"],
    }
    if names:  # several objectives: a column each, and whether the trial is in the Pareto set
        values = r.get("values") or {}
        record.update({f"objective:{n}": values.get(n) for n in names})
        record["pareto"] = bool(r.get("pareto"))
    flat = flatten_parameters(r["parameters"])
    record.update({f"param:{p}": flat.get(p) for p in params})
    return record


def export_rows(engine: Engine, experiment_id: str) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """(columns, rows) of every trial, parameters flattened into columns; the rows are streamed
    from the database, so an export of 20,000 trials holds a chunk of them at a time."""
    columns, params, names = export_columns(engine, experiment_id)
    return columns, (_record(r, params, names) for r in iter_trial_rows(engine, experiment_id))


def iter_csv(engine: Engine, experiment_id: str, rows_per_chunk: int = 500) -> Iterator[str]:
    """The CSV export in chunks of text (header first); an unknown experiment raises here."""
    columns, rows = export_rows(engine, experiment_id)
    return _csv_chunks(columns, rows, rows_per_chunk)


def _csv_chunks(columns: list[str], rows: Iterator[dict[str, Any]], rows_per_chunk: int) -> Iterator[str]:
    # Every text cell quoted: a value with a carriage return (not this file's line end) is
    # otherwise written bare, and a spreadsheet starts a new row there.
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writeheader()
    for i, row in enumerate(rows, 1):
        writer.writerow({k: spreadsheet_safe(v) for k, v in row.items()})
        if i % rows_per_chunk == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def export_csv(engine: Engine, experiment_id: str) -> str:
    return "".join(iter_csv(engine, experiment_id))


def iter_json(engine: Engine, experiment_id: str, rows_per_chunk: int = 500) -> Iterator[str]:
    """The JSON export (a list of every trial row) in chunks of text: the document
    ``json.dumps(export_json(...))`` gives, without holding it; an unknown experiment raises here."""
    return _json_chunks(iter_trial_rows(engine, experiment_id), rows_per_chunk)


def _json_chunks(rows: Iterator[dict[str, Any]], rows_per_chunk: int) -> Iterator[str]:
    parts = ["["]
    for i, row in enumerate(rows):
        parts.append(("," if i else "") + json.dumps(row, ensure_ascii=False, allow_nan=False, separators=(",", ":")))
        if len(parts) >= rows_per_chunk:
            yield "".join(parts)
            parts = []
    parts.append("]")
    yield "".join(parts)


def export_json(engine: Engine, experiment_id: str) -> list[dict[str, Any]]:
    """Trials as JSON, parameters in NNI's shape, every value exactly as stored: JSON is read
    by programs, and a spreadsheet guard would change the data ("=1+1" is a valid choice)."""
    return list(iter_trial_rows(engine, experiment_id))


def iter_intermediate_csv(engine: Engine, experiment_id: str, trial_index: int) -> Iterator[str]:
    """Every intermediate result of one trial as CSV (step, value), streamed: the page draws a
    thinned curve, this keeps every point. An unknown experiment or trial raises here."""
    with engine.connect() as conn:
        storage_id = storage_id_of(conn, experiment_id, trial_index)
    if storage_id is None:
        raise UnknownExperiment(f"{experiment_id} trial {trial_index}")
    return _points_csv(engine, storage_id)


#: Optuna keeps a non-finite intermediate value as NULL and says which in a type column.
_NOT_FINITE = {"INF_POS": "inf", "INF_NEG": "-inf", "NAN": "nan"}


def _points_csv(engine: Engine, storage_id: int, rows_per_chunk: int = 10_000) -> Iterator[str]:
    query = (
        sa.select(
            INTERMEDIATE.c.step,
            INTERMEDIATE.c.intermediate_value,
            sa.cast(INTERMEDIATE.c.intermediate_value_type, sa.String(7)),  # its name
        )
        .where(INTERMEDIATE.c.trial_id == storage_id)
        .order_by(INTERMEDIATE.c.step)
    )
    yield "step,value\n"
    with engine.connect() as conn:
        result = conn.execution_options(yield_per=rows_per_chunk).execute(query)
        for rows in result.partitions():
            yield "".join(
                f"{step},{_NOT_FINITE.get(kind, '') if value is None else repr(float(value))}\n"
                for step, value, kind in rows
            )
