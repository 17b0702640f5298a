"""An NNI experiment made a store experiment (issue 40, 1): the real nni 3.0's output, and what
is refused whole."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from trialflow import queries
from trialflow.nni_history import NniHistoryError, read_experiment
from trialflow.seeding.nni_import import IMPORTED_ATTR, NNI_JOB_ATTR, import_experiment, import_id
from trialflow.tuning.asker import ask


@pytest.mark.nni
def test_a_real_nni_experiment_comes_in_with_its_trials_parameters_and_results(store, nni_folder):
    nni = read_experiment(nni_folder)
    done = import_experiment(store, nni, "dag_tuning")
    assert done.experiment_id == f"nni-{nni.experiment_id}" and done.trials == 4
    rows = store.trial_rows(done.experiment_id)
    assert len(rows) == 4
    for row, trial in zip(rows, nni.trials, strict=True):
        assert row.parameters == trial.parameters  # exactly, through the tuner's own path
        assert row.status == "SUCCEEDED" and row.final_metric == pytest.approx(trial.final["default"])
        assert row.intermediate_count == 3
        record = store.find_trial(done.experiment_id, row.trial_index)
        assert store.trial_attr(record.storage_id, NNI_JOB_ATTR) == trial.trial_job_id
    attrs = store.experiment_attrs(done.experiment_id)
    assert attrs["dag_id"] == "dag_tuning" and attrs[IMPORTED_ATTR]["nni_id"] == nni.experiment_id
    # the pages' and the CLI's read models see it like any other experiment
    (listed,) = [r for r in queries.list_experiments(store.engine) if r.experiment_id == done.experiment_id]
    assert listed.trials == 4 and listed.dag_id == "dag_tuning"
    # its times are NNI's (when the trials ran), not the import's
    page = queries.trials_page(store.engine, done.experiment_id, limit=10)["rows"]
    for shown, trial in zip(page, nni.trials, strict=True):
        assert shown["started"] == pytest.approx(trial.started, abs=1e-3)
        assert shown["ended"] == pytest.approx(trial.ended, abs=1e-3)
    assert listed.started == pytest.approx(min(t.started for t in nni.trials), abs=1e-3)
    assert listed.imported_from == nni.experiment_id
    summary = queries.experiment_summary(store.engine, done.experiment_id)
    assert summary["imported_from"] == {"system": "NNI", "nni_id": nni.experiment_id, "swapped": nni.swapped}
    with pytest.raises(NniHistoryError, match="exists already"):
        import_experiment(store, nni, "dag_tuning")


def nni_folder_with(tmp_path, parameters: dict, status: str = "SUCCEEDED"):
    from tests.security.test_nni_databases import database

    folder = database(tmp_path)
    conn = sqlite3.connect(folder / "db" / "nni.sqlite")
    conn.execute(
        "UPDATE TrialJobEvent SET data = ? WHERE event = 'RUNNING'",
        (json.dumps({"parameter_id": 0, "parameters": parameters}),),
    )
    conn.execute("UPDATE TrialJobEvent SET event = ? WHERE event = 'SUCCEEDED'", (status,))
    conn.commit()
    conn.close()
    return folder


def test_parameters_outside_the_space_refuse_the_import_and_nothing_is_written(store, tmp_path):
    nni = read_experiment(nni_folder_with(tmp_path, {"x": 7.0}))
    with pytest.raises(NniHistoryError, match="trial T1: its parameters do not fit the search space"):
        import_experiment(store, nni, "dag_a")
    assert not store.experiment_exists(import_id(nni.experiment_id))


@pytest.mark.both_databases
def test_a_write_that_fails_half_way_leaves_no_experiment(store, tmp_path, monkeypatch):
    nni = read_experiment(nni_folder_with(tmp_path, {"x": 0.5}))

    def broken(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(store, "record_metrics", broken)
    with pytest.raises(RuntimeError):
        import_experiment(store, nni, "dag_a")
    assert not store.experiment_exists(import_id(nni.experiment_id))
    assert not [r for r in queries.list_experiments(store.engine) if r.experiment_id == import_id(nni.experiment_id)]
    monkeypatch.undo()
    assert import_experiment(store, nni, "dag_a").trials == 1  # and it can be imported again


def test_a_trial_nni_left_running_is_imported_as_cancelled(store, tmp_path):
    nni = read_experiment(nni_folder_with(tmp_path, {"x": 0.5}, status="RUNNING"))
    done = import_experiment(store, nni, "dag_a", experiment_id="eimported1")
    (row,) = store.trial_rows(done.experiment_id)
    assert row.status == "SYS_CANCELED" and "not finished when NNI stopped" in row.message


@pytest.mark.parametrize("given", ["UPPER", "../x", "a" * 70])
def test_an_experiment_id_is_checked(store, tmp_path, given):
    nni = read_experiment(nni_folder_with(tmp_path, {"x": 0.5}))
    with pytest.raises(NniHistoryError, match="expected lowercase letters"):
        import_experiment(store, nni, "dag_a", experiment_id=given)


def test_the_command_imports_a_folder_or_an_id_under_nnis_default(tmp_path, monkeypatch, capsys):
    from trialflow.cli.definition import build_parser
    from trialflow.cli.store_commands import nni_folder_of

    folder = nni_folder_with(tmp_path / "a", {"x": 0.5})
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    assert nni_folder_of("abcd1234") == home / "nni-experiments" / "abcd1234"
    assert nni_folder_of(str(folder)) == folder  # a folder is a folder
    assert nni_folder_of("../abcd1234") == Path("../abcd1234")  # a path is never an id
    (home / "nni-experiments").mkdir(parents=True)
    folder.rename(home / "nni-experiments" / "abcd1234")
    store = f"sqlite:///{tmp_path / 'store.db'}"

    def run(*argv: str) -> tuple[int, str]:
        args = build_parser().parse_args(list(argv))
        code = args.func(args)
        return code, capsys.readouterr().err

    # issue 64, 8: a refused import made a 180 KB store file holding every table
    for argv, words in (
        (["--dag", "bad dag"], "--dag 'bad dag': not an Airflow DAG id"),
        (["--dag", "dag_a", "--experiment-id", "Not_An_Id"], "experiment id 'Not_An_Id': expected lowercase"),
    ):
        code, said = run("import-nni", "abcd1234", *argv, "--store", store)
        assert code == 1 and words in said, said
        assert not (tmp_path / "store.db").exists()
    code, said = run("import-nni", "abcd1234", "--dag", "dag_a", "--store", store)
    assert code == 0 and "imported as nni-abcd1234 under DAG dag_a: 1 trial(s)" in said
    code, said = run("import-nni", "abcd1234", "--dag", "dag_a", "--store", store)
    assert code == 1 and "exists already" in said
    code, said = run("import-nni", "nosuch", "--dag", "dag_a", "--store", store)
    assert code == 1 and "no NNI database here" in said


@pytest.mark.nni
def test_nnis_export_and_import_data_files_come_in_with_the_experiments_config(tmp_path, nni_folder, capsys):
    from tests.helpers.nni_run import config_of, export_files
    from trialflow.cli.definition import build_parser
    from trialflow.store.experiment_store import ExperimentStore

    store = f"sqlite:///{tmp_path / 'store.db'}"

    def run(*argv: str) -> tuple[int, str]:
        args = build_parser().parse_args(list(argv))
        code = args.func(args)
        return code, capsys.readouterr().err

    exported_json, exported_csv = export_files(nni_folder)
    config = str(config_of(nni_folder))
    code, said = run("import-nni", str(exported_json), "--dag", "dag_a", "--store", store)
    assert code == 1 and "pass the experiment's NNI config with --config" in said
    for path, name in ((exported_json, "from-json"), (exported_csv, "from-csv")):
        code, said = run(
            "import-nni", str(path), "--config", config, "--dag", "dag_a", "--experiment-id", name, "--store", store
        )
        assert code == 0 and f"imported as {name} under DAG dag_a: 4 trial(s)" in said, said
    # "import data" (what nnictl experiment import fed a tuner): parameter + value lists
    data = tmp_path / "data.json"
    data.write_text(json.dumps([{"parameter": {"x": 0.25, "k": "b"}, "value": 2.5}]))
    code, said = run("import-nni", str(data), "--config", config, "--dag", "dag_a", "--store", store)
    assert code == 0 and "imported as nni-data under DAG dag_a: 1 trial(s)" in said, said
    opened = ExperimentStore(store)
    folder = {t.trial_job_id: t for t in read_experiment(nni_folder).trials if t.event_parameter_id is None}
    for name in ("from-json", "from-csv"):
        rows = opened.trial_rows(name)
        assert len(rows) == 4 and all(r.status == "SUCCEEDED" for r in rows)
        for row in rows:
            job = opened.trial_attr(opened.find_trial_id(name, row.trial_index), NNI_JOB_ATTR)
            if job in folder:
                assert row.parameters == pytest.approx(folder[job].parameters)
                assert row.final_metric == pytest.approx(folder[job].final["default"])
                assert row.intermediate_count == 3
    (only,) = opened.trial_rows("nni-data")
    assert only.parameters == {"x": 0.25, "k": "b"} and only.final_metric == 2.5


@pytest.mark.nni
def test_a_new_experiment_warm_started_from_the_import_learns_from_nnis_trials(store, nni_folder, tmp_path):
    """NNI's `experiment import`, as trialflow does it: the real nni 3.0 experiment imported,
    a new experiment of the DAG names it in warmStart; its tuner's history holds NNI's four
    results, and with the same seed its first TPE asks differ from a cold start's."""
    import optuna

    from trialflow.config import load_config
    from trialflow.experiment import Experiment
    from trialflow.runs import start_run
    from trialflow.store.prior_trials import PRIOR_ATTR

    nni = read_experiment(nni_folder)
    done = import_experiment(store, nni, "dag_tuning")
    base = (
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}, k: {_type: choice, _value: [a, b]}}\n"
        "trialCommand: python3 t.py\ntrialConcurrency: 1\nmaxTrialNumber: 4\ntrainingService: {platform: local}\n"
        # NNI's TPE draws at random for its first n_startup_jobs trials (20): 3 here, below NNI's 4
        "tuner: {name: TPE, classArgs: {optimize_mode: maximize, seed: 5, tpe_args: {n_startup_jobs: 3}}}\n"
    )

    def experiment(name: str, extra: str = "") -> Experiment:
        (tmp_path / f"{name}.yml").write_text(base + extra)
        made = Experiment(load_config(tmp_path / f"{name}.yml"), name, tmp_path / "work")
        start_run(made, store, "dag_tuning", f"manual__{name}", {})
        return made

    def asks(made: Experiment) -> list[dict]:
        return [
            ask(store, made.experiment_id, i, f"{made.experiment_id}-{i}", made.algorithm, made.space).parameters
            for i in range(2)
        ]

    warm = experiment("e-warm", f"warmStart: {{experiment: {done.experiment_id}}}\n")
    history = optuna.load_study(study_name="e-warm", storage=store.storage).trials
    learnt = sorted(t.value for t in history if PRIOR_ATTR in t.user_attrs)
    assert learnt == pytest.approx(sorted(t.final["default"] for t in nni.trials))
    cold = experiment("e-cold")
    assert asks(warm) != asks(cold)


def _unfinished(tmp_path, profile_end: int | None) -> Path:
    """The good trial T1 (2.0 s .. 3.0 s), T2 running when NNI stopped (RUNNING at 4.0 s, a
    metric at 4.5 s, no end), and T3 that never ran (WAITING at 5.0 s only)."""
    from tests.security.test_nni_databases import database

    running = json.dumps({"parameter_id": 1, "parameters": {"x": 0.25}})
    waiting = json.dumps({"parameter_id": 2, "parameters": {"x": 0.75}})
    folder = database(
        tmp_path,
        rows={
            "TrialJobEvent": [
                (4000, "T2", "RUNNING", running, "/l", 1, None, "e"),
                (5000, "T3", "WAITING", waiting, "/l", 2, None, "e"),
            ],
            "MetricData": [(4500, "T2", "1", "PERIODICAL", 0, json.dumps(json.dumps(0.1)))],
        },
    )
    conn = sqlite3.connect(folder / "db" / "nni.sqlite")
    conn.execute("UPDATE ExperimentProfile SET endTime = ?", (profile_end,))
    conn.commit()
    conn.close()
    return folder


@pytest.mark.parametrize(("profile_end", "t2_end"), [(9000, 9.0), (None, 4.5)])
def test_trials_nni_left_unfinished_keep_nnis_times_never_the_imports(store, tmp_path, profile_end, t2_end):
    """Issue 46, 8: a job still running when NNI stopped read the import's time as its end (the
    experiment 25 h 36 min where NNI's profile said 26.6 s; a job with no start 498,822 h)."""
    nni = read_experiment(_unfinished(tmp_path, profile_end))
    done = import_experiment(store, nni, "dag_a", experiment_id="etimes")
    rows = {r["trial_index"]: r for r in queries.trials_page(store.engine, "etimes")["rows"]}
    assert (rows[0]["started"], rows[0]["ended"]) == (2.0, 3.0) and rows[0]["duration"] == pytest.approx(1.0)
    # NNI's end of the experiment, or the job's last event or metric
    assert (rows[1]["started"], rows[1]["ended"]) == (4.0, t2_end)
    assert rows[1]["duration"] == pytest.approx(t2_end - 4.0)
    # never started: no start, so no duration ("unknown"), never "until now"
    assert rows[2]["started"] is None and rows[2]["duration"] is None
    # the experiment spans its trials' times as NNI recorded them (T3 was last seen at 5.0 s)
    summary = queries.experiment_summary(store.engine, done.experiment_id)
    assert summary["started"] == 2.0 and summary["ended"] == max(t2_end, 5.0)
    (listed,) = [r for r in queries.list_experiments(store.engine) if r.experiment_id == "etimes"]
    assert (listed.started, listed.ended) == (summary["started"], summary["ended"])


def test_imported_trials_are_the_tuners_not_added_by_a_person(store, tmp_path):
    """Issue 46, 9: every imported trial was badged "added" / "customized"."""
    from tests.security.test_nni_databases import database

    customized = json.dumps({"parameter_id": 1, "parameters": {"x": 0.25}, "parameter_source": "customized"})
    folder = database(
        tmp_path,
        rows={
            "TrialJobEvent": [
                (4000, "T2", "RUNNING", customized, "/l", 1, None, "e"),
                (4100, "T2", "SUCCEEDED", None, "/l", 1, None, "e"),
            ]
        },
    )
    import_experiment(store, read_experiment(folder), "dag_a", experiment_id="ebadges")
    rows = queries.trials_page(store.engine, "ebadges")["rows"]
    assert [(r["parameter_source"], r["added_by"], r["imported"]) for r in rows] == [
        ("algorithm", None, True),  # NNI's tuner chose them
        ("customized", None, True),  # NNI's user did, in NNI
    ]
    _, exported = queries.export_rows(store.engine, "ebadges")
    assert [(r["parameter_source"], r["added_by"]) for r in exported] == [("algorithm", None), ("customized", None)]


@pytest.mark.parametrize("dag", ["", "a b", "../x", "dag;rm", "d" * 251, "x\n"])
def test_the_dag_is_checked_as_an_airflow_dag_id(store, tmp_path, dag):
    nni = read_experiment(nni_folder_with(tmp_path, {"x": 0.5}))
    with pytest.raises(NniHistoryError, match="not an Airflow DAG id"):
        import_experiment(store, nni, dag)
    assert not store.experiment_exists(import_id(nni.experiment_id))
    assert import_experiment(store, nni, "dag.a-1_ok").trials == 1


def test_a_key_nni_json_holds_twice_is_refused_naming_it(tmp_path):
    from tests.security.test_nni_databases import database

    twice = '{"parameter_id": 1, "parameters": {"x": 0.25, "x": 0.9}}'
    folder = database(tmp_path, rows={"TrialJobEvent": [(4000, "T2", "RUNNING", twice, "/l", 1, None, "e")]})
    with pytest.raises(
        NniHistoryError, match=r"TrialJobEvent rowid 3.data: not valid JSON \(the key 'x' appears twice"
    ):
        read_experiment(folder)


def test_a_pbt_experiment_comes_in_without_nnis_checkpoint_folders(store, tmp_path):
    """NNI's PBTTuner handed its trials the folders to load from and save to, as parameters:
    paths on NNI's shared disk, no parameter of the space; the trial's own come in."""
    folder = nni_folder_with(
        tmp_path, {"x": 0.5, "load_checkpoint_dir": "/ckpt/0/0", "save_checkpoint_dir": "/ckpt/0/0"}
    )
    conn = sqlite3.connect(folder / "db" / "nni.sqlite")
    (params,) = conn.execute("SELECT params FROM ExperimentProfile").fetchone()
    config = json.loads(params)
    config["tuner"] = {"name": "PBTTuner", "classArgs": {"optimize_mode": "maximize", "population_size": 2}}
    conn.execute("UPDATE ExperimentProfile SET params = ?", (json.dumps(config),))
    conn.commit()
    conn.close()
    done = import_experiment(store, read_experiment(folder), "dag_a", experiment_id="epbtimport")
    (row,) = store.trial_rows(done.experiment_id)
    assert row.parameters == {"x": 0.5} and row.status == "SUCCEEDED"
