"""Reading a trial's output for metrics: incrementally, from pod logs or mounted storage.

Pure functions of the bytes and the cursor, so they are tested without a cluster.
"""

from __future__ import annotations

from datetime import UTC, datetime


def _parse_ts(text: str) -> tuple[datetime, int]:
    """An RFC 3339 timestamp with up to nanoseconds -> (seconds, nanoseconds) for ordering."""
    main, _, frac = text.rstrip("Z").partition(".")
    nanos = int((frac + "000000000")[:9]) if frac else 0
    return datetime.strptime(main, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC), nanos


def new_log_lines(text: str, last_ts: str | None, seen_at_last: int) -> tuple[list[str], str | None, int]:
    """Lines of a ``timestamps=true`` log read with ``sinceTime`` that the cursor has not seen.

    sinceTime has second precision, so a read repeats the lines of the last second: lines
    older than ``last_ts`` are dropped, and of those stamped exactly ``last_ts`` the first
    ``seen_at_last`` are. A last line without its newline is left for the next read.
    Returns (lines without timestamps, new last_ts, lines seen at it).
    """
    lines: list[str] = []
    last = _parse_ts(last_ts) if last_ts else None
    at_last = 0
    complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
    for raw in complete.splitlines():
        ts, _, line = raw.partition(" ")
        try:
            key = _parse_ts(ts)
        except ValueError:
            continue  # not a timestamped line (a proxy error text); nothing to learn from it
        if last is not None and key < last:
            continue
        if last is not None and key == last:
            at_last += 1
            if at_last <= seen_at_last:
                continue
            seen_at_last = at_last
            lines.append(line)
            continue
        last, last_ts, at_last, seen_at_last = key, ts, 1, 1
        lines.append(line)
    return lines, last_ts, seen_at_last


def since_time(last_ts: str | None) -> str | None:
    """sinceTime for the next read: the last line's second (the API takes whole seconds)."""
    if not last_ts:
        return None
    return last_ts.split(".")[0].rstrip("Z") + "Z"
