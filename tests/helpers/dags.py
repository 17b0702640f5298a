"""An experiment config written for DAG-building tests."""

from __future__ import annotations

from pathlib import Path

CONFIG = """\
experimentName: My Exp!
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: python3 t.py
trialConcurrency: 3
maxTrialNumber: 7
maxExperimentDuration: 2h
tuner: {{name: {tuner}}}
trainingService: {{platform: {platform}}}
"""


def write_config(tmp_path: Path, tuner: str = "TPE", platform: str = "local", extra: str = "") -> Path:
    path = tmp_path / "exp" / "config.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CONFIG.format(tuner=tuner, platform=platform) + extra)
    return path
