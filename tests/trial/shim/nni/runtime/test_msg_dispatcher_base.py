"""The stand-in's advisor API (``nni.runtime.msg_dispatcher_base``, ``nni.runtime.
tuner_command_channel``, NNI 1.x's ``nni.protocol`` and ``nni.msg_dispatcher_base``,
``nni.dump``/``nni.load``), imported as an advisor imports it in a Python without nni; its command
codes checked against NNI 3.0's own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trialflow.tuning.custom.runner import SHIM

ADVISOR = """\
import json
import numpy as np
import nni
from nni.runtime.msg_dispatcher_base import MsgDispatcherBase, OUTBOX
from nni.runtime.tuner_command_channel import CommandType
from nni.protocol import CommandType as OldCommandType, send
from nni.msg_dispatcher_base import MsgDispatcherBase as OldBase

class A(OldBase):
    def handle_request_trial_jobs(self, data):
        self.send(CommandType.NewTrialJob, nni.dump({"parameter_id": 1, "parameters": {"x": np.float64(0.5)}}))
        send(OldCommandType.NoMoreTrialJobs, "")

a = A()
a.handle_request_trial_jobs(1)
a.report_error("oops")
try:
    a.run()
    ran = "returned"
except RuntimeError as exc:
    ran = str(exc)
try:
    a.handle_trial_end({})
    missing = "none"
except NotImplementedError as exc:
    missing = str(exc)
print(json.dumps({
    "same_base": OldBase is MsgDispatcherBase,
    "sent": [[c.name, d if isinstance(d, str) else None] for c, d in OUTBOX],
    "loaded": nni.load(OUTBOX[0][1]),
    "ran": ran,
    "missing": missing,
    "nni": nni.__file__,
}))
"""


def _with_the_stand_in(code: str, folder) -> subprocess.CompletedProcess[str]:
    """``code`` run by this venv's Python (no nni installed) with only the stand-in on its path."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=folder,
        env={"PYTHONPATH": str(SHIM), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )


def test_an_advisor_s_sends_are_collected_in_order_from_both_paths(tmp_path):
    done = _with_the_stand_in(ADVISOR, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert "trialflow/trial/shim/nni" in seen["nni"]  # the stand-in, not an installed nni
    assert seen["same_base"]
    assert [name for name, _ in seen["sent"]] == ["NewTrialJob", "NoMoreTrialJobs", "Error"]
    assert seen["loaded"] == {"parameter_id": 1, "parameters": {"x": 0.5}}  # NumPy's number as Python's
    assert seen["sent"][2][1] == "oops"
    assert "calls the advisor's handlers itself" in seen["ran"]
    assert seen["missing"] == "handle_trial_end not implemented"


CODES = (
    "import json\nfrom nni.runtime.tuner_command_channel import CommandType\n"
    "print(json.dumps({c.name: c.value for c in CommandType}))"
)


@pytest.mark.nni
def test_the_command_names_and_codes_are_nni_3_0_s(nni_python, tmp_path):
    real = subprocess.run([nni_python, "-c", CODES], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert real.returncode == 0, real.stderr[-2000:]
    ours = _with_the_stand_in(CODES, tmp_path)
    assert ours.returncode == 0, ours.stderr[-2000:]
    assert json.loads(ours.stdout) == json.loads(real.stdout)
