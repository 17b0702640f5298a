"""A ``file://`` checkpoint store that cannot be written is said before a run (issue 64, 8):
`validate` warns (the workers' disk may differ), `trialflow run` refuses (its Airflow is here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trialflow.checkpoints import preflight
from trialflow.checkpoints.preflight import file_store_problem

SYSTEM_PYTHON = "/usr/bin/python3"


def test_a_folder_that_can_be_made_or_written_and_a_bucket_say_nothing(tmp_path):
    assert file_store_problem(f"file://{tmp_path}") is None
    assert file_store_problem(f"file://{tmp_path}/not/yet/made") is None
    assert file_store_problem("s3://bucket/prefix") is None


def test_a_store_under_a_file_or_relative_is_said(tmp_path):
    (tmp_path / "plain").write_text("x")
    said = file_store_problem(f"file://{tmp_path}/plain/checkpoints")
    assert said is not None and f"{tmp_path / 'plain'} is not a folder" in said
    assert "expected an absolute path" in (file_store_problem("file://relative/dir") or "")
    assert "holds a NUL byte" in (file_store_problem(f"file://{tmp_path}/a%00b") or "")


@pytest.mark.skipif(
    shutil.which("runuser") is None or os.geteuid() != 0 or not Path(SYSTEM_PYTHON).exists(),
    reason="runuser as root (util-linux) and Debian's python3",
)
def test_a_folder_another_user_owns_is_not_writable_for_this_one(tmp_path):
    """Run as `nobody` (root may write anywhere), with Debian's Python loading the module from
    its file (it needs only the standard library; the venv's Python is under root's home)."""
    module = Path(preflight.__file__)
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    hidden = hidden / "checkpoints"
    code = (
        "import importlib.util as u\n"
        f"s = u.spec_from_file_location('p', {str(module)!r}); m = u.module_from_spec(s); s.loader.exec_module(m)\n"
        "print(m.file_store_problem('file:///usr/checkpoints'))\n"
        f"print(m.file_store_problem('file://{hidden}'))"
    )
    out = subprocess.run(
        ["runuser", "-u", "nobody", "--", SYSTEM_PYTHON, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert "/usr is not writable here (/usr/checkpoints does not exist and cannot be made there)" in out.stdout, (
        out.stdout + out.stderr
    )
    # a folder of root's, 0700, not to be looked into: said, never a traceback (exists() raised)
    assert f"{hidden} cannot be looked at here (Permission denied)" in out.stdout, out.stdout + out.stderr


def _cli(tmp_path, command: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "plain").write_text("x")
    config = tmp_path / "config.yml"
    config.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python t.py\ntrialConcurrency: 1\n"
        "maxTrialNumber: 1\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
        f"checkpoints: {{store: 'file://{tmp_path}/plain/ckpt'}}\n"
    )
    home = ["--home", str(tmp_path / "home")] if command == "run" else []
    return subprocess.run(
        [sys.executable, "-m", "trialflow.cli", command, str(config), *home], capture_output=True, text=True, timeout=60
    )


def test_validate_warns_and_run_refuses_before_starting_anything(tmp_path):
    warned = _cli(tmp_path, "validate")
    assert warned.returncode == 0 and "OK" in warned.stderr, warned.stderr
    assert "warning: checkpoints.store file://" in warned.stderr and "is not a folder" in warned.stderr
    refused = _cli(tmp_path, "run")
    assert refused.returncode == 1 and "checkpoints.store: checkpoints.store file://" in refused.stderr, refused.stderr
    assert not (tmp_path / "home").exists()
