"""Custom tuner and assessor classes (trialflow.tuning.custom.runner): called in their own
process through a real SQLite store, their state kept between calls, their errors their own."""

from __future__ import annotations

import base64
import os
import pickle
import sys
import threading
import time
from pathlib import Path

import pytest

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.platforms.base import TrialStatus
from trialflow.trial.protocol import Metric
from trialflow.tuning import algorithms
from trialflow.tuning.asker import ask, judge
from trialflow.tuning.assessors import CustomAssessorPruner
from trialflow.tuning.custom import runner
from trialflow.tuning.custom.runner import SHIM, CustomAlgorithmError, CustomClass, Saved

CLASSES = Path(__file__).resolve().parent / "classes"
EXPERIMENT = "ecustom000000001"
SPACE = parse_search_space(
    {"x": {"_type": "uniform", "_value": [0, 1]}, "seen": {"_type": "randint", "_value": [0, 100]}}
)


def _tuner(class_name: str, **args) -> AlgorithmConfig:
    return AlgorithmConfig(class_name=class_name, code_directory=CLASSES, class_args=args)


def _ask(store, index: int, tuner: AlgorithmConfig):
    return ask(store, EXPERIMENT, index, f"{EXPERIMENT}-{index:04d}", tuner, SPACE)


def _finish(store, asked, value: float | None, status=TrialStatus.SUCCEEDED) -> None:
    store.set_status(asked.storage_id, TrialStatus.RUNNING)
    store.finish(asked.storage_id, status, value)


def _object(store, role: str = "tuner"):
    """The class's object as the store keeps it, unpickled here (the classes import NNI's API
    from trialflow's stand-in)."""
    for folder in (str(SHIM), str(CLASSES)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    saved = Saved.read(store.experiment_attr(EXPERIMENT, f"custom_{role}"))
    return pickle.loads(base64.b64decode(saved.state)) if saved.state else None


@pytest.fixture
def opened(store):
    store.open_experiment(EXPERIMENT, "maximize")
    return store


@pytest.mark.slow
def test_the_tuner_s_memory_is_kept_between_asks_and_told_each_result_once(opened):
    tuner = _tuner("counting_tuner.CountingTuner", seed=4)
    first = _ask(opened, 0, tuner)
    assert first.parameters["seen"] == 0 and 0 <= first.parameters["x"] <= 1
    _finish(opened, first, 0.3)
    second = _ask(opened, 1, tuner)
    assert second.parameters["seen"] == 1  # told trial 0's result, from its kept object
    _finish(opened, second, 0.9)
    third = _ask(opened, 2, tuner)
    _finish(opened, third, None, TrialStatus.FAILED)
    _ask(opened, 3, tuner)
    kept = _object(opened)
    assert kept.generated == [0, 1, 2, 3] and kept.imported == 0
    assert kept.results == [(0, 0.3), (1, 0.9)]  # each once, in trial order
    assert kept.ended == [(0, True), (1, True), (2, False)]
    assert first.record.parameters == first.parameters  # the class's own values reach the trial
    assert opened.find_trial(EXPERIMENT, 1).parameters["x"] == second.parameters["x"]
    # a retried task re-attaches: the class is not asked again
    assert _ask(opened, 1, tuner).resumed and _object(opened).generated == [0, 1, 2, 3]


@pytest.mark.slow
def test_a_call_that_outlived_its_turn_leaves_the_state_the_next_holder_kept(opened):
    """The class is called with a view of its experiment (trialflow.tuning.study_view), and keeps
    its state by compare-and-set over what it restored: a call whose lease ran out while it ran
    does not overwrite what the next holder kept (its own results are told again next time)."""
    the_other_holders = {"state": None, "told": [], "note": "the other holder's", "space_version": 0}

    class Overtaken:
        """The real store's view, where another call keeps its state while this one runs."""

        experiment_id = EXPERIMENT

        def __init__(self, view):
            self.view = view

        def attr(self, key):
            return self.view.attr(key)

        def change_attr(self, key, change):
            return self.view.change_attr(key, change)

        def histories(self):  # read inside the turn, before the class is called
            self.view.change_attr("custom_tuner", lambda current: the_other_holders)
            return self.view.histories()

    parameters = runner.generate(
        Overtaken(opened.view(EXPERIMENT)), 0, CustomClass.of(_tuner("counting_tuner.CountingTuner"), "tuner"), SPACE
    )
    assert 0 <= parameters["x"] <= 1  # the call itself answered
    assert opened.experiment_attr(EXPERIMENT, "custom_tuner") == the_other_holders
    runner.generate(opened.view(EXPERIMENT), 1, CustomClass.of(_tuner("counting_tuner.CountingTuner"), "tuner"), SPACE)
    assert _object(opened).generated == [1]  # kept by an undisturbed call, over the other's


@pytest.mark.slow
def test_a_class_whose_object_cannot_be_kept_gets_the_history_as_nni_s_resume_gave_it(opened):
    tuner = _tuner("lossy_tuners.Unpicklable")
    for index in range(3):
        asked = _ask(opened, index, tuner)
        assert asked.parameters["seen"] == index  # made anew, import_data with every earlier result
        _finish(opened, asked, 0.1 * index)
    saved = Saved.read(opened.experiment_attr(EXPERIMENT, "custom_tuner"))
    assert saved.state is None and "cannot be pickled" in (saved.note or "")


@pytest.mark.slow
@pytest.mark.parametrize(
    "class_name, words",
    [
        (
            "lossy_tuners.Raising",
            "Raising.generate_parameters failed: ValueError: no idea for trial 0 (lossy_tuners.py:",
        ),
        ("lossy_tuners.Outside", "returned parameters outside the search space: x:"),
        ("lossy_tuners.Exiting", "its process ended (exit 3) before answering its generate"),
        ("lossy_tuners.NoSuch", "NoSuch (import) failed: AttributeError: module 'lossy_tuners' has no class 'NoSuch'"),
    ],
)
def test_a_class_that_fails_fails_the_ask_with_its_own_words_and_claims_nothing(opened, class_name, words):
    with pytest.raises(CustomAlgorithmError) as raised:
        _ask(opened, 0, _tuner(class_name))
    assert words in str(raised.value)
    assert opened.find_trial(EXPERIMENT, 0) is None  # no trial was claimed: a retry asks again
    assert opened.experiment_attr(EXPERIMENT, "custom_tuner_lease") is None  # its turn was given back


@pytest.mark.slow
def test_a_class_that_hangs_is_stopped_with_everything_it_started(opened, monkeypatch):
    import psutil

    monkeypatch.setattr(runner, "CALL_TIMEOUT", 3.0)
    before = {p.pid for p in psutil.process_iter()}
    started = time.monotonic()
    with pytest.raises(CustomAlgorithmError, match="did not answer within 3 s and was stopped"):
        _ask(opened, 0, _tuner("lossy_tuners.Hanging"))
    assert time.monotonic() - started < 15
    time.sleep(0.5)
    worker = os.environ.get("PYTEST_XDIST_WORKER")

    def ours(process) -> bool:  # started from this pytest process, not another xdist worker's
        try:
            return process.environ().get("PYTEST_XDIST_WORKER") == worker
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.pid not in before and "trialflow.tuning.custom.host" in " ".join(p.info["cmdline"] or []) and ours(p)
    ]
    assert left == []  # the host and the child it forked were killed as a group


@pytest.mark.slow
def test_asks_at_once_take_turns_with_the_class(opened):
    tuner = _tuner("counting_tuner.CountingTuner")
    errors: list[BaseException] = []

    def one(index: int) -> None:
        try:
            _ask(opened, index, tuner)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert sorted(_object(opened).generated) == [0, 1, 2, 3]  # no call lost to a concurrent write


@pytest.mark.slow
def test_a_custom_assessor_stops_a_falling_curve_and_hears_of_ended_trials(opened):
    pruner = CustomAssessorPruner(
        CustomClass.of(AlgorithmConfig(class_name="drop_assessor.DropAssessor", code_directory=CLASSES), "assessor")
    )
    tuner = AlgorithmConfig(name="Random", class_args={"seed": 1})
    done = _ask(opened, 0, tuner)
    _finish(opened, done, 0.5)
    rising = _ask(opened, 1, tuner)
    opened.set_status(rising.storage_id, TrialStatus.RUNNING)
    opened.record_metrics(rising.storage_id, [Metric("PERIODICAL", s, v) for s, v in enumerate([0.1, 0.2, 0.3])])
    assert judge(opened, EXPERIMENT, rising.storage_id, pruner).stop_at is None
    falling = _ask(opened, 2, tuner)
    opened.set_status(falling.storage_id, TrialStatus.RUNNING)
    opened.record_metrics(falling.storage_id, [Metric("PERIODICAL", s, v) for s, v in enumerate([0.5, 0.6])])
    first = judge(opened, EXPERIMENT, falling.storage_id, pruner)
    assert (first.stop_at, first.judged_through) == (None, 1)
    opened.record_metrics(falling.storage_id, [Metric("PERIODICAL", s, v) for s, v in [(2, 0.4), (3, 0.3), (4, 0.2)]])
    assert judge(opened, EXPERIMENT, falling.storage_id, pruner, after=first.judged_through).stop_at == 3
    assert _object(opened, "assessor").ended == [(f"{EXPERIMENT}-0000", True)]


def test_the_config_s_class_and_folder_are_checked_without_running_them(tmp_path):
    def problems(**kwargs):
        return algorithms.check_custom_class(AlgorithmConfig(**kwargs), "tuner")

    assert problems(class_name="counting_tuner.CountingTuner", code_directory=CLASSES) == []
    assert problems(class_name="CountingTuner")[0][0] == "tuner.className"
    assert "expected module.Class" in problems(class_name="a.b; import os")[0][1]
    assert problems(class_name="nowhere.T", code_directory=CLASSES) == [
        ("tuner.className", f"module 'nowhere' is not in {CLASSES} (expected nowhere.py there)")
    ]
    assert problems(class_name="m.T", code_directory=tmp_path / "gone") == [
        ("tuner.codeDirectory", f"{tmp_path / 'gone'} is not a folder")
    ]
    # an advisor's className is checked as a tuner's is
    advisor = AlgorithmConfig(class_name="nowhere.Advisor", code_directory=CLASSES)
    assert algorithms.check_algorithms(None, advisor, None, SPACE) == [
        ("advisor.className", f"module 'nowhere' is not in {CLASSES} (expected nowhere.py there)")
    ]
    assert algorithms.check_algorithms(None, _tuner("rounds_advisor.RoundsAdvisor"), None, SPACE) == []


@pytest.mark.slow
def test_nni_s_own_customized_tuner_example_runs_unchanged(opened):
    example = (
        Path(__file__).resolve().parents[4] / "shared" / "nni-examples" / "examples" / "tuners" / "customized_tuner"
    )
    if not example.is_dir():
        pytest.skip("../shared/nni-examples is not beside this checkout")
    space = parse_search_space(
        {"x": {"_type": "uniform", "_value": [0, 1]}, "c": {"_type": "choice", "_value": [1, 2]}}
    )
    tuner = AlgorithmConfig(
        class_name="demo_tuner.DemoTuner", code_directory=example, class_args={"optimize_mode": "maximize"}
    )
    assert runner.check(CustomClass.of(tuner, "tuner"), space) is None
    for index in range(3):
        asked = ask(opened, EXPERIMENT, index, f"{EXPERIMENT}-{index:04d}", tuner, space)
        assert 0 <= asked.parameters["x"] <= 1 and asked.parameters["c"] in (1, 2)
        _finish(opened, asked, asked.parameters["x"])


@pytest.mark.slow
def test_an_assessor_that_raises_stops_nothing_and_the_trial_runs_on(opened):
    pruner = CustomAssessorPruner(
        CustomClass.of(AlgorithmConfig(class_name="drop_assessor.BrokenAssessor", code_directory=CLASSES), "assessor")
    )
    running = _ask(opened, 0, AlgorithmConfig(name="Random"))
    opened.set_status(running.storage_id, TrialStatus.RUNNING)
    opened.record_metrics(running.storage_id, [Metric("PERIODICAL", 0, 0.5), Metric("PERIODICAL", 1, 0.1)])
    judgment = judge(opened, EXPERIMENT, running.storage_id, pruner)
    assert (judgment.stop_at, judgment.judged_through) == (None, None)  # judged again at the next result


@pytest.mark.slow
def test_what_failed_is_named_by_the_class_s_own_method(opened):
    with pytest.raises(CustomAlgorithmError) as raised:
        _ask(opened, 0, _tuner("counting_tuner.CountingTuner", colour="red"))
    assert str(raised.value).startswith(
        "CountingTuner.__init__ failed: TypeError: CountingTuner.__init__() got an unexpected keyword argument 'colour'"
    )


@pytest.mark.slow
def test_the_class_never_sees_airflow_s_connections_or_settings(opened, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SECRET_DB", "postgresql://u:hunter2@db/x")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://u:hunter2@db/airflow")
    assert _ask(opened, 0, _tuner("lossy_tuners.Peeking")).parameters == {"x": 0.5, "seen": 0}


@pytest.mark.slow
def test_a_custom_advisor_hands_out_rounds_makes_a_trial_wait_and_hears_results_and_ends(opened):
    """An advisor written against NNI 3.0's API: its NewTrialJob parameters reach the trials,
    a trial it has none for waits (NNI's NoMoreTrialJobs) until a trial's end lets it send one,
    and it hears each result and end once, with its own parameter ids."""
    advisor = _tuner("rounds_advisor.RoundsAdvisor", round_size=2, total=4)
    assert runner.check(CustomClass.of(advisor, "tuner"), SPACE) is None
    first, second = _ask(opened, 0, advisor), _ask(opened, 1, advisor)
    assert (first.parameters["x"], second.parameters["x"]) == (0.0, pytest.approx(0.37))
    with pytest.raises(runner.AdvisorWaits) as waits:
        _ask(opened, 2, advisor)  # the round's trials run: nothing yet
    assert not waits.value.final and "sent no parameters yet" in str(waits.value)
    assert opened.find_trial(EXPERIMENT, 2) is None  # a waiting trial claims nothing
    with pytest.raises(runner.AdvisorWaits):
        _ask(opened, 2, advisor)  # asked again: not requested twice (one request per waiting trial)
    _finish(opened, first, 0.5)
    with pytest.raises(runner.AdvisorWaits):
        _ask(opened, 2, advisor)  # one of the round ended: still not the next round
    _finish(opened, second, 0.7)
    third = _ask(opened, 2, advisor)  # the round is over: the owed trial was sent at its end
    assert third.parameters == {"x": pytest.approx(0.74), "seen": 2}
    kept = _object(opened)
    assert kept.results == {"p0": 0.5, "p1": 0.7}  # its own ids, each result once
    assert kept.calls == ["initialize", "request 1", "request 1", "request 1", "end p0 SUCCEEDED", "end p1 SUCCEEDED"]
    assert kept.credit == 0 and kept.sent == 3
    # past its total, with nothing running: the trial is not started, rather than waiting forever
    _finish(opened, third, 0.1, TrialStatus.FAILED)
    fourth = _ask(opened, 3, advisor)
    assert fourth.parameters["x"] == pytest.approx(0.11)
    _finish(opened, fourth, 0.2)
    with pytest.raises(runner.AdvisorWaits) as final:
        _ask(opened, 4, advisor)
    assert final.value.final and "no trial is running" in str(final.value)
    assert _object(opened).calls[-2:] == ["end p3 SUCCEEDED", "request 1"]


@pytest.mark.slow
def test_a_custom_advisor_kills_a_trial_through_the_judge(opened):
    """An advisor that sends KillTrialJob for a trial's intermediate result stops it at that step."""
    advisor = _tuner("rounds_advisor.RoundsAdvisor", round_size=4, drops=3)
    pruner = CustomAssessorPruner(CustomClass.of(advisor, "tuner"))
    running = _ask(opened, 0, advisor)
    opened.set_status(running.storage_id, TrialStatus.RUNNING)
    opened.record_metrics(running.storage_id, [Metric("PERIODICAL", s, v) for s, v in enumerate([0.5, 0.4])])
    first = judge(opened, EXPERIMENT, running.storage_id, pruner)
    assert (first.stop_at, first.judged_through) == (None, 1)
    opened.record_metrics(running.storage_id, [Metric("PERIODICAL", s, v) for s, v in [(2, 0.35), (3, 0.2), (4, 0.1)]])
    assert judge(opened, EXPERIMENT, running.storage_id, pruner, after=first.judged_through).stop_at == 3
    assert _object(opened).sent == 1  # the judge's calls kept the same object as the asks


@pytest.mark.slow
def test_a_custom_advisor_that_sends_bad_parameters_fails_the_ask_in_its_words(opened, tmp_path):
    (tmp_path / "bad_advisor.py").write_text(
        "import nni\nfrom nni.runtime.msg_dispatcher_base import MsgDispatcherBase\n"
        "from nni.runtime.tuner_command_channel import CommandType\n\n"
        "class Outside(MsgDispatcherBase):\n"
        "    def handle_initialize(self, data):\n        pass\n"
        "    def handle_request_trial_jobs(self, data):\n"
        "        job = {'parameter_id': 0, 'parameters': {'x': 7, 'seen': 1}}\n"
        "        self.send(CommandType.NewTrialJob, nni.dump(job))\n\n"
        "class Garbled(Outside):\n"
        "    def handle_request_trial_jobs(self, data):\n"
        "        self.send(CommandType.NewTrialJob, 'not json')\n"
    )
    outside = AlgorithmConfig(class_name="bad_advisor.Outside", code_directory=tmp_path)
    with pytest.raises(CustomAlgorithmError, match="outside the search space: x:"):
        _ask(opened, 0, outside)
    opened.set_experiment_attrs(EXPERIMENT, {"custom_tuner": None})
    garbled = AlgorithmConfig(class_name="bad_advisor.Garbled", code_directory=tmp_path)
    with pytest.raises(
        CustomAlgorithmError,
        match=r"Garbled.handle_request_trial_jobs failed: ValueError: it sent NewTrialJob with 'not json': expected",
    ):
        _ask(opened, 0, garbled)
    assert opened.find_trial(EXPERIMENT, 0) is None


def test_nni_s_own_dummy_advisor_example_is_refused_for_its_search_space_by_name():
    """NNI's customized-advisor example uses a search space that is not NNI's format (its own
    README says so): refused where the file is read, naming it, before any class runs."""
    from trialflow.config import ConfigError, load_config

    example = Path(__file__).resolve().parents[4] / "shared" / "nni-examples" / "examples" / "tuners"
    config = example / "mnist_keras_customized_advisor" / "config.yml"
    if not config.is_file():
        pytest.skip("../shared/nni-examples is not beside this checkout")
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    assert "search_space.json: (top level): not a search space" in str(refused.value)


@pytest.mark.slow
def test_a_changed_space_reaches_the_kept_tuner_through_its_update_search_space(opened):
    """NNI's `nnictl update searchspace`: the kept object is given the newest space once, at
    its next ask, and samples from it; its memory stays."""
    from trialflow.steering import change_search_space
    from trialflow.tuning.space_versions import current

    tuner = _tuner("counting_tuner.CountingTuner", seed=4)
    first = _ask(opened, 0, tuner)
    _finish(opened, first, 0.3)
    narrow = {"x": {"_type": "uniform", "_value": [5, 6]}, "seen": {"_type": "randint", "_value": [0, 100]}}
    change_search_space(opened, EXPERIMENT, "alice", narrow)
    version, space = current(opened, EXPERIMENT, SPACE.raw)
    for index in (1, 2):
        asked = ask(opened, EXPERIMENT, index, f"{EXPERIMENT}-{index:04d}", tuner, space, space_version=version)
        assert 5 <= asked.parameters["x"] <= 6 and asked.parameters["seen"] == 1
    kept = _object(opened)
    assert kept.space == narrow and kept.generated == [0, 1, 2] and kept.results == [(0, 0.3)]
    assert Saved.read(opened.experiment_attr(EXPERIMENT, "custom_tuner")).space_version == 1


@pytest.mark.slow
def test_nni_s_own_ga_customer_tuner_example_runs_unchanged(opened, monkeypatch):
    """ga_squad's customized GA tuner (its searchSpace is {}: the graph is the tuner's own) hands
    out mutated graphs and learns from their results, unchanged."""
    example = Path(__file__).resolve().parents[4] / "shared" / "nni-examples" / "examples" / "tuners"
    if not (example / "ga_customer_tuner").is_dir():
        pytest.skip("../shared/nni-examples is not beside this checkout")
    space = parse_search_space({})
    tuner = AlgorithmConfig(
        class_name="customer_tuner.CustomerTuner",
        code_directory=example / "ga_customer_tuner",
        class_args={"optimize_mode": "maximize"},
    )
    assert runner.check(CustomClass.of(tuner, "tuner"), space) is None
    graphs = []
    for index in range(3):
        asked = ask(opened, EXPERIMENT, index, f"{EXPERIMENT}-{index:04d}", tuner, space)
        graphs.append(asked.parameters)
        _finish(opened, asked, 0.1 * (index + 1))
    assert all(isinstance(g, dict) and g for g in graphs), graphs
    assert all("layers" in g for g in graphs), graphs  # its own graph format, not a search space point
    assert [opened.find_trial(EXPERIMENT, i).parameters for i in range(3)] == graphs  # what the trials get
    monkeypatch.syspath_prepend(str(example / "ga_customer_tuner"))  # its graph module, to unpickle its object
    learnt = sorted(i.result for i in _object(opened).population if i.result is not None)
    assert learnt == pytest.approx([0.1, 0.2]), learnt  # told each ended trial's result (the third's at the next ask)


@pytest.mark.slow
def test_a_trial_that_takes_parameters_another_trial_waited_for_leaves_it_its_own_request(opened):
    """Trial 2 waits (its request owed); trials 0 and 1 end, and trial 3, asking first, takes the
    parameters trial 2's request produced. Trial 2 then asks the advisor anew instead of waiting
    for a request already answered (it starved, then was skipped, before)."""
    advisor = _tuner("rounds_advisor.RoundsAdvisor", round_size=2, total=4)
    first, second = _ask(opened, 0, advisor), _ask(opened, 1, advisor)
    with pytest.raises(runner.AdvisorWaits):
        _ask(opened, 2, advisor)
    _finish(opened, first, 0.5)
    _finish(opened, second, 0.7)
    third = _ask(opened, 3, advisor)  # told both ends: the owed p2 is sent, and taken here
    assert third.parameters["x"] == pytest.approx(0.74)
    late = _ask(opened, 2, advisor)  # asks again, and the round has room for it
    assert late.parameters["x"] == pytest.approx(0.11)
    assert _object(opened).calls.count("request 1") == 4


@pytest.mark.slow
def test_the_last_trials_results_reach_the_class_when_it_is_told_at_the_end(opened):
    """Issue 64, 1: four trials one at a time, and receive_trial_result was called 3 times:
    telling happened at the next ask, and after the last trial there is none. ``tell`` (the
    end step's) gives it what it has not heard, once; with nothing new it starts no process."""
    tuner = _tuner("counting_tuner.CountingTuner")
    custom = CustomClass.of(tuner, "tuner")
    for index in range(4):
        _finish(opened, _ask(opened, index, tuner), 0.1 * (index + 1))
    assert [i for i, _ in _object(opened).results] == [0, 1, 2]  # what the asks told it
    assert runner.tell(opened.view(EXPERIMENT), custom, SPACE) is True
    kept = _object(opened)
    assert kept.results == [(0, 0.1), (1, 0.2), (2, 0.30000000000000004), (3, 0.4)]
    assert kept.ended == [(i, True) for i in range(4)] and kept.generated == [0, 1, 2, 3]
    assert runner.tell(opened.view(EXPERIMENT), custom, SPACE) is False  # told once
    assert _object(opened).results == kept.results


@pytest.mark.slow
def test_the_end_step_tells_a_custom_assessor_of_every_end_and_says_so(tmp_path):
    """The end step (trialflow.runs.end) tells every custom class; an assessor never asked to
    judge (no trial reported a curve) still hears each trial's end."""
    from tests.helpers.experiment_setup import experiment_with_store
    from trialflow.runs.end import tell_custom_classes

    config = (
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: 'true'\ntrialCodeDirectory: .\n"
        "trialConcurrency: 1\nmaxTrialNumber: 2\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
        f"assessor: {{className: drop_assessor.DropAssessor, codeDirectory: {CLASSES}}}\n"
    )
    experiment, store = experiment_with_store(tmp_path / "c.yml", config, EXPERIMENT, tmp_path / "s.db", tmp_path)
    store.open_experiment(EXPERIMENT, "maximize")
    for index in range(2):
        asked = ask(store, EXPERIMENT, index, f"{EXPERIMENT}-{index:04d}", experiment.algorithm, SPACE)
        _finish(store, asked, 0.5, TrialStatus.SUCCEEDED if index == 0 else TrialStatus.FAILED)
    [note] = tell_custom_classes(experiment, store)
    assert note == "DropAssessor (assessor) was told the results and ends it had not heard"
    ended = _object(store, "assessor").ended
    assert ended == [(f"{EXPERIMENT}-0000", True), (f"{EXPERIMENT}-0001", False)]
    assert tell_custom_classes(experiment, store) == []
