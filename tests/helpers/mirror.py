"""Tests mirror the package: `make lint` runs this (python -m tests.helpers.mirror).

Each package folder of trialflow has its tests folder at the same path under tests/, holding
at least one test module; a test module at tests/'s top level is named for one of trialflow's
top-level modules (test_dag.py for trialflow/dag.py); and every other folder of tests/ is one
of the environments kept apart from the mirror (a real scheduler, Kubernetes, the Celery
cluster, hostile input) or shared support. So a new package without tests, or a test that
drifted away from the code it tests, fails lint with the path to add or move.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "trialflow"
TESTS = ROOT / "tests"
#: tests/ folders that are not a package's mirror: environments, what the tests share, and the docs.
APART = {"integration", "kube", "cluster", "security", "helpers", "fixtures", "docs"}


def problems(package: Path = PACKAGE, tests: Path = TESTS) -> list[str]:
    found: list[str] = []
    folders = sorted(p.parent for p in package.rglob("__init__.py") if p.parent != package)
    for folder in folders:
        rel = folder.relative_to(package)
        mirror = tests / rel
        if not any(mirror.glob("test_*.py")):
            found.append(f"{package.name}/{rel}/ has no tests: add {tests.name}/{rel}/test_<module>.py")
    for test in sorted(tests.glob("test_*.py")):
        module = test.stem.removeprefix("test_")
        if not (package / f"{module}.py").is_file():
            found.append(
                f"{tests.name}/{test.name} names no top-level module ({package.name}/{module}.py): "
                "move it beside the module it tests"
            )
    mirrored = {folder.relative_to(package).parts[0] for folder in folders}
    for folder in sorted(p for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))):
        if folder.name not in mirrored and folder.name not in APART:
            found.append(f"{tests.name}/{folder.name}/ mirrors no package of {package.name}/ and is no environment")
    return found


def main() -> int:
    found = problems()
    for line in found:
        print(line, file=sys.stderr)
    if not found:
        print("tests mirror the package")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
