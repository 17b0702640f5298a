"""A submitted trial as it travels from the operator to a sensor or the trigger
(trialflow.lifecycle.submission): JSON both ways, refusals that name what is wrong, and the one follow
loop rebuilt from it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trialflow.lifecycle.submission import Submission

CONFIG = f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {sys.executable} -c "print(1)"
trialCodeDirectory: .
trialConcurrency: 1
maxTrialNumber: 2
tuner: {{name: TPE}}
assessor: {{name: Medianstop}}
trainingService: {{platform: local}}
"""


def submission(tmp_path: Path, **changes: object) -> Submission:
    (tmp_path / "config.yml").write_text(CONFIG)
    fields = {
        "config_path": str(tmp_path / "config.yml"),
        "store_conn_id": "trialflow_default",
        "experiment_id": "esub",
        "workdir": str(tmp_path / "work"),
        "handle": {"platform": "local", "trial_id": "esub-0000", "trial_dir": str(tmp_path / "t"), "pid": 7},
        "storage_id": 3,
        "deadline": 1_800_000_000.5,
        "experiment_deadline": None,
    }
    return Submission(**{**fields, **changes})  # type: ignore[arg-type]


def test_it_crosses_as_json_and_comes_back_equal(tmp_path):
    sent = submission(tmp_path)
    assert Submission.from_dict(json.loads(json.dumps(sent.to_dict()))) == sent


def test_a_newer_writers_extra_keys_are_left_out_and_a_missing_one_is_named(tmp_path):
    data = submission(tmp_path).to_dict() | {"added_in_a_later_release": 1}
    assert Submission.from_dict(data) == submission(tmp_path)
    data.pop("storage_id")
    with pytest.raises(ValueError, match="storage_id"):
        Submission.from_dict(data)
    with pytest.raises(ValueError, match="expected SubmitTrialOperator's result, got list"):
        Submission.from_dict([1, 2])  # type: ignore[arg-type]


def test_the_follow_loop_is_rebuilt_with_its_deadlines_assessor_and_steering(tmp_path, store):
    sent = Submission.from_dict(json.loads(json.dumps(submission(tmp_path).to_dict())))
    store.open_experiment("esub")
    follower = sent.follower(store)
    assert follower.handle == sent.handle and follower.storage_id == 3
    assert (follower.deadline, follower.experiment_deadline) == (1_800_000_000.5, None)
    assert follower.stop_check is not None  # the config's assessor (Medianstop)
    assert follower.control_check is not None  # a person's stop and a moved deadline
    assert type(follower.platform).__name__ == "LocalPlatform"
    assert sent.experiment().config.trial_concurrency == 1
