"""An NNI experiment as NNI left it on disk: ``<id>/db/nni.sqlite``, read whole or refused.

NNI keeps an experiment in three tables (measured on nni 3.0's own output; NNI's DDL of
earlier versions has the same ones, TrialJobEvent without its ``message`` column before 2.x):
``ExperimentProfile`` (one row per revision: the config as JSON in ``params``, ``id``,
``startTime``/``endTime`` in epoch milliseconds), ``TrialJobEvent`` (a trial job's events:
``WAITING``/``RUNNING`` with ``data`` = ``{"parameter_id", "parameter_source", "parameters",
"parameter_index"}``, then its end status) and ``MetricData`` (``PERIODICAL`` and ``FINAL``
results; ``data`` is a JSON string holding the JSON of what the trial reported, and
``parameterId`` names the parameter set the trial reported for).

Parameters and results are paired by ``parameterId``, not by trial job: measured on nni 3.0's
local mode, the first two trials of an experiment reported under each other's parameter ids
(trial SGGoV's RUNNING event said parameter 0, x=0.26; it reported x=0.32 as an intermediate
result and 10*x=3.18 as its final one, under parameter id 1: it had run parameter 1). Pairing
by trial job, as NNI's own export does, attaches results to parameters that did not produce
them; the import keeps the pairs the trial itself reported and counts the jobs whose event said
otherwise.

Hostile databases are refused whole (NniHistoryError naming the file, the table and the rowid):
the file is opened read-only, its size and each text field are bounded before parsing, JSON is
parsed once per field, and a number that is not finite is kept as a failed result, never
crashing what reads it. Nothing of a refused database is returned: the import writes only from
a whole NniExperiment. No Airflow, no Optuna.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from trialflow.config.files import DuplicateJsonKey, refuse_duplicates

#: Larger than any NNI experiment seen (a 10,000-trial experiment with 100 results each is ~100 MB).
MAX_DATABASE_BYTES = 2 * 1024**3
#: A config, a parameter set or a reported result is far smaller.
MAX_FIELD_CHARS = 1024 * 1024
MAX_ROWS = 5_000_000
TABLES = ("ExperimentProfile", "TrialJobEvent", "MetricData")
#: The columns read, which every NNI version's tables have (TrialJobEvent.message is read when
#: there: NNI's DDL before it had none).
COLUMNS = {
    "ExperimentProfile": ("params", "id", "startTime", "endTime", "revision"),
    "TrialJobEvent": ("timestamp", "trialJobId", "event", "data", "sequenceId"),
    "MetricData": ("timestamp", "trialJobId", "parameterId", "type", "data"),
}
#: NNI's trial job statuses that end a trial.
ENDED = frozenset({"SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED", "EARLY_STOPPED"})


class NniHistoryError(ValueError):
    """An NNI experiment that cannot be imported (the message says where and why)."""


@dataclass
class NniTrial:
    """One trial job as NNI recorded it, with the parameter set its results belong to."""

    trial_job_id: str
    sequence_id: int | None
    parameter_id: int | None
    parameters: dict[str, Any] | None
    parameter_source: str | None
    status: str
    started: float | None
    ended: float | None
    intermediate: list[Any] = field(default_factory=list)
    final: Any = None
    #: The parameter id of the job's own RUNNING event, when its results named another one.
    event_parameter_id: int | None = None
    message: str | None = None
    #: The time of the job's last event or metric NNI recorded (its end when NNI stopped
    #: before the job reached one).
    last_seen: float | None = None


@dataclass(frozen=True)
class NniExperiment:
    """An NNI experiment, whole: its id, config (NNI's v2 keys, as NNI stored them), times and trials."""

    experiment_id: str
    config: dict[str, Any]
    started: float | None
    ended: float | None
    trials: tuple[NniTrial, ...]
    source: Path

    @property
    def swapped(self) -> int:
        """Trial jobs whose results named another parameter set than their RUNNING event."""
        return sum(1 for t in self.trials if t.event_parameter_id is not None)


def database_of(folder: Path) -> Path:
    """An NNI experiment folder's database (``<folder>/db/nni.sqlite``)."""
    return folder / "db" / "nni.sqlite"


def read_experiment(folder: str | Path) -> NniExperiment:
    """Read an NNI experiment folder (``~/nni-experiments/<id>``) whole, or raise NniHistoryError."""
    folder = Path(folder).expanduser()
    path = database_of(folder)
    if path.is_symlink() or not path.is_file():
        raise NniHistoryError(f"{path}: no NNI database here (expected an NNI experiment folder)")
    size = path.stat().st_size
    if size > MAX_DATABASE_BYTES:
        raise NniHistoryError(f"{path}: {size} bytes, more than the {MAX_DATABASE_BYTES} an import reads")
    try:
        # read-only and immutable: NNI's manager may still hold it; nothing here writes to it
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as exc:
        raise NniHistoryError(f"{path}: cannot be opened as SQLite ({exc})") from None
    try:
        return _read(conn, path)
    except sqlite3.DatabaseError as exc:
        raise NniHistoryError(f"{path}: not a readable NNI database ({exc})") from None
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, path: Path) -> NniExperiment:
    present = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [t for t in TABLES if t not in present]
    if missing:
        raise NniHistoryError(
            f"{path}: table {missing[0]} is missing (an NNI 2.x/3.0 database has {', '.join(TABLES)})"
        )
    for table in TABLES:
        columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        absent = [c for c in COLUMNS[table] if c not in columns]
        if absent:
            raise NniHistoryError(
                f"{path}: table {table} has no column {absent[0]} (an NNI 1.x-3.0 database has "
                f"{', '.join(COLUMNS[table])})"
            )
        (count,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        if count > MAX_ROWS:
            raise NniHistoryError(f"{path}: table {table} has {count} rows, more than {MAX_ROWS}")
    # NNI before 2.x wrote no TrialJobEvent.message (its DDL: timestamp .. sequenceId)
    has_message = "message" in {row[1] for row in conn.execute("PRAGMA table_info(TrialJobEvent)")}
    profile = conn.execute(
        "SELECT params, id, startTime, endTime FROM ExperimentProfile ORDER BY revision DESC LIMIT 1"
    ).fetchone()
    if profile is None:
        raise NniHistoryError(f"{path}: table ExperimentProfile is empty (no config)")
    config = json_value(profile[0], path, "ExperimentProfile.params")
    if not isinstance(config, dict):
        raise NniHistoryError(f"{path}: ExperimentProfile.params: expected the config as a JSON object")
    experiment_id = _text(profile[1], path, "ExperimentProfile.id", 64)
    trials: dict[str, NniTrial] = {}
    parameter_sets: dict[int, tuple[dict[str, Any], str | None]] = {}
    events = conn.execute(
        f"SELECT rowid, timestamp, trialJobId, event, data, sequenceId, {'message' if has_message else 'NULL'} "
        "FROM TrialJobEvent ORDER BY timestamp, rowid"
    )
    for row, stamp, job, event, data, sequence, message in events:
        where = f"TrialJobEvent rowid {row}"
        job = _text(job, path, f"{where}.trialJobId", 64)
        event = _text(event, path, f"{where}.event", 32)
        trial = trials.setdefault(job, NniTrial(job, None, None, None, None, "WAITING", None, None))
        if isinstance(sequence, int) and not isinstance(sequence, bool):
            trial.sequence_id = sequence
        if data:
            assigned = json_value(data, path, f"{where}.data")
            if isinstance(assigned, dict) and isinstance(assigned.get("parameters"), dict):
                pid = _int(assigned.get("parameter_id"), path, f"{where}.data.parameter_id")
                source = assigned.get("parameter_source")
                trial.parameter_id, trial.parameters = pid, assigned["parameters"]
                trial.parameter_source = source if isinstance(source, str) else None
                if pid is not None:
                    parameter_sets[pid] = (assigned["parameters"], trial.parameter_source)
        seen = _seconds(stamp)
        if seen is not None:
            trial.last_seen = max(trial.last_seen or seen, seen)
        if event == "RUNNING" and trial.started is None:
            trial.started = _seconds(stamp)
        if event in ENDED:
            trial.status, trial.ended = event, _seconds(stamp)
            trial.message = _text(message, path, f"{where}.message", 4096) if message else None
        elif event in ("WAITING", "RUNNING", "UNKNOWN") and trial.status not in ENDED:
            trial.status = event
    metrics = conn.execute(
        "SELECT rowid, trialJobId, parameterId, type, data, timestamp FROM MetricData ORDER BY timestamp, rowid"
    )
    for row, job, parameter_id, kind, data, stamp in metrics:
        where = f"MetricData rowid {row}"
        job = _text(job, path, f"{where}.trialJobId", 64)
        reporter = trials.get(job)
        if reporter is None:
            raise NniHistoryError(
                f"{path}: {where}: trial job {job!r} has no event (not an NNI database as NNI writes it)"
            )
        trial = reporter
        seen = _seconds(stamp)
        if seen is not None:
            trial.last_seen = max(trial.last_seen or seen, seen)
        value = _metric(data, path, where)
        pid = _int(parameter_id, path, f"{where}.parameterId")
        if pid is not None and pid != trial.parameter_id and pid in parameter_sets:
            # the results belong to the parameter set the trial reported for (see the module doc)
            trial.event_parameter_id = (
                trial.event_parameter_id if trial.event_parameter_id is not None else trial.parameter_id
            )
            trial.parameter_id = pid
            trial.parameters, trial.parameter_source = parameter_sets[pid]
        if kind == "FINAL":
            if trial.final is None:  # the first final result counts, as in NNI
                trial.final = value
        elif kind == "PERIODICAL":
            trial.intermediate.append(value)
    started = _seconds(profile[2])
    ended = _seconds(profile[3])
    ordered = sorted(trials.values(), key=lambda t: (t.sequence_id is None, t.sequence_id or 0, t.started or 0))
    return NniExperiment(experiment_id, config, started, ended, tuple(ordered), path)


def _text(value: Any, path: Path, where: str, limit: int) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        shown = f"{len(value)} characters" if isinstance(value, str) else type(value).__name__
        raise NniHistoryError(f"{path}: {where}: expected text of 1..{limit} characters, got {shown}")
    return value


def loads_unique(text: str | bytes) -> Any:
    """JSON text with every object's keys checked once each (the config loader refuses YAML's
    duplicate keys the same way): a forged or hand-edited record is named, not half-read."""
    return json.loads(text, object_pairs_hook=refuse_duplicates)


def json_value(value: Any, path: Path, where: str, limit: int | None = MAX_FIELD_CHARS) -> Any:
    """A JSON field of NNI's history (its database's or an exported file's), read whole or
    refused with the file and the field: bounded to ``limit`` characters before it is parsed
    (None: the caller bounded it, as a file's size is), each object's keys once. The error
    names a position or a cause, never the text."""
    if not isinstance(value, str | bytes):
        raise NniHistoryError(f"{path}: {where}: expected JSON text, got {type(value).__name__}")
    if limit is not None and len(value) > limit:
        raise NniHistoryError(f"{path}: {where}: {len(value)} characters, more than {limit}")
    try:
        return loads_unique(value)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, DuplicateJsonKey):
            reason = f"{exc}: NNI writes each key once"
        elif isinstance(exc, json.JSONDecodeError):
            reason = exc.msg
        else:
            reason = "nested too deep" if isinstance(exc, RecursionError) else type(exc).__name__
        raise NniHistoryError(f"{path}: {where}: not valid JSON ({reason})") from None


def _int(value: Any, path: Path, where: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise NniHistoryError(f"{path}: {where}: expected a whole number, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    raise NniHistoryError(f"{path}: {where}: expected a whole number, got {str(value)[:40]!r}")


#: Times NNI wrote are epoch milliseconds; one outside 1970..9999 is no time (it is dropped,
#: not passed on to a datetime that cannot hold it).
_LAST_MILLISECOND = 253_402_300_799_000


def _seconds(milliseconds: Any) -> float | None:
    if isinstance(milliseconds, int | float) and not isinstance(milliseconds, bool) and math.isfinite(milliseconds):
        if 0 <= milliseconds <= _LAST_MILLISECOND:
            return float(milliseconds) / 1000.0
    return None


def _metric(data: Any, path: Path, where: str) -> Any:
    """What the trial reported: MetricData.data is JSON text of JSON text (NNI double-encodes)."""
    value = json_value(data, path, f"{where}.data")
    if isinstance(value, str):
        value = json_value(value, path, f"{where}.data (inner)")
    return value
