from __future__ import annotations

import pytest

from trialflow.config.units import parse_duration, parse_size_mb


@pytest.mark.parametrize(
    "value, seconds",
    [
        (30, 30.0),
        (1.5, 1.5),
        ("45", 45.0),
        ("10s", 10.0),
        ("30m", 1800.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1.5h", 5400.0),
        (" 2 H ", 7200.0),
    ],
)
def test_durations(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["1w", "abc", "", "-1h", 0, True, "1h30m"])
def test_bad_durations_say_what_is_expected(value):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    "value, mb",
    [
        (512, 512),
        ("8gb", 8192),
        ("8GB", 8192),
        ("1tb", 1024 * 1024),
        ("2048kb", 2),
        ("512mb", 512),
        ("1Gi", 1024),
        ("256Mi", 256),
        ("1g", 1024),
    ],
)
def test_sizes(value, mb):
    assert parse_size_mb(value) == mb


@pytest.mark.parametrize("value", ["8 parsecs", "", "-5mb", 0, False])
def test_bad_sizes(value):
    with pytest.raises(ValueError, match="size"):
        parse_size_mb(value)
