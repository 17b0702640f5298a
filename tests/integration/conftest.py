"""Tests under a real Airflow: the session's (tests/helpers/airflow.py, the ``harness`` fixture)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration
