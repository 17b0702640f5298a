"""NNI's trial file protocol, byte for byte, both directions.

Parameters go *to* the trial in ``$NNI_SYS_DIR/parameter.cfg``; metrics come
*back* either framed in ``$NNI_SYS_DIR/.nni/metrics`` (``ME%06d`` + JSON line,
the length counting bytes) or as ``NNISDK_MEb'<json>'`` lines on stdout. The
readers are incremental: they take bytes from a cursor and return how many they
consumed, keeping an incomplete tail for the next read, so a poller never
re-reads or half-reads a record. Standard library only: trial processes import
this through ``trialflow.trial``.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trialflow.trial.wire import (  # noqa: F401  (re-exported: the protocol in one place)
    CHECKPOINT_KIND,
    MAX_RECORD_BYTES,
    METRICS_FILE,
    PARAMETER_FILE,
    STATE_FILE,
    checkpoint_folder,
    dumps_value,
    frame,
    metric_record,
    stdout_line,
)

_FRAME_HEADER = 8  # b"ME" + 6 digits
_STDOUT_LINE = re.compile(rb"NNISDK_MEb'(.*)'\s*$")


@dataclass(frozen=True)
class Metric:
    """One reported result: ``type`` is PERIODICAL (intermediate) or FINAL."""

    type: str
    sequence: int
    value: Any
    parameter_id: Any = None
    trial_job_id: str | None = None

    @property
    def is_final(self) -> bool:
        return self.type == "FINAL"

    @property
    def is_checkpoint(self) -> bool:
        """A checkpoint saved at step ``sequence`` (its folder in ``value``), not a result."""
        return self.type == CHECKPOINT_KIND


#: parameter.cfg's ``parameter_source``: the tuner chose the parameters, or a person did (NNI
#: wrote ``customized`` for a trial added with chosen parameters).
ALGORITHM = "algorithm"
CUSTOMIZED = "customized"


def parameter_text(parameter_id: Any, parameters: dict[str, Any], index: int = 0, source: str = ALGORITHM) -> str:
    """parameter.cfg's content, in nni's format."""
    return json.dumps(
        {
            "parameter_id": parameter_id,
            "parameter_source": source,
            "parameters": parameters,
            "parameter_index": index,
        }
    )


def write_parameter_file(
    sys_dir: str | os.PathLike[str],
    parameter_id: Any,
    parameters: dict[str, Any],
    index: int = 0,
    source: str = ALGORITHM,
) -> Path:
    """Write parameter.cfg atomically: nni's SDK polls until the file is non-empty, so it must
    never see a half-written file."""
    path = Path(sys_dir) / PARAMETER_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(parameter_text(parameter_id, parameters, index, source), encoding="utf-8")
    os.replace(tmp, path)
    return path


class MetricFormatError(ValueError):
    """One record that is not an NNI metric: it is skipped, the rest is read."""


#: Sequences are Optuna steps, stored as 32-bit integers on some databases.
MAX_SEQUENCE = 2**31 - 1
#: No metric line is longer than NNI's record limit plus its ``NNISDK_MEb'...'`` frame: the
#: unfinished tail of a longer line cannot be one, and is skipped instead of waited for.
MAX_STDOUT_LINE = MAX_RECORD_BYTES + 64
_FRAME_START = re.compile(rb"ME\d{6}")


@dataclass(frozen=True)
class MetricsRead:
    """What one read of new bytes found.

    ``consumed`` bytes are done with (the cursor moves by it); ``skipped`` says why each
    malformed record or over-long line was passed over (the good ones around it are kept);
    ``in_long_line`` is true when the read ended inside a line too long to be a metric, whose
    rest the next read skips.
    """

    metrics: list[Metric]
    consumed: int
    skipped: list[str]
    in_long_line: bool = False


def _preview(raw: bytes) -> str:
    return repr(raw[:80]) + ("..." if len(raw) > 80 else "")


def read_framed(data: bytes, *, final: bool = False) -> MetricsRead:
    """Parse complete ``ME%06d`` frames from ``data``. Garbage between frames is skipped up to
    the next frame header; an incomplete tail waits for the next read, unless ``final`` (the
    trial has ended: nothing more will come, so the tail is skipped too)."""
    metrics: list[Metric] = []
    skipped: list[str] = []
    pos = 0
    while len(data) - pos >= _FRAME_HEADER or (final and pos < len(data)):
        header = data[pos : pos + _FRAME_HEADER]
        end = pos + _FRAME_HEADER + int(header[2:]) if _FRAME_START.fullmatch(header) else None
        if end is None or (end > len(data) and final):
            found = _FRAME_START.search(data, pos + 1)
            stop = found.start() if found else (len(data) if final else max(pos + 1, len(data) - _FRAME_HEADER + 1))
            skipped.append(f"bytes that are not a metric frame at offset {pos}: {_preview(data[pos:stop])}")
            pos = stop
            continue
        if end > len(data):
            break  # incomplete tail: keep it for the next read
        try:
            metrics.append(parse_record(data[pos + _FRAME_HEADER : end]))
        except MetricFormatError as exc:
            skipped.append(str(exc))
        pos = end
    return MetricsRead(metrics, pos, skipped)


def read_stdout_lines(data: bytes, *, in_long_line: bool = False, final: bool = False) -> MetricsRead:
    """Parse ``NNISDK_MEb'...'`` lines from the complete lines of ``data`` (other lines are the
    trial's own output). A partial last line waits for the next read, unless it is already
    longer than any metric line (skipped, and its rest with it) or ``final``."""
    metrics: list[Metric] = []
    skipped: list[str] = []
    start = 0
    if in_long_line:
        newline = data.find(b"\n")
        if newline < 0:
            return MetricsRead([], len(data), [], bool(data) or in_long_line)
        start = newline + 1
    end = data.rfind(b"\n") + 1
    if end < start:
        end = start
    lines = data[start:end].splitlines()
    tail = data[end:]
    long_tail = len(tail) > MAX_STDOUT_LINE
    if tail and final and not long_tail:
        lines.append(tail)
        end = len(data)
    for line in lines:
        match = _STDOUT_LINE.search(line)
        if match:
            try:
                metrics.append(parse_record(match.group(1)))
            except MetricFormatError as exc:
                skipped.append(str(exc))
    if long_tail:
        skipped.append(f"an output line longer than {MAX_STDOUT_LINE} bytes (not a metric line): {_preview(tail)}")
        return MetricsRead(metrics, len(data), skipped, not final)
    return MetricsRead(metrics, end, skipped)


_KINDS = ("PERIODICAL", "FINAL", CHECKPOINT_KIND)


def parse_record(raw: bytes) -> Metric:
    """One metric record; MetricFormatError (saying what was wrong) for anything else."""
    try:
        obj = json.loads(raw.decode("utf-8"))
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        value = obj["value"]
        if isinstance(value, str):
            value = json.loads(value)  # the metric is a JSON string inside the JSON object
        kind = obj.get("type", "PERIODICAL")
        if kind not in _KINDS:
            raise ValueError(f"type {str(kind)[:40]!r} is not one of {', '.join(_KINDS)}")
        sequence = obj.get("sequence", 0)
        if (
            isinstance(sequence, bool)
            or not isinstance(sequence, (int, float))
            or sequence != int(sequence)
            or not 0 <= sequence <= MAX_SEQUENCE
        ):
            raise ValueError(f"sequence must be an integer from 0 to {MAX_SEQUENCE}, got {str(sequence)[:40]}")
        if kind == CHECKPOINT_KIND and value != {"folder": checkpoint_folder(int(sequence))}:
            raise ValueError(f"a checkpoint record names its folder, {checkpoint_folder(int(sequence))}, and only that")
        return Metric(
            type=kind,
            sequence=int(sequence),
            value=value,
            parameter_id=obj.get("parameter_id"),
            trial_job_id=obj.get("trial_job_id"),
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, OverflowError, RecursionError) as exc:
        reason = f"no {exc}" if isinstance(exc, KeyError) else (str(exc) or type(exc).__name__)
        raise MetricFormatError(f"malformed metric record {_preview(raw)}: {reason[:200]}") from None


def scalar(value: Any) -> float | None:
    """NNI's extract_scalar_reward: a number, or a dict's numeric ``default``; None otherwise.
    An integer too large for a float is infinite (and so refused as a result)."""
    if isinstance(value, dict):
        value = value.get("default")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def describe_result(value: Any) -> str | None:
    """Why ``value`` is not a usable final result, or None if it is (a finite number)."""
    number = scalar(value)
    if number is not None:
        return None if math.isfinite(number) else f"the final result {_short(value)} is not a finite number"
    if isinstance(value, dict):
        if "default" not in value:
            keys = ", ".join(sorted(map(str, value))[:8])
            return f"the final result is a dict without a 'default' key (keys: {keys}); NNI ranks trials by 'default'"
        return f"the final result's 'default' is {_short(value['default'])}, not a number"
    if isinstance(value, str):
        return f"the final result is a string ({_short(value)}), not a number"
    return f"the final result is {type(value).__name__} {_short(value)}, not a number"


def _short(value: Any) -> str:
    text = repr(value)
    if isinstance(value, int) and not isinstance(value, bool) and len(text) > 20:
        return f"an integer of {len(text)} digits"
    return text if len(text) <= 60 else text[:57] + "..."


def complete_line(text: str) -> str:
    """``text`` if it is whole (ends with its newline), else the empty string: a file written by
    one ``echo`` without a rename can be seen empty or cut short while it is being written."""
    return text if text.endswith("\n") else ""


def read_state_file(sys_dir: str | os.PathLike[str]) -> int | None:
    """Exit code from ``.nni/state`` (``"<rc> <epoch ms>"``), or None while the trial runs (or
    while the line is still being written).

    The file sits in the trial's output folder, where its own code writes too; a line that is
    not the wrapper's (no integer first) is read as no exit code yet: the wrapper overwrites it
    when the trial ends, and a trial whose wrapper is gone without one is failed for that."""
    from trialflow.trial.folder import TrialFileRefused, read_in_folder

    try:  # a symlink or a FIFO there is not the wrapper's line either (and must not block)
        raw = read_in_folder(sys_dir, STATE_FILE, 0, 4096)
    except TrialFileRefused:
        return None
    text = complete_line(raw.decode(errors="replace")).split()
    try:
        return int(text[0]) if text else None
    except ValueError:
        return None
