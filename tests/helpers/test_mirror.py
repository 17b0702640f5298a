"""The lint check that tests mirror the package finds each way of drifting, with the path."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.mirror import problems


def _tree(root: Path, files: list[str]) -> None:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")


def test_the_real_tree_mirrors_its_package():
    assert problems() == []


def test_each_kind_of_drift_is_named_with_what_to_do(tmp_path: Path):
    package, tests = tmp_path / "trialflow", tmp_path / "tests"
    _tree(
        tmp_path,
        [
            "trialflow/__init__.py",
            "trialflow/dag.py",
            "trialflow/runs/__init__.py",
            "trialflow/runs/start.py",
            "trialflow/platforms/__init__.py",
            "trialflow/platforms/remote/__init__.py",
            "tests/test_dag.py",
            "tests/test_follow.py",
            "tests/runs/test_start.py",
            "tests/platforms/test_local.py",
            "tests/airflow/test_trigger.py",
            "tests/integration/test_run.py",
        ],
    )
    assert problems(package, tests) == [
        "trialflow/platforms/remote/ has no tests: add tests/platforms/remote/test_<module>.py",
        "tests/test_follow.py names no top-level module (trialflow/follow.py): move it beside the module it tests",
        "tests/airflow/ mirrors no package of trialflow/ and is no environment",
    ]
