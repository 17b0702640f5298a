"""The trial SDK's checkpoints, run the way trials run (a separate process with NNI's
environment): a checkpoint appears only once saved whole, a restart loads the last one and its
results go on from its step, and a record is sent only where trialflow keeps checkpoints. The
protocol accepts a checkpoint record that names its own folder and nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trialflow.trial.protocol import MetricFormatError, parse_record, read_framed, write_parameter_file
from trialflow.trial.wire import MAX_CHECKPOINT_STEP, checkpoint_folder

TRIAL = """
import json, os, sys
from trialflow import trial
p = trial.get_next_parameter()
start = trial.last_checkpoint()
epoch = json.load(open(os.path.join(start, "state.json")))["epoch"] if start else 0
print("from", start, epoch, flush=True)
for epoch in range(epoch, p["epochs"]):
    trial.report_intermediate_result(epoch / 10)
    with trial.checkpoint() as folder:
        json.dump({"epoch": epoch + 1}, open(os.path.join(folder, "state.json"), "w"))
        if os.environ.get("DIE_AT") == str(epoch):
            os._exit(9)  # killed mid-save: the partial folder is never a checkpoint
    if os.environ.get("CRASH_AT") == str(epoch):
        with trial.checkpoint() as folder:
            open(os.path.join(folder, "half"), "w").write("x")
            raise RuntimeError("disk full")
trial.report_final_result(p["epochs"] / 10)
"""


def _run(folder: Path, epochs: int, **env: str) -> subprocess.CompletedProcess:
    write_parameter_file(folder, 1, {"epochs": epochs})
    full = {
        **os.environ,
        "NNI_PLATFORM": "local",
        "NNI_SYS_DIR": str(folder),
        "NNI_OUTPUT_DIR": str(folder),
        "NNI_TRIAL_JOB_ID": "tr1",
        "NNI_EXP_ID": "ex1",
        **env,
    }
    return subprocess.run([sys.executable, "-c", TRIAL], env=full, capture_output=True, text=True, timeout=60)


def _records(folder: Path) -> list[tuple[str, int]]:
    metrics = read_framed((folder / ".nni" / "metrics").read_bytes()).metrics
    return [(m.type, m.sequence) for m in metrics]


def test_each_save_is_a_folder_named_by_its_step_and_a_record_only_where_trialflow_keeps_them(tmp_path):
    quiet, kept = tmp_path / "quiet", tmp_path / "kept"
    quiet.mkdir(), kept.mkdir()
    assert _run(quiet, 3).returncode == 0
    assert sorted(p.name for p in (quiet / "checkpoints").iterdir()) == ["000000001", "000000002", "000000003"]
    assert [kind for kind, _ in _records(quiet)] == ["PERIODICAL"] * 3 + ["FINAL"]  # NNI would see only these
    result = _run(kept, 3, TRIALFLOW_CHECKPOINTS="1")
    assert result.returncode == 0, result.stderr
    assert _records(kept) == [
        ("PERIODICAL", 0),
        ("CHECKPOINT", 1),
        ("PERIODICAL", 1),
        ("CHECKPOINT", 2),
        ("PERIODICAL", 2),
        ("CHECKPOINT", 3),
        ("FINAL", 0),
    ]
    assert json.loads((kept / "checkpoints" / "000000002" / "state.json").read_text()) == {"epoch": 2}


def test_a_restart_loads_the_last_checkpoint_and_its_results_go_on_from_its_step(tmp_path):
    first, again = tmp_path / "first", tmp_path / "again"
    first.mkdir(), again.mkdir()
    killed = _run(first, 5, DIE_AT="2", TRIALFLOW_CHECKPOINTS="1")
    assert killed.returncode == 9
    saved = sorted(p.name for p in (first / "checkpoints").iterdir())
    assert saved == ["000000001", "000000002", "000000003.partial"]  # the third never completed
    last = first / "checkpoints" / "000000002"
    resumed = _run(again, 5, TRIALFLOW_RESUME_CHECKPOINT=str(last), TRIALFLOW_RESUME_STEP="2")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.split()[:3] == ["from", str(last), "2"]
    assert [seq for kind, seq in _records(again) if kind == "PERIODICAL"] == [2, 3, 4]  # none twice, none missing


def test_a_save_that_raises_leaves_no_checkpoint_and_the_error_goes_on(tmp_path):
    result = _run(tmp_path, 3, CRASH_AT="0")
    assert result.returncode == 1 and "disk full" in result.stderr
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["000000001"]


def test_a_resume_step_that_is_not_a_step_starts_from_zero(tmp_path):
    result = _run(tmp_path, 2, TRIALFLOW_RESUME_STEP="-3", TRIALFLOW_RESUME_CHECKPOINT=str(tmp_path / "nowhere"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:3] == ["from", "None", "0"]
    assert [seq for kind, seq in _records(tmp_path) if kind == "PERIODICAL"] == [0, 1]


def _record(sequence: object, value: object) -> bytes:
    return json.dumps({"type": "CHECKPOINT", "sequence": sequence, "value": json.dumps(value)}).encode()


def test_a_checkpoint_record_names_its_own_folder():
    metric = parse_record(_record(12, {"folder": "checkpoints/000000012"}))
    assert metric.is_checkpoint and not metric.is_final and metric.sequence == 12


@pytest.mark.parametrize(
    ("sequence", "value"),
    [
        (12, {"folder": "checkpoints/000000013"}),  # another step's
        (12, {"folder": "../../etc/passwd"}),
        (12, {"folder": "/tmp/checkpoints/000000012"}),
        (12, {"folder": "checkpoints/000000012", "extra": 1}),
        (12, "checkpoints/000000012"),
        (MAX_CHECKPOINT_STEP + 1, {"folder": "checkpoints/1000000000"}),
        (True, {"folder": "checkpoints/000000001"}),
    ],
)
def test_a_checkpoint_record_naming_anything_else_is_refused(sequence, value):
    with pytest.raises(MetricFormatError):
        parse_record(_record(sequence, value))


@pytest.mark.parametrize("step", [-1, MAX_CHECKPOINT_STEP + 1, True, 1.0, "3"])
def test_a_folder_is_named_only_for_a_step(step):
    with pytest.raises(ValueError, match="a checkpoint's step is an integer"):
        checkpoint_folder(step)
