"""A local trial's retry on another host: refused with where the trial is, never launched twice.

"Another host" is real here: a process in its own UTS namespace (its own hostname, as a Celery
worker on another machine) and mount namespace, with an empty folder over the experiment's
working directory (another machine's disk holds no trial folders). The store is shared, as a
PostgreSQL store is between real hosts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.experiment_setup import code_folder, experiment_with_store
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import TrialStatus, trial_id_for
from trialflow.platforms.hosts import TrialOnAnotherHost
from trialflow.platforms.local import process_alive
from trialflow.runs import allot_window
from trialflow.tuning.asker import ask

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a second host (its own namespaces) needs root")

RETRY_ELSEWHERE = """
import sys
from pathlib import Path
from trialflow.lifecycle import trial_lifecycle
from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.platforms.hosts import TrialOnAnotherHost
from trialflow.store.experiment_store import ExperimentStore

config, workdir, url = sys.argv[1:4]
experiment = Experiment(load_config(Path(config)), "ehosts01", Path(workdir))
try:
    started = trial_lifecycle.start_trial(experiment, ExperimentStore(url), "r1", 0, pin_host=True)
    print("launched", started.handle)
except TrialOnAnotherHost as exc:
    print("refused:", exc)
"""


@pytest.fixture
def setup(tmp_path: Path):
    config_path, workdir = code_folder(tmp_path, {}) / "config.yml", tmp_path / "work"
    experiment, store = experiment_with_store(
        config_path,
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: sleep 30\ntrialCodeDirectory: .\n"
        "trialConcurrency: 1\nmaxTrialNumber: 2\ntuner: {name: Random}\ntrainingService: {platform: local}\n",
        "ehosts01",
        tmp_path / "store.db",
        workdir,
    )
    url = store.url
    experiment.open(store)
    allot_window(experiment, store, "r1")
    return experiment, store, config_path, workdir, url


def retry_on_worker_b(config_path: Path, workdir: Path, url: str) -> str:
    script = 'hostname worker-b && mount -t tmpfs none "$1" && shift && exec "$@"'
    done = subprocess.run(
        ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(workdir)]
        + [sys.executable, "-c", RETRY_ELSEWHERE, str(config_path), str(workdir), url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_retry_on_another_host_is_refused_and_launches_nothing(setup):
    experiment, store, config_path, workdir, url = setup
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0, pin_host=True)
    here = socket.gethostname()
    assert started.handle is not None and started.handle["host"] == here
    try:
        out = retry_on_worker_b(config_path, workdir, url)
        assert out.startswith(f"refused: trial {started.spec.trial_id} runs on host {here!r}"), out
        assert "'worker-b'" in out and "local_queue" in out
        assert process_alive(started.handle["pid"], started.handle["started"])
        # the store still names the first launch, not one made on worker-b
        assert store.trial(started.record.storage_id).handle == started.handle
    finally:
        started.platform.cancel_sync(started.handle, TrialStatus.USER_CANCELED, "test over")


def test_a_host_claimed_before_the_launch_holds_for_the_retry(setup):
    """The first attempt claimed its host and died before the store had its handle: a retry
    elsewhere must not launch (the first one may have), and the claiming host's may."""
    experiment, store, config_path, workdir, url = setup
    trial_id = trial_id_for("ehosts01", 1)
    asked = ask(store, "ehosts01", 1, trial_id, experiment.algorithm, experiment.space)
    store.set_attrs(asked.storage_id, host="worker-a")
    with pytest.raises(TrialOnAnotherHost, match=f"trial {trial_id} runs on host 'worker-a'"):
        trial_lifecycle.start_trial(experiment, store, "r1", 1, pin_host=True)
    assert not (workdir / "trials").exists() or not any((workdir / "trials").iterdir())


def test_without_pinning_no_host_is_claimed(setup):
    """Under the LocalExecutor (the default) nothing is written for hosts beyond the handle."""
    experiment, store, *_ = setup
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    try:
        # the record the start keeps without reading it back is the one the store holds
        assert started.record == store.trial(started.record.storage_id)
        assert store.trial(started.record.storage_id).host is None
        assert started.handle is not None and started.handle["host"] == socket.gethostname()
    finally:
        started.platform.cancel_sync(started.handle, TrialStatus.USER_CANCELED, "test over")
