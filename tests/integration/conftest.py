"""Tests under a real Airflow: the session's (tests/helpers/airflow.py, the ``harness`` fixture).

Every test here is marked ``integration`` by tests/conftest.py: pytest reads a ``pytestmark`` in
a test module, never in a conftest (this one had it; test_dag_test.py had none of its own and ran
in make test-fast: 40 s of it)."""

from __future__ import annotations
