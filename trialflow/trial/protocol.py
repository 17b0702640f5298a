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
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trialflow.trial.wire import (  # noqa: F401  (re-exported: the protocol in one place)
    MAX_RECORD_BYTES, METRICS_FILE, PARAMETER_FILE, STATE_FILE, dumps_value, frame, metric_record,
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


def parameter_text(parameter_id: Any, parameters: dict[str, Any], index: int = 0) -> str:
    """parameter.cfg's content, in nni's format."""
    return json.dumps({"parameter_id": parameter_id, "parameter_source": "algorithm",
                       "parameters": parameters, "parameter_index": index})


def write_parameter_file(sys_dir: str | os.PathLike[str], parameter_id: Any, parameters: dict[str, Any],
                         index: int = 0) -> Path:
    """Write parameter.cfg atomically: nni's SDK polls until the file is non-empty, so it must
    never see a half-written file."""
    path = Path(sys_dir) / PARAMETER_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(parameter_text(parameter_id, parameters, index), encoding="utf-8")
    os.replace(tmp, path)
    return path












class MetricFormatError(ValueError):
    """Bytes that are not NNI metric framing: the reader stops rather than guess."""


def read_framed(data: bytes) -> tuple[list[Metric], int]:
    """Parse complete ``ME%06d`` frames from ``data``; return metrics and bytes consumed."""
    metrics: list[Metric] = []
    pos = 0
    while len(data) - pos >= _FRAME_HEADER:
        header = data[pos:pos + _FRAME_HEADER]
        if header[:2] != b"ME" or not header[2:].isdigit():
            raise MetricFormatError(f"bad metric frame header {header!r} at byte {pos}")
        length = int(header[2:])
        end = pos + _FRAME_HEADER + length
        if end > len(data):
            break  # incomplete tail: keep it for the next read
        metrics.append(parse_record(data[pos + _FRAME_HEADER:end]))
        pos = end
    return metrics, pos


def read_stdout_lines(data: bytes) -> tuple[list[Metric], int]:
    """Parse ``NNISDK_MEb'...'`` lines from complete lines of ``data``; other lines are output."""
    metrics: list[Metric] = []
    end = data.rfind(b"\n") + 1  # only whole lines; a partial last line waits
    for line in data[:end].splitlines():
        match = _STDOUT_LINE.search(line)
        if match:
            metrics.append(parse_record(match.group(1)))
    return metrics, end


def parse_record(raw: bytes) -> Metric:
    try:
        obj = json.loads(raw.decode("utf-8"))
        value = obj["value"]
        if isinstance(value, str):
            value = json.loads(value)  # the metric is a JSON string inside the JSON object
        return Metric(type=str(obj.get("type", "PERIODICAL")), sequence=int(obj.get("sequence", 0)),
                      value=value, parameter_id=obj.get("parameter_id"), trial_job_id=obj.get("trial_job_id"))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise MetricFormatError(f"bad metric record {raw[:200]!r}: {exc}") from None


def scalar(value: Any) -> float | None:
    """NNI's extract_scalar_reward: a number, or a dict's numeric ``default``; None otherwise."""
    if isinstance(value, dict):
        value = value.get("default")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_state_file(sys_dir: str | os.PathLike[str]) -> int | None:
    """Exit code from ``.nni/state`` (``"<rc> <epoch ms>"``), or None while the trial runs."""
    try:
        text = (Path(sys_dir) / STATE_FILE).read_text().split()
    except FileNotFoundError:
        return None
    return int(text[0]) if text else None
