"""Every trial as CSV (safe to open in a spreadsheet) or JSON (the values exactly)."""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from typing import Any

from sqlalchemy.engine import Engine

from trialflow.queries.importance import flatten_parameters
from trialflow.queries.objectives import objectives_of
from trialflow.queries.tables import MAX_PAGE
from trialflow.queries.trials import trials_page

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


def _all_rows(engine: Engine, experiment_id: str) -> list[dict[str, Any]]:
    """Every trial row, a page at a time (the table's own query, so exports match the pages)."""
    rows: list[dict[str, Any]] = []
    offset, total = 0, 1
    while offset < total:
        page = trials_page(engine, experiment_id, limit=MAX_PAGE, offset=offset)
        total = page["total"]
        rows += page["rows"]
        offset += MAX_PAGE
    return rows


def export_rows(engine: Engine, experiment_id: str) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows) of every trial, parameters flattened into columns."""
    rows = _all_rows(engine, experiment_id)
    flat = [flatten_parameters(r["parameters"]) for r in rows]
    params = sorted({k for f in flat for k in f})
    names = [o["metric"] for o in objectives_of(engine, experiment_id).objectives]
    columns = [
        "trial_index",
        "trial_id",
        "status",
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
    out = []
    for r, f in zip(rows, flat):
        record = {
            "trial_index": r["trial_index"],
            "trial_id": r["trial_id"],
            "status": r["status"],
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
        record.update({f"param:{p}": f.get(p) for p in params})
        out.append(record)
    return columns, out


def export_csv(engine: Engine, experiment_id: str) -> str:
    columns, rows = export_rows(engine, experiment_id)
    buffer = io.StringIO()
    # Every text cell quoted: a value with a carriage return (not this file's line end) is
    # otherwise written bare, and a spreadsheet starts a new row there.
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: spreadsheet_safe(v) for k, v in row.items()})
    return buffer.getvalue()


def export_json(engine: Engine, experiment_id: str) -> list[dict[str, Any]]:
    """Trials as JSON, parameters in NNI's shape, every value exactly as stored: JSON is read
    by programs, and a spreadsheet guard would change the data ("=1+1" is a valid choice)."""
    return _all_rows(engine, experiment_id)
