"""NNI's result files (issue 40, 1): the real nni 3.0's ``nnictl experiment export`` (JSON and
CSV, written by the experiment the suite runs) and the "import data" JSON its tuners took."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.helpers.nni_run import export_files
from trialflow.nni_history import NniHistoryError, read_experiment, read_result_file

SPACE = {"x": {"_type": "uniform", "_value": [0, 1]}, "k": {"_type": "choice", "_value": ["a", "b"]}}
CONFIG = {"searchSpace": SPACE, "tuner": {"name": "TPE", "classArgs": {"optimize_mode": "maximize"}}}


@pytest.mark.nni
@pytest.mark.parametrize("kind", ["json", "csv"])
def test_nnis_own_export_reads_as_the_same_trials_as_its_database(nni_folder, kind):
    exported = read_result_file(export_files(nni_folder)[["json", "csv"].index(kind)], CONFIG)
    database = {t.trial_job_id: t for t in read_experiment(nni_folder).trials}
    assert {t.trial_job_id for t in exported.trials} == set(database)
    for trial in exported.trials:
        known = database[trial.trial_job_id]
        assert trial.status == "SUCCEEDED"
        if known.event_parameter_id is not None:
            continue  # NNI's export pairs a job with its event's parameters, not those it ran
        assert trial.parameters == pytest.approx(known.parameters)
        assert trial.final == pytest.approx(known.final)
        # the export's list holds the final record too, in the REST server's order (NNI's groupby
        # discards its sort; CI saw the final second of four): dropped, the intermediate results stay
        assert sorted(trial.intermediate) == pytest.approx(sorted(known.intermediate))


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("steps", "final", "kept"),
    [
        (["0.1", "0.2", '{"default": 0.3, "loss": 1}'], {"default": 0.3, "loss": 1}, [0.1, 0.2]),
        (["0.1", '{"default": 0.3, "loss": 1}', "0.2", "0.25"], {"default": 0.3, "loss": 1}, [0.1, 0.2, 0.25]),
        (["0.3", "0.1", "0.3"], 0.3, [0.3, 0.1]),  # an intermediate equal to the final stays once
        (["0.1", "0.2"], 0.3, [0.1, 0.2]),  # no final record in the list: nothing dropped
        ([], 0.3, []),
    ],
)
def test_the_exports_final_record_is_dropped_wherever_it_stands(tmp_path, steps, final, kept):
    record = {"parameter": {"x": 0.5, "k": "a"}, "value": json.dumps(final), "trialJobId": "J", "intermediate": steps}
    got = read_result_file(write(tmp_path, "e.json", json.dumps([record])), CONFIG)
    assert got.trials[0].intermediate == kept and got.trials[0].final == final
    reward = {"reward": final} if isinstance(final, float) else final
    out = io.StringIO()  # as nnictl writes the CSV: csv.DictWriter, the list joined as text
    writer = csv.DictWriter(out, ["x", "k", *reward, "trialJobId", "intermediate"])
    writer.writeheader()
    writer.writerow({"x": 0.5, "k": "a", **reward, "trialJobId": "J", "intermediate": "[" + ",".join(steps) + "]"})
    text = out.getvalue()
    got = read_result_file(write(tmp_path, "e.csv", text), CONFIG)
    assert got.trials[0].intermediate == kept


def test_import_data_records_take_a_number_or_a_dict(tmp_path):
    records = [
        {"parameter": {"x": 0.5, "k": "a"}, "value": 0.9},
        {"parameter": {"x": 0.1, "k": "b"}, "value": {"default": 0.2, "acc": 1}},
    ]
    got = read_result_file(write(tmp_path, "data.json", json.dumps(records)), CONFIG)
    assert [t.parameters for t in got.trials] == [r["parameter"] for r in records]
    assert [t.final for t in got.trials] == [0.9, {"default": 0.2, "acc": 1}]
    assert [t.trial_job_id for t in got.trials] == ["record-0", "record-1"]
    assert got.experiment_id == "data" and got.config == CONFIG


def test_a_csv_is_typed_by_the_search_space_in_any_column_order(tmp_path):
    space = {**SPACE, "n": {"_type": "randint", "_value": [1, 9]}, "c": {"_type": "choice", "_value": [1, 2.5, True]}}
    text = "trialJobId,k,reward,n,x,c\nJ1,b,0.75,3,0.25,2.5\nJ2,a,1e-3,4,0.5,True\n"
    got = read_result_file(write(tmp_path, "e.csv", text), {**CONFIG, "searchSpace": space})
    assert [t.parameters for t in got.trials] == [
        {"k": "b", "n": 3, "x": 0.25, "c": 2.5},
        {"k": "a", "n": 4, "x": 0.5, "c": True},
    ]
    assert [t.final for t in got.trials] == [0.75, 0.001]
    assert isinstance(got.trials[0].parameters["n"], int)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("e.json", "{}", "expected a JSON list of {parameter, value} records, got dict"),
        ("e.json", '[{"parameter": [1], "value": 1}]', "record 0.parameter: expected an object, got list"),
        ("e.json", '[{"parameter": {"x": 0.5, "k": "a"}, "value": "oops"}]', "record 0.value: not valid JSON"),
        (
            "e.json",
            '[{"parameter": {"x": 0.5, "k": "a"}, "value": true}]',
            "record 0.value: expected a number or an object",
        ),
        ("e.json", '[{"parameter": {"x": 0.5, "k": "a"}, "value": {"acc": 1}}]', "needs a 'default' key"),
        ("e.json", "[" * 100_000 + "]" * 100_000, "the file: not valid JSON"),
        ("e.json", "[]", "no result in it"),
        # issue 46, 9: taken silently before (the last one won)
        ("e.json", '[{"parameter": {"x": 0.5, "x": 0.7, "k": "a"}, "value": 1}]', "the key 'x' appears twice"),
        ("e.json", '[{"parameter": {"x": 0.5, "k": "a"}, "value": 1, "value": 2}]', "the key 'value' appears twice"),
        ("e.csv", "x,k,reward\nnope,a,1\n", "line 2, column 'x': expected a number, got 'nope'"),
        ("e.csv", "x,k,reward\n0.5,c,1\n", "line 2, column 'k': 'c' is none of the choices"),
        ("e.csv", "x,k,reward\n0.5,a,inf\n", "column 'reward': expected a finite number"),
        ("e.csv", "x,reward\n0.5,1\n", "no column for parameter 'k'"),
        ("e.csv", "x,k\n0.5,a\n", "line 2: no result (expected a 'reward' or 'default' column)"),
        ("e.csv", "x,k,reward\n0.5,a,1,9\n", "line 2: more cells than the header"),
        ("e.csv", "x,k,reward\n" + "9" * 5000 + ",a,1\n", "expected text of 0..4096 characters, got 5000"),
    ],
)
def test_hostile_files_are_refused_naming_where(tmp_path, name, text, message):
    path = write(tmp_path, name, text)
    with pytest.raises(NniHistoryError) as caught:
        read_result_file(path, CONFIG)
    assert message in str(caught.value) and str(path) in str(caught.value)


def test_a_nested_choice_in_a_csv_points_to_the_json_export(tmp_path):
    nested = {"m": {"_type": "choice", "_value": [{"_name": "a", "lr": {"_type": "uniform", "_value": [0, 1]}}]}}
    path = write(tmp_path, "e.csv", "m,reward\n\"{'_name': 'a', 'lr': 0.5}\",1\n")
    with pytest.raises(NniHistoryError, match="import the JSON export"):
        read_result_file(path, {**CONFIG, "searchSpace": nested})


def test_no_file_no_space_and_a_symlink_are_refused(tmp_path):
    with pytest.raises(NniHistoryError, match="no such file"):
        read_result_file(tmp_path / "missing.json", CONFIG)
    real = write(tmp_path, "real.json", "[]")
    (tmp_path / "link.json").symlink_to(real)
    with pytest.raises(NniHistoryError, match="no such file"):
        read_result_file(tmp_path / "link.json", CONFIG)
    with pytest.raises(NniHistoryError, match="no searchSpace"):
        read_result_file(real, {})
