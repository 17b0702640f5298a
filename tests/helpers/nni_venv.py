"""The one builder of nni==3.0's own virtualenv, shared by the tests (real `import nni` trial
code) and the benchmarks (NNI's `nnictl` as the baseline), so whichever runs first leaves a
virtualenv the other can use. nnictl imports pkg_resources, which setuptools 81 removed."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

NNI_VENV = Path(os.environ.get("TRIALFLOW_NNI_VENV", Path.home() / ".cache" / "trialflow" / "nni-3.0-venv"))
REQUIREMENTS = ("nni==3.0", "setuptools<81")


def _usable(venv: Path) -> bool:
    python = venv / "bin" / "python"
    if not python.exists() or not (venv / "bin" / "nnictl").exists():
        return False
    check = subprocess.run(
        [str(python), "-c", "import nni, pkg_resources; print(nni.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return check.returncode == 0 and check.stdout.strip() == "3.0"


def build_nni_venv(venv: Path = NNI_VENV) -> Path:
    """The virtualenv's python, built once per machine (an unusable one is rebuilt whole).
    Built under a lock beside it: the suite's parallel workers (pytest-xdist) and a benchmark
    may ask at once, and one of them removing what another is building broke both."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(venv)


def _build(venv: Path) -> Path:
    if _usable(venv):
        return venv / "bin" / "python"
    shutil.rmtree(venv, ignore_errors=True)
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    try:
        subprocess.run([uv, "venv", "-q", str(venv)], check=True, timeout=300)
        subprocess.run(
            [uv, "pip", "install", "-q", "--compile-bytecode", "-p", str(venv / "bin" / "python"), *REQUIREMENTS],
            check=True,
            timeout=900,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(venv, ignore_errors=True)
        raise RuntimeError(f"could not build the nni==3.0 virtualenv at {venv}: {exc}") from exc
    if not _usable(venv):
        raise RuntimeError(f"the nni==3.0 virtualenv at {venv} does not import nni 3.0 and pkg_resources")
    return venv / "bin" / "python"
