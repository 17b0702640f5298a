"""Population Based Training on real local processes, without Airflow's scheduler: the digits
example (dags/experiments/digits-pbt), a trial written like NNI's mnist-pbt one, runs two
generations of four. A trial of the second generation is not started while the first runs; each
starts from its parent's checkpoint, fetched from the artifact store, and keeps its own save
folder there for the generation after."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from trialflow.checkpoints.keeper import TrialCheckpoints
from trialflow.config import load_config
from trialflow.config.checkpoints import default_folder
from trialflow.experiment import Experiment
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import TrialStatus
from trialflow.runs import start_run
from trialflow.trial.wire import PBT_LOAD_KEY, PBT_SAVE_KEY

EXAMPLE = Path(__file__).resolve().parents[2] / "dags" / "experiments" / "digits-pbt"


def _experiment(tmp_path: Path, store) -> Experiment:
    text = (EXAMPLE / "config.yml").read_text()
    text = text.replace("python3 train.py", f"{sys.executable} train.py")
    text = text.replace("trialCodeDirectory: .", f"trialCodeDirectory: {EXAMPLE}")
    text = text.replace("searchSpaceFile: search_space.json", f"searchSpaceFile: {EXAMPLE / 'search_space.json'}")
    (tmp_path / "config.yml").write_text(text)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "epbt", tmp_path / "work")
    start_run(experiment, store, "dag_pbt", "r1", {})
    return experiment


def _run_generation(experiment: Experiment, store, indices: range) -> list:
    started = [trial_lifecycle.start_trial(experiment, store, "r1", i) for i in indices]
    for trial in started:
        outcome = trial_lifecycle.wait_in_worker(trial, store, 120, 0.1)
        trial_lifecycle.finish_trial(store, trial.record.storage_id, outcome.status, outcome.message)
    return started


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow  # real processes for seconds: make test runs it, the inner loops do not
@pytest.mark.timeout(240)
def test_two_generations_of_four_hand_weights_on_through_the_store(tmp_path, store):
    pytest.importorskip("sklearn")
    experiment = _experiment(tmp_path, store)
    assert experiment.config.checkpoints is not None  # implied by PBTTuner: the example has no key
    first = [trial_lifecycle.start_trial(experiment, store, "r1", i) for i in range(4)]
    with pytest.raises(trial_lifecycle.TrialWaits, match=r"generation 0 to end \(trial indices 0, 1, 2, 3\)"):
        trial_lifecycle.start_trial(experiment, store, "r1", 4)
    assert store.find_trial(experiment.experiment_id, 4) is None  # it was given nothing
    for trial in first:
        outcome = trial_lifecycle.wait_in_worker(trial, store, 120, 0.1)
        assert outcome.status == TrialStatus.SUCCEEDED, outcome.message
        trial_lifecycle.finish_trial(store, trial.record.storage_id, outcome.status, outcome.message)

    root = default_folder(experiment.workdir)
    kept = {}
    for trial in first:
        checkpoints = TrialCheckpoints(root, experiment.experiment_id, trial.spec.trial_id)
        assert checkpoints.steps() == [1]  # the save folder, kept at the step it reached (1 result)
        kept[trial.spec.trial_id] = checkpoints.prefix / "000000001" / "model.pkl"

    second = _run_generation(experiment, store, range(4, 8))
    values = {t.spec.trial_id: store.trial(t.record.storage_id).final for t in first}
    ranked = sorted(values, key=lambda trial_id: values[trial_id], reverse=True)
    for trial in second:
        record = store.trial(trial.record.storage_id)
        assert record.status == TrialStatus.SUCCEEDED, record.message
        lineage = record.lineage
        assert lineage is not None and (lineage.generation, lineage.member) == (1, record.trial_index - 4)
        own = first[lineage.member].spec.trial_id
        if lineage.exploited:  # the worst one (cutoff ceil(0.2 * 4) = 1) copies the best
            assert own == ranked[-1] and lineage.parent_trial_id == ranked[0]
            assert record.parameters != store.trial(first[lineage.parent_index].record.storage_id).parameters
        else:
            assert lineage.parent_trial_id == own
            assert record.parameters == store.trial(first[lineage.member].record.storage_id).parameters
        assert lineage.loaded_step == 1 and lineage.note is None
        # It was launched with the parent's checkpoint in its load folder, byte for byte.
        folder = Path(trial.record.handle["trial_dir"]) if trial.record.handle else None
        assert folder is not None
        parameters = json.loads((folder / "parameter.cfg").read_text())["parameters"]
        assert parameters[PBT_LOAD_KEY] == str(folder / ".trialflow-resume" / "0")
        assert parameters[PBT_SAVE_KEY] == str(folder / "pbt" / "save")
        assert _digest(Path(parameters[PBT_LOAD_KEY]) / "model.pkl") == _digest(kept[lineage.parent_trial_id])
        # and it saved its own, which the store keeps for a third generation
        assert TrialCheckpoints(root, experiment.experiment_id, trial.spec.trial_id).steps() == [1]
    assert sum(store.trial(t.record.storage_id).lineage.exploited for t in second) == 1


def test_a_first_generation_trial_loads_nothing_and_its_folders_are_its_own(tmp_path, store):
    pytest.importorskip("sklearn")
    experiment = _experiment(tmp_path, store)
    (trial,) = _run_generation(experiment, store, range(1))
    folder = Path(trial.record.handle["trial_dir"])
    parameters = json.loads((folder / "parameter.cfg").read_text())["parameters"]
    assert parameters[PBT_LOAD_KEY] == str(folder / "pbt" / "nothing-to-load")
    assert not Path(parameters[PBT_LOAD_KEY]).exists()
    assert (folder / "pbt" / "save" / "model.pkl").is_file()
    record = store.trial(trial.record.storage_id)
    assert record.lineage is not None and record.lineage.parent_index is None
    assert set(record.parameters) == {"batch_size", "eta0", "alpha"}  # the folders are not stored


def test_a_waiting_trial_of_a_stopped_run_is_not_started(tmp_path, store):
    """A person stops the experiment while generation 1 waits: its trials are not started (and
    not counted), rather than waiting for ever or planning from a cancelled generation."""
    pytest.importorskip("sklearn")
    from trialflow import steering

    experiment = _experiment(tmp_path, store)
    first = [trial_lifecycle.start_trial(experiment, store, "r1", i) for i in range(4)]
    with pytest.raises(trial_lifecycle.TrialWaits):
        trial_lifecycle.start_trial(experiment, store, "r1", 4)
    steering.stop_experiment(store, experiment.experiment_id, "ann")
    with pytest.raises(trial_lifecycle.TrialNotStarted):
        trial_lifecycle.start_trial(experiment, store, "r1", 4)
    assert store.find_trial(experiment.experiment_id, 4) is None
    for trial in first:  # the stop reaches the running ones through their followers
        outcome = trial_lifecycle.wait_in_worker(trial, store, 60, 0.1)
        assert outcome.status in (TrialStatus.USER_CANCELED, TrialStatus.SUCCEEDED), outcome


#: Written like NNI's PBT trial; a child's first launch kills itself (as the OOM killer would)
#: after loading its parent's weight, so its restart must load the parent's checkpoint again.
FAULTY = """\
import json, os, signal
import nni
p = nni.get_next_parameter()
load = os.path.join(p["load_checkpoint_dir"], "w.json")
w = json.load(open(load))["w"] if os.path.isfile(load) else 0.0
marks = os.environ["MARKS"]
me = os.environ["NNI_TRIAL_JOB_ID"]
open(os.path.join(marks, me), "a").write(p["load_checkpoint_dir"] + "\\n")
if os.path.isfile(load) and len(open(os.path.join(marks, me)).read().splitlines()) == 1:
    os.kill(os.getpid(), signal.SIGKILL)
w += p["x"]
nni.report_final_result(w)
os.makedirs(p["save_checkpoint_dir"], exist_ok=True)
json.dump({"w": w}, open(os.path.join(p["save_checkpoint_dir"], "w.json"), "w"))
"""


def test_a_child_killed_before_its_first_checkpoint_restarts_from_its_parents(tmp_path, store):
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "t.py").write_text(FAULTY)
    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
        f"trialCommand: env MARKS={marks} {sys.executable} t.py\ntrialCodeDirectory: code\n"
        "trialConcurrency: 2\nmaxTrialNumber: 4\n"
        "tuner: {name: PBTTuner, classArgs: {population_size: 2, fraction: 0.5}}\ntrainingService: {platform: local}\n"
    )
    experiment = Experiment(load_config(tmp_path / "config.yml"), "epbtfault", tmp_path / "work")
    start_run(experiment, store, "dag_pf", "r1", {})
    first = _run_generation(experiment, store, range(2))
    second = _run_generation(experiment, store, range(2, 4))
    for trial in second:
        record = store.trial(trial.record.storage_id)
        assert record.status == TrialStatus.SUCCEEDED, record.message
        assert [(r.attempt, r.step) for r in record.restarts] == [(1, None)]  # none of its own
        parent = store.trial(first[record.lineage.parent_index].record.storage_id)
        assert record.final == pytest.approx(parent.final + record.parameters["x"])  # the parent's weight again
        launches = (marks / record.trial_id).read_text().split()
        assert [Path(p).name for p in launches] == ["0", "1"]  # .trialflow-resume/0, then /1


def test_a_parent_checkpoint_the_store_refuses_starts_the_child_fresh_and_says_why_without_secrets(
    tmp_path, store, monkeypatch
):
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "t.py").write_text(FAULTY.replace("os.kill(os.getpid(), signal.SIGKILL)", "pass"))
    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
        f"trialCommand: env MARKS={marks} {sys.executable} t.py\ntrialCodeDirectory: code\n"
        "trialConcurrency: 1\nmaxTrialNumber: 2\n"
        "tuner: {name: PBTTuner, classArgs: {population_size: 1}}\ntrainingService: {platform: local}\n"
    )
    experiment = Experiment(load_config(tmp_path / "config.yml"), "epbtdown", tmp_path / "work")
    start_run(experiment, store, "dag_pd", "r1", {})
    _run_generation(experiment, store, range(1))

    def refusing(*args, **kwargs):
        raise OSError("store https://acct:SeCrEtKeY@blob.example/ refused: AccountKey=SeCrEtKeY")

    monkeypatch.setattr(trial_lifecycle, "parent_checkpoint", refusing)
    (child,) = _run_generation(experiment, store, range(1, 2))
    record = store.trial(child.record.storage_id)
    assert record.status == TrialStatus.SUCCEEDED and record.lineage is not None
    assert record.lineage.loaded_step is None and "could not be read" in (record.lineage.note or "")
    assert "SeCrEtKeY" not in (record.lineage.note or "")
    assert "nothing-to-load" in (marks / record.trial_id).read_text()  # it started fresh
