"""Files a trial can write are read inside its folder only, never through a symlink.

A trial replaces its ``stdout`` and its ``.nni/metrics`` with symlinks to a file it should not
show (standing in for /etc/shadow), or with a FIFO that would block a reader: the follow loop,
the store, the XCom and the experiment pages show neither its content nor hang.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from trialflow.trial.folder import TrialFileRefused, read_in_folder, tail_in_folder

SECRET = "root:$6$TOPSECRETHASH:19000:0:99999:7:::"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "secret").write_text(SECRET)
    trial = tmp_path / "trial"
    (trial / ".nni").mkdir(parents=True)
    (trial / "stdout").write_text("hello\n")
    return trial


def test_a_regular_file_inside_the_folder_is_read(folder: Path):
    assert read_in_folder(folder, "stdout", 0, 100) == b"hello\n"
    assert read_in_folder(folder, "stdout", 2, 2) == b"ll"
    assert tail_in_folder(folder, "stdout", 3) == (b"lo\n", 6)
    assert read_in_folder(folder, ".nni/metrics", 0, 100) == b""  # not there yet


@pytest.mark.parametrize(
    "plant",
    [
        lambda f: (f / "stdout").unlink() or (f / "stdout").symlink_to(f.parent / "secret"),
        lambda f: (f / "stdout").unlink() or os.link(f.parent / "secret", f / "x") or (f / "stdout").symlink_to("x"),
        lambda f: [(f / ".nni").rename(f / "old"), (f / ".nni").symlink_to(f.parent)],  # a folder above
    ],
    ids=["file symlink", "relative symlink", "symlinked folder"],
)
def test_a_symlink_anywhere_below_the_folder_is_refused(folder: Path, plant):
    plant(folder)
    name = ".nni/secret" if (folder / ".nni").is_symlink() else "stdout"
    with pytest.raises(TrialFileRefused) as refused:
        read_in_folder(folder, name, 0, 100)
    assert SECRET not in str(refused.value) and "not read" in str(refused.value)


def test_the_folder_itself_as_a_symlink_is_refused(folder: Path, tmp_path: Path):
    (tmp_path / "link").symlink_to(folder)
    with pytest.raises(TrialFileRefused):
        read_in_folder(tmp_path / "link", "stdout", 0, 100)


def test_a_fifo_is_refused_without_blocking(folder: Path):
    (folder / "stdout").unlink()
    os.mkfifo(folder / "stdout")
    done: list[BaseException] = []

    def read() -> None:
        try:
            tail_in_folder(folder, "stdout", 100)
        except BaseException as exc:
            done.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "the reader blocked on a FIFO"
    assert isinstance(done[0], TrialFileRefused)


@pytest.mark.parametrize("name", ["../secret", "/etc/passwd", "", ".nni/../../secret"])
def test_names_that_leave_the_folder_are_refused(folder: Path, name: str):
    with pytest.raises(TrialFileRefused):
        read_in_folder(folder, name, 0, 100)


# -- through a real trial, the follow loop, the store, Airflow and the pages ----------------

TRIAL = """\
import os, time
from trialflow import trial
trial.get_next_parameter()
trial.report_intermediate_result(0.5)
time.sleep(0.5)
out = os.environ["NNI_OUTPUT_DIR"]
for name in ("stdout", ".nni/metrics"):
    os.remove(os.path.join(out, name))
    os.symlink({secret!r}, os.path.join(out, name))
time.sleep(0.5)
"""


@pytest.mark.integration
def test_a_trial_cannot_show_a_file_through_a_symlink(harness, tmp_path: Path):
    from tests.helpers.pages import UiSetup

    secret = tmp_path / "shadow"
    secret.write_text(SECRET + "\n")
    config = (
        "searchSpace: {x: {_type: choice, _value: [1]}}\n"
        f"trialCommand: {sys.executable} t.py\ntrialConcurrency: 1\nmaxTrialNumber: 1\n"
        "tuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    dag_id, _ = harness.experiment("symlinks", config, {"t.py": TRIAL.format(secret=str(secret))})
    run_id, _ = harness.run(dag_id)
    from trialflow.platforms.base import experiment_id_for

    experiment_id = experiment_id_for(dag_id, run_id)
    (row,) = harness.store.trial_rows(experiment_id)
    assert row.intermediate_count == 1  # what came before the swap counts
    assert "not read" in (row.message or "")
    xcom = harness.xcom(dag_id, run_id, "trial", 0)
    passwords = __import__("json").loads((harness.airflow.home / "passwords.json").read_text())
    ui = UiSetup(harness, dag_id, run_id, experiment_id, "", passwords)
    detail = ui.get(f"experiments/{experiment_id}/trials/0").json()
    stdout = next(part for part in detail["log"] if part["name"] == "stdout")
    assert stdout["text"].startswith("(not shown:")
    for seen in (str(row), str(xcom), str(detail)):
        assert "TOPSECRET" not in seen


def test_a_remote_trials_symlinked_output_is_not_read(ssh_servers, tmp_path: Path):
    """The remote platform reads over SSH with GNU dd's O_NOFOLLOW: a trial that puts a symlink
    where its stdout.log was (to a file holding a metric line) shows nothing of that file."""
    from tests.helpers.following import follow
    from tests.helpers.remote import machine_entry, remote_platform
    from trialflow.platforms.base import TrialSpec, TrialStatus
    from trialflow.trial.protocol import metric_record, stdout_line

    a, _ = ssh_servers
    line = stdout_line(metric_record("t", 0, "FINAL", 0, "TOPSECRET"))
    code = tmp_path / "code"
    code.mkdir()
    (code / "t.py").write_text(
        "import os, time\nfrom trialflow import trial\ntrial.get_next_parameter()\n"
        "out = os.environ['NNI_OUTPUT_DIR']\nsecret = os.path.join(out, '..', 'secret-elsewhere')\n"
        f"open(secret, 'w').write({line!r})\n"
        "os.remove(os.path.join(out, 'stdout.log'))\n"
        "os.symlink(secret, os.path.join(out, 'stdout.log'))\n"
        "time.sleep(0.5)\n"
    )
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    platform.prepare_sync("esymlnk1")
    handle = platform.submit_sync(TrialSpec("esymlnk1", "esymlnk1-0000", 0, 0, {"x": 1}, "python3 t.py", code))

    outcome, recorder = follow(platform, handle)
    status, metrics = outcome.status, recorder.metrics
    assert status == TrialStatus.SUCCEEDED
    assert metrics == []  # the symlinked file's metric line was not read


def test_control_files_that_are_fifos_or_symlinks_read_as_absent(folder: Path):
    """A cancel record, exit code or job id the trial replaced: no hang, no content shown."""
    from trialflow.trial.folder import read_small

    (folder / "rc").write_text("0\n")
    assert read_small(folder, "rc") == "0\n"
    os.mkfifo(folder / "cancel.json")
    (folder / "job.json").symlink_to(folder.parent / "secret")
    assert read_small(folder, "cancel.json") is None and read_small(folder, "job.json") is None
    assert read_small(folder, "absent") is None
