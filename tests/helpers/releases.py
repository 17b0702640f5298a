"""Earlier trialflow releases' code, for the tests that run it beside the current one (an
upgrade while an experiment runs). Taken from this clone's history with ``git archive``, once
per machine; None when the clone lacks the commit (a shallow clone: the caller skips)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Each release's commit (tests/fixtures/stores/README.md names the same).
RELEASE_COMMITS = {"0.1.0": "fe3e1d146012fed5f66d04a3aa2552ddc95b9cef"}
CACHE = Path.home() / ".cache" / "trialflow" / "releases"


def release_tree(release: str) -> Path | None:
    """A folder holding that release's ``trialflow`` package (put it first on PYTHONPATH)."""
    commit = RELEASE_COMMITS[release]
    folder = CACHE / f"{release}-{commit[:12]}"
    if (folder / "trialflow" / "__init__.py").exists():
        return folder
    present = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, check=False
    )
    if present.returncode != 0:
        return None
    partial = folder.with_suffix(".partial")
    subprocess.run(["rm", "-rf", str(partial)], check=True)
    partial.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "trialflow"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(partial)], input=archive.stdout, check=True)
    partial.rename(folder)
    return folder
