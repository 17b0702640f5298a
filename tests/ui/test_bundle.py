"""The committed page bundle is the build of the committed source (ui/), as Airflow's own
providers ship theirs: built again here with the locked packages and compared byte for byte."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UI = ROOT / "ui"
BUNDLE = ROOT / "trialflow" / "ui" / "static" / "trialflow.js"


@pytest.mark.slow  # builds the bundle
def test_the_committed_bundle_is_the_build_of_the_source(tmp_path: Path):
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm not found (Node.js and npm build the pages; .ci/run installs them)")
    if not (UI / "node_modules" / ".package-lock.json").exists():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=UI, check=True, capture_output=True, timeout=600)
    out = tmp_path / "static"
    result = subprocess.run(
        [npm, "exec", "--", "vite", "build", "--outDir", str(out), "--emptyOutDir"],
        cwd=UI,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    built = (out / "trialflow.js").read_bytes()
    assert built == BUNDLE.read_bytes(), (
        "trialflow/ui/static/trialflow.js is not the build of ui/src: run `make ui` and commit the result"
    )
