"""NNI's result files, read whole or refused: ``nnictl experiment export`` (JSON and CSV) and
the "import data" JSON that ``nnictl experiment import`` fed a tuner. No Airflow, no Optuna.

Neither file holds a config, so the experiment's NNI config comes beside it (its search space
types the CSV's text and checks every point; its tuner is the imported experiment's). What
each holds (nni 3.0's nnictl_utils.export_trials_data and nniDataStore.exportTrialHpConfigs):

* export JSON: ``[{"parameter": {...}, "value": "<JSON text of the final result>",
  "trialJobId": "...", "intermediate": [...]?}, ...]``;
* "import data" JSON: ``[{"parameter": {...}, "value": 0.93 or {"default": 0.93, ...}}, ...]``;
* export CSV: one column per top-level parameter (Python's ``str`` of its value), ``reward``
  (a number final) or the final dict's keys (``default``, ...), ``trialJobId``, and with
  ``--intermediate`` an ``intermediate`` column ``[v1,v2,...]``; columns in any order.

Measured on nni 3.0's own exports (tests/nni_history/test_files.py reads them): the
intermediate list holds the final result too (NNI lists every metric record of the job, and in
the REST server's order: its ``groupby_trial_id`` discards its own ``sorted``, so the final
record is usually last but not always; CI saw it second of four), which is dropped here wherever
it stands; and the export pairs a job's parameters with its results by trial job, which
is wrong for the jobs NNI's local mode ran under another parameter id (trialflow.nni_history.
database): import the experiment's folder where it is at hand.

Every record is one succeeded trial (NNI exports only trials with a final result). Hostile
files are refused naming the file, the record (or CSV line) and the key: sizes and counts are
bounded before parsing, JSON is parsed once per field, CSV cells are typed by the search space
(never evaluated), and a nested choice, which the CSV writes as a Python repr, is refused with
the way out (the JSON export).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from trialflow.config.search_space import NestedOption, Parameter, SearchSpaceError, parse_search_space
from trialflow.nni_history.database import NniExperiment, NniHistoryError, NniTrial, json_value

#: An export of 100,000 trials with ten parameters is ~30 MB.
MAX_FILE_BYTES = 256 * 1024**2
MAX_RECORDS = 1_000_000
#: A parameter value or a number in a CSV cell is short; a final dict or parameter set is bounded too.
MAX_CELL_CHARS = 4096
#: The CSV columns that are not parameters.
_JOB, _REWARD, _INTERMEDIATE = "trialJobId", "reward", "intermediate"


def read_result_file(path: str | Path, config: dict[str, Any]) -> NniExperiment:
    """Read an NNI export (``.json``/``.csv``) or "import data" JSON file as an experiment with
    ``config`` (NNI's v2 keys: its searchSpace and tuner), or raise NniHistoryError."""
    path = Path(path).expanduser()
    if path.is_symlink() or not path.is_file():
        raise NniHistoryError(f"{path}: no such file (expected an NNI export or import-data file)")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise NniHistoryError(f"{path}: {size} bytes, more than the {MAX_FILE_BYTES} an import reads")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise NniHistoryError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not isinstance(config.get("searchSpace"), dict):
        raise NniHistoryError(f"{path}: the experiment's config has no searchSpace to read the results against")
    try:
        space = parse_search_space(config["searchSpace"])
    except SearchSpaceError as exc:
        raise NniHistoryError(f"{path}: the config's searchSpace: {exc.message}") from None
    first = text.lstrip()[:1]
    if path.suffix.lower() == ".csv" or (path.suffix.lower() != ".json" and first not in ("[", "")):
        trials = _csv_trials(text, path, space.params)
    else:
        trials = _json_trials(text, path)
    if not trials:
        raise NniHistoryError(f"{path}: no result in it (an NNI export lists the trials with a final result)")
    name = path.stem[:64] or "export"
    return NniExperiment(name, dict(config), None, None, tuple(trials), path)


def _json_trials(text: str, path: Path) -> list[NniTrial]:
    records = json_value(text, path, "the file", limit=None)  # bounded by the file's size
    if not isinstance(records, list):
        raise NniHistoryError(f"{path}: expected a JSON list of {{parameter, value}} records, got {_kind(records)}")
    if len(records) > MAX_RECORDS:
        raise NniHistoryError(f"{path}: {len(records)} records, more than {MAX_RECORDS}")
    trials = []
    for n, record in enumerate(records):
        where = f"record {n}"
        if isinstance(record, str):  # NNI's tuners accepted records as JSON text too
            record = json_value(_bounded(record, path, where, MAX_CELL_CHARS * 16), path, where)
        if not isinstance(record, dict):
            raise NniHistoryError(f"{path}: {where}: expected an object with parameter and value, got {_kind(record)}")
        parameters = record.get("parameter")
        if not isinstance(parameters, dict):
            raise NniHistoryError(f"{path}: {where}.parameter: expected an object, got {_kind(parameters)}")
        value = record.get("value")
        if isinstance(value, str):  # the export's value is the JSON text of the final result
            value = json_value(_bounded(value, path, f"{where}.value", MAX_CELL_CHARS), path, f"{where}.value")
        _check_final(value, path, f"{where}.value")
        intermediate = record.get("intermediate", [])
        if not isinstance(intermediate, list):
            raise NniHistoryError(f"{path}: {where}.intermediate: expected a list, got {_kind(intermediate)}")
        job = record.get("trialJobId")
        job = _bounded(job, path, f"{where}.trialJobId", 64) if job is not None else f"record-{n}"
        steps = [json_value(v, path, f"{where}.intermediate") if isinstance(v, str) else v for v in intermediate]
        trials.append(_trial(job, n, parameters, value, steps))
    return trials


def _csv_trials(text: str, path: Path, params: tuple[Parameter, ...]) -> list[NniTrial]:
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise NniHistoryError(f"{path}: not a CSV file NNI wrote ({exc})") from None
    if len(rows) > MAX_RECORDS:
        raise NniHistoryError(f"{path}: {len(rows)} rows, more than {MAX_RECORDS}")
    by_name = {p.key: p for p in params}
    trials = []
    for n, row in enumerate(rows):
        where = f"line {n + 2}"  # the header is line 1
        if None in row:
            raise NniHistoryError(f"{path}: {where}: more cells than the header has columns")
        parameters: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for column, cell in row.items():
            if column in (_JOB, _INTERMEDIATE):
                continue
            cell = _bounded(cell, path, f"{where}, column {column!r}", MAX_CELL_CHARS, empty=True)
            if column in by_name:
                parameters[column] = _typed(by_name[column], cell, path, f"{where}, column {column!r}")
            elif cell != "":
                extra[column] = _number(cell, path, f"{where}, column {column!r}")
        missing = [name for name in by_name if name not in parameters]
        if missing:
            raise NniHistoryError(f"{path}: no column for parameter {missing[0]!r} of the search space")
        value: Any = extra.pop(_REWARD, None)
        if value is None:
            if "default" not in extra:
                raise NniHistoryError(f"{path}: {where}: no result (expected a 'reward' or 'default' column)")
            value = extra
        steps_text = row.get(_INTERMEDIATE) or ""
        steps = (
            json_value(
                _bounded(steps_text, path, f"{where}, column 'intermediate'", MAX_CELL_CHARS * 16),
                path,
                f"{where}, column 'intermediate'",
            )
            if steps_text
            else []
        )
        if not isinstance(steps, list):
            raise NniHistoryError(f"{path}: {where}, column 'intermediate': expected [v1,v2,...]")
        job = row.get(_JOB) or f"row-{n}"
        trials.append(_trial(_bounded(job, path, f"{where}, column 'trialJobId'", 64), n, parameters, value, steps))
    return trials


def _trial(job: str, n: int, parameters: dict[str, Any], value: Any, steps: list[Any]) -> NniTrial:
    # measured (nni 3.0): the export's list holds the FINAL record too, at no fixed place; the
    # last record equal to the final goes (an equal intermediate result left in its stead is the
    # same value, one place off, which is all the export says)
    for i in range(len(steps) - 1, -1, -1):
        if steps[i] == value:
            steps = steps[:i] + steps[i + 1 :]
            break
    return NniTrial(job, n, n, parameters, "imported", "SUCCEEDED", None, None, list(steps), value)


def _typed(param: Parameter, cell: str, path: Path, where: str) -> Any:
    """A CSV cell (Python's ``str`` of the value NNI exported) as the parameter's value."""
    if param.type == "choice":
        if param.is_nested:
            raise NniHistoryError(
                f"{path}: {where}: a nested choice is written as Python text in NNI's CSV and is not "
                "read back; import the JSON export (nnictl experiment export --type json) instead"
            )
        for option in param.values:
            if not isinstance(option, NestedOption) and str(option) == cell:
                return option
        raise NniHistoryError(f"{path}: {where}: {cell[:40]!r} is none of the choices {list(param.values)[:10]}")
    number = _number(cell, path, where)
    if param.type == "randint":
        if number != int(number):
            raise NniHistoryError(f"{path}: {where}: expected a whole number (randint), got {cell[:40]!r}")
        return int(number)
    return number


def _number(cell: str, path: Path, where: str) -> float:
    try:
        number = float(cell)
    except ValueError:
        raise NniHistoryError(f"{path}: {where}: expected a number, got {cell[:40]!r}") from None
    if not math.isfinite(number):
        raise NniHistoryError(f"{path}: {where}: expected a finite number, got {cell[:40]!r}")
    return number


def _check_final(value: Any, path: Path, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float | dict):
        raise NniHistoryError(f"{path}: {where}: expected a number or an object with 'default', got {_kind(value)}")
    if isinstance(value, dict) and "default" not in value:
        raise NniHistoryError(f"{path}: {where}: an object result needs a 'default' key (the metric)")


def _bounded(value: Any, path: Path, where: str, limit: int, empty: bool = False) -> str:
    if not isinstance(value, str) or len(value) > limit or (not value and not empty):
        shown = f"{len(value)} characters" if isinstance(value, str) else _kind(value)
        raise NniHistoryError(f"{path}: {where}: expected text of {0 if empty else 1}..{limit} characters, got {shown}")
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
