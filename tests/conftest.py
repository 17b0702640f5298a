"""Shared fixtures. ../shared (NNI's example configs) exists beside a checkout and in CI,
not in a user's clone: tests that need it skip with that reason."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

# Unit tests import Airflow: give it a private, throwaway home before anything imports it.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="trialflow-test-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TRIALFLOW_SHARED", ROOT.parent / "shared"))
NNI_EXAMPLES = SHARED / "nni-examples" / "examples" / "trials"


@pytest.fixture
def nni_examples() -> Path:
    if not NNI_EXAMPLES.is_dir():
        pytest.skip(f"NNI example configs not found at {NNI_EXAMPLES} (../shared is beside a developer "
                    "checkout and in CI, not in a user's clone)")
    return NNI_EXAMPLES


@pytest.fixture
def write(tmp_path: Path):
    """write("name.yml", text) -> path, for small config fixtures."""
    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path
    return _write


PYTHON = sys.executable
