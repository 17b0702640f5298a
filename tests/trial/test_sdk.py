"""The trial SDK, run the way trials run: in a separate process with NNI's environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from trialflow.trial.protocol import read_framed, read_stdout_lines, write_parameter_file

TRIAL = """
from trialflow import trial
p = trial.get_next_parameter()
trial.report_intermediate_result(p["x"])
trial.report_intermediate_result({"default": p["x"] * 2, "acc": 0.5})
trial.report_final_result({"default": 1.5, "extra": [1, 2]})
print(trial.get_trial_id(), trial.get_experiment_id(), trial.get_sequence_id(), trial.get_current_parameter("x"))
"""


def _pair(read):
    return read.metrics, read.consumed


def run_trial(tmp_path: Path, platform: str, **extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "NNI_PLATFORM": platform,
        "NNI_SYS_DIR": str(tmp_path),
        "NNI_TRIAL_JOB_ID": "tr1",
        "NNI_EXP_ID": "ex1",
        "NNI_TRIAL_SEQ_ID": "4",
        **extra,
    }
    write_parameter_file(tmp_path, 9, {"x": 0.25})
    return subprocess.run([sys.executable, "-c", TRIAL], env=env, capture_output=True, text=True, timeout=60)


def test_local_platform_writes_the_metrics_file(tmp_path):
    result = run_trial(tmp_path, "local")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["tr1", "ex1", "4", "0.25"]
    metrics, consumed = _pair(read_framed((tmp_path / ".nni" / "metrics").read_bytes()))
    assert consumed == (tmp_path / ".nni" / "metrics").stat().st_size
    assert [(m.type, m.sequence, m.value, m.parameter_id) for m in metrics] == [
        ("PERIODICAL", 0, 0.25, 9),
        ("PERIODICAL", 1, {"default": 0.5, "acc": 0.5}, 9),
        ("FINAL", 0, {"default": 1.5, "extra": [1, 2]}, 9),
    ]


def test_other_platforms_print_nnisdk_lines(tmp_path):
    result = run_trial(tmp_path, "kubeflow")
    assert result.returncode == 0, result.stderr
    metrics, _ = _pair(read_stdout_lines(result.stdout.encode()))
    assert [m.type for m in metrics] == ["PERIODICAL", "PERIODICAL", "FINAL"]
    assert not (tmp_path / ".nni" / "metrics").exists()


def test_reuse_mode_uses_stdout_even_locally(tmp_path):
    result = run_trial(tmp_path, "local", REUSE_MODE="1")
    assert len(read_stdout_lines(result.stdout.encode()).metrics) == 3


def test_standalone_without_an_experiment():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NNI_")}
    code = "from trialflow import trial; print(trial.get_next_parameter()); trial.report_final_result(0.5)"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["{}", "[trialflow standalone] final result: 0.5"]


def test_the_sdk_imports_nothing_heavy():
    code = (
        "import sys, trialflow.trial; heavy = [m for m in ('optuna', 'pydantic', 'airflow', 'yaml', "
        "'sqlalchemy', 'typing', 'json', 're', 'enum') if m in sys.modules]; print(heavy)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert json.loads(result.stdout.replace("'", '"')) == []
