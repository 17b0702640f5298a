"""``import nni`` trial code, written as NNI's docs say, with and without NNI installed.

Where the trial's Python has no ``nni`` (a fresh worker, a remote machine, a pod image), the
SDK's stand-in answers; where it has the real nni 3.0, that one runs, untouched.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.following import follow
from trialflow.config.platforms import LocalConfig
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.local import LocalPlatform

TRIAL = """\
import argparse, json, os
import nni
from nni.utils import merge_parameter

defaults = argparse.Namespace(lr=0.5, epochs=2, optimizer=None)
params = merge_parameter(defaults, nni.get_next_parameter())
for epoch in range(params.epochs):
    nni.report_intermediate_result(params.lr * (epoch + 1))
nni.report_final_result({"default": params.lr * 10, "loss": 0.25})
with open(os.path.join(os.environ["NNI_OUTPUT_DIR"], "which.json"), "w") as f:
    json.dump({"nni": nni.__file__, "trial_id": nni.get_trial_id()}, f)
"""
#: The interpreter this venv was made from: no nni, no trialflow (a fresh machine's Python).
BARE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def run(tmp_path: Path, python: str) -> tuple[TrialStatus, list, dict]:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "mnist.py").write_text(TRIAL)
    platform = LocalPlatform(LocalConfig(), tmp_path / "work")
    platform.prepare_sync("eshim001")
    spec = TrialSpec("eshim001", "eshim001-0000", 0, 0, {"lr": 0.01, "optimizer": "sgd"}, f"{python} mnist.py", code)
    handle = platform.submit_sync(spec)

    outcome, recorder = follow(platform, handle, timeout=60)
    status, metrics = outcome.status, recorder.metrics
    import json

    which = json.loads((Path(handle["trial_dir"]) / "which.json").read_text()) if status.value == "SUCCEEDED" else {}
    return status, metrics, which


def test_unmodified_nni_code_runs_where_nni_and_trialflow_are_not_installed(tmp_path):
    bare = __import__("subprocess").run([BARE_PYTHON, "-c", "import nni"], capture_output=True, cwd=tmp_path)
    if bare.returncode == 0:
        pytest.skip(f"{BARE_PYTHON} has nni installed")
    status, metrics, which = run(tmp_path, BARE_PYTHON)
    assert status == TrialStatus.SUCCEEDED
    assert [m.value for m in metrics] == [0.01, 0.02, {"default": 0.1, "loss": 0.25}]
    assert which["trial_id"] == "eshim001-0000" and "trialflow/trial/shim/nni" in which["nni"]


def test_import_nni_through_the_stand_in_imports_nothing_heavy(tmp_path):
    """Every NNI trial starts with ``import nni``: the stand-in imports no ``typing``, ``json``,
    ``re`` or ``enum`` (22 ms of CPU at each trial's start, measured), yet dumps and loads."""
    import json
    import subprocess

    from trialflow.platforms.local import NNI_SHIM

    code = (  # what the interpreter's own start imported (a site .pth may import typing) is not counted
        "import sys; before = set(sys.modules); import nni; print(nni.dump({'x': [1, 2.5]}), nni.load('[3]'), "
        "[m for m in ('typing', 'json', 're', 'enum') if m in set(sys.modules) - before], nni.__file__, sep='\\n')"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(NNI_SHIM)}
    result = subprocess.run(
        [BARE_PYTHON, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    dumped, loaded, heavy, where = result.stdout.splitlines()
    if "trialflow/trial/shim/nni" not in where:
        pytest.skip(f"{BARE_PYTHON} has nni installed")
    assert json.loads(dumped) == {"x": [1, 2.5]}
    assert (loaded, heavy) == ("[3]", "[]")


def test_merge_parameter_keeps_nnis_rules():
    import importlib.util

    # the stand-in's own file, loaded under a name of its own (a bare "utils" on sys.path could be
    # any module of that name already imported)
    path = Path(__file__).resolve().parents[4] / "trialflow" / "trial" / "shim" / "nni" / "utils.py"
    spec = importlib.util.spec_from_file_location("trialflow_nni_shim_utils", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    merge_parameter = module.merge_parameter
    assert merge_parameter({"a": 1, "b": None}, {"a": 2, "b": "x"}) == {"a": 2, "b": "x"}
    with pytest.raises(ValueError, match="Key 'c' not found"):
        merge_parameter({"a": 1}, {"c": 1})
    with pytest.raises(TypeError, match="to have type 'int'"):
        merge_parameter({"a": 1}, {"a": "one"})


def test_the_helpers_customized_tuners_use_keep_nnis_rules():
    import importlib.util

    path = Path(__file__).resolve().parents[4] / "trialflow" / "trial" / "shim" / "nni" / "utils.py"
    spec = importlib.util.spec_from_file_location("trialflow_nni_shim_utils_helpers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.extract_scalar_reward(0.5) == 0.5
    assert module.extract_scalar_reward({"default": 3, "loss": 1.0}) == 3
    for bad in ({"loss": 1.0}, "0.5", True, None):
        with pytest.raises(RuntimeError, match="final result should be float/int"):
            module.extract_scalar_reward(bad)
    assert module.extract_scalar_history([1, {"default": 2.5}]) == [1, 2.5]
    assert module.OptimizeMode("minimize") is module.OptimizeMode.Minimize
    assert module.split_index({"opt": {"_index": 1, "_value": {"lr": 0.1}}}) == {"opt": {"lr": 0.1}}
    assert module.convert_dict2tuple({"b": 1, "a": {"c": 2}}) == (("a", (("c", 2),)), ("b", 1))


@pytest.mark.integration
def test_the_real_nni_wins_where_it_is_installed(tmp_path, nni_python):
    status, metrics, which = run(tmp_path, nni_python)
    assert status == TrialStatus.SUCCEEDED and len(metrics) == 3
    assert which["nni"].endswith("site-packages/nni/__init__.py") and "/shim/" not in which["nni"]
