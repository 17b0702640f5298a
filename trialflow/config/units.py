"""NNI's duration and size strings ("1h", "30m", "8GB"), parsed the way nnictl did."""

from __future__ import annotations

import math
import re

# Matched against the stripped string, ASCII digits only: one run of spaces between the number
# and its unit, so a long run of spaces costs one pass (the old pattern's three optional runs
# backtracked quadratically: 100,000 spaces took a minute of the api-server's CPU).
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)[ \t]*([smhd]?)", re.IGNORECASE | re.ASCII)
#: Longest duration or size string read at all (every valid one is far shorter).
MAX_UNIT_STRING = 64
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)[ \t]*(tb|gb|mb|kb|ti|gi|mi|ki|b|t|g|m|k)?", re.IGNORECASE | re.ASCII)
# Kubernetes-style binary suffixes (1Gi) are accepted too: AdaptDL configs use them.
_SIZE_UNITS_MB = {
    "ti": 1024 * 1024,
    "gi": 1024,
    "mi": 1,
    "ki": 1 / 1024,
    "tb": 1024 * 1024,
    "t": 1024 * 1024,
    "gb": 1024,
    "g": 1024,
    "mb": 1,
    "m": 1,
    "kb": 1 / 1024,
    "k": 1 / 1024,
    "b": 1 / (1024 * 1024),
}


def _as_float(value: int | float, what: str) -> float:
    """A number as a float; an integer too large for one (``10**400``) is refused, not a crash."""
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"expected a {what} below 1e308, got a {int(value).bit_length()}-bit integer") from None


def _unit_match(pattern: re.Pattern[str], value: str, what: str) -> re.Match[str] | None:
    if len(value) > MAX_UNIT_STRING:
        raise ValueError(f"expected a {what} of at most {MAX_UNIT_STRING} characters, got {len(value)}")
    return pattern.fullmatch(value.strip())


def parse_duration(value: object) -> float:
    """Seconds from a number (already seconds) or a string like ``"1.5h"``.

    NNI accepts s/m/h/d; a bare number means seconds, as in NNI v2.
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30m, 2h or 1d, got a boolean")
    if isinstance(value, (int, float)):
        seconds = _as_float(value, "duration")
    elif isinstance(value, str) and (match := _unit_match(_DURATION, value, "duration")):
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
    else:
        raise ValueError(f"expected a duration such as 30m, 2h or 1d (units s, m, h, d), got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"expected a positive, finite duration, got {value!r}")
    return seconds


def parse_size_mb(value: object) -> int:
    """Megabytes (1024-based, like NNI) from a number (already MB) or a string like ``"8GB"``."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 512mb or 8gb, got a boolean")
    if isinstance(value, (int, float)):
        size = _as_float(value, "size")
    elif isinstance(value, str) and (match := _unit_match(_SIZE, value, "size")):
        size = float(match.group(1)) * _SIZE_UNITS_MB[(match.group(2) or "mb").lower()]
    else:
        raise ValueError(f"expected a size such as 512mb or 8gb (units tb, gb, mb, kb, b), got {value!r}")
    if not math.isfinite(size) or size <= 0:
        raise ValueError(f"expected a positive, finite size, got {value!r}")
    return max(1, int(round(size)))


def format_duration(seconds: float) -> str:
    """Seconds in NNI's own words, the largest unit that says them exactly (7200 -> "2h")."""
    for unit in ("d", "h", "m"):
        count = seconds / _DURATION_UNITS[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}s"


_WHOLE = re.compile(r"[0-9]{1,18}", re.ASCII)


def whole_number(text: str) -> int | None:
    """``text`` as a non-negative integer when it is 1 to 18 ASCII digits, else None.

    Not ``str.isdigit()`` + ``int()``: isdigit is true for "²" and "¹²", which int() refuses
    (a 500 where a 422 was due), and int() of a 5,000-digit string raises too. Eighteen digits
    hold every index, count and exit code there is, and stay an int64.
    """
    return int(text) if _WHOLE.fullmatch(text) else None
