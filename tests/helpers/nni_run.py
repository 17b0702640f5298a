"""A real NNI 3.0 experiment run here, for the import tests: nnictl in a loopback-only network
namespace (NNI's REST server listens on all interfaces) with a temporary HOME (it writes
~/nni-experiments whatever the config says), stopped by bench/nni_runner.py when its trials are done."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TRIAL = """\
import nni

p = nni.get_next_parameter()
for i in range(3):
    nni.report_intermediate_result(p["x"] * i)
nni.report_final_result({"default": p["x"] * 10, "loss": 1 - p["x"]})
"""


def missing_reason() -> str | None:
    if os.geteuid() != 0 or not shutil.which("ip"):
        return "running NNI itself needs root and iproute2 (a loopback-only network namespace)"
    return None


def run_nni_experiment(work: Path, nni_python: str, trials: int = 4) -> Path:
    """Run one local-mode experiment of ``trials`` trials; return its folder (``<work>/exp/<id>``)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "trial.py").write_text(TRIAL)
    config = work / "config.yml"
    config.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}, k: {_type: choice, _value: [a, b]}}\n"
        f"trialCommand: {nni_python} trial.py\ntrialCodeDirectory: {work}\ntrialConcurrency: 2\n"
        f"maxTrialNumber: {trials}\ntuner: {{name: TPE, classArgs: {{optimize_mode: maximize, seed: 3}}}}\n"
        f"experimentWorkingDirectory: {work / 'exp'}\ntrainingService: {{platform: local}}\n"
    )
    namespace = f"tfnni{os.getpid()}"
    home = work / "home"
    home.mkdir(exist_ok=True)
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"], check=True)
        done = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                namespace,
                nni_python,
                str(ROOT / "bench" / "nni_runner.py"),
                str(config),
                "8080",
                str(trials),
                "240",
                str(work),  # NNI's own exports land beside (export_files)
            ],
            capture_output=True,
            text=True,
            cwd=work,
            env={**os.environ, "HOME": str(home)},
            timeout=400,
        )
    finally:
        subprocess.run(["ip", "netns", "delete", namespace])
    if f'"succeeded": {trials}' not in done.stdout:
        print(done.stdout, done.stderr[-2000:], file=sys.stderr)
        logs = _logs(work)
        print(logs, file=sys.stderr)
        raise RuntimeError(f"NNI did not finish its {trials} trials: {done.stdout.strip()[-300:]}\n{logs[-1500:]}")
    (folder,) = [p for p in (work / "exp").iterdir() if p.is_dir() and not p.name.startswith("_")]
    return folder


def _logs(work: Path, tail: int = 3000) -> str:
    """The ends of what nnictl, NNI's manager, its dispatcher and the trials wrote, for a run that
    did not finish: CI keeps only the test's output, not these files."""
    found = sorted(work.glob("*.nnictl.log")) + sorted((work / "exp").glob("*/log/*.log"))
    found += sorted((work / "exp").glob("*/environments/*/trials/*/trial.stderr"))[:2]
    found = [path for path in found if "_latest" not in path.parts]  # NNI's link to the same folder
    parts = []
    for path in found:
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            text = f"({exc})"
        parts.append(f"--- {path.relative_to(work)} ---\n{text[-tail:]}")
    return "\n".join(parts) or f"(no nnictl or NNI log under {work})"


def export_files(folder: Path) -> tuple[Path, Path]:
    """NNI's own ``nnictl experiment export`` (JSON, CSV) of the experiment run_nni_experiment ran
    in ``folder``, and its config."""
    work = folder.parent.parent
    return work / "export.json", work / "export.csv"


def config_of(folder: Path) -> Path:
    return folder.parent.parent / "config.yml"
