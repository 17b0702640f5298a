"""Stores written by earlier trialflow releases (issue 40, 2): the committed fixture stores of
tests/fixtures/stores, on SQLite and PostgreSQL, are refused until upgraded (the message says
what to run), then open, show and continue with the current code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa

from trialflow import queries
from trialflow.cli.commands import main
from trialflow.platforms.base import TrialStatus
from trialflow.store import schema as store_schema
from trialflow.store.concurrency_changes import read_concurrency
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.store.version import HEAD, StoreSchemaError
from trialflow.tuning.asker import ask

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stores"
RELEASES = ["0.1.0"]


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, tmp_path):
    """An empty database of the test's own (SQLite file, or a PostgreSQL database) and how to
    load a fixture store into it."""
    if request.param == "sqlite":
        path = tmp_path / "old.db"

        def load(release: str) -> str:
            shutil.copy(FIXTURES / f"trialflow-{release}.sqlite", path)
            return sqlite_url(path)

        return load
    admin = request.getfixturevalue("postgres_url").replace("postgresql://", "postgresql+psycopg://")
    name = f"up{abs(hash(str(tmp_path))) % 10**8}"
    with sa.create_engine(admin, isolation_level="AUTOCOMMIT").connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    url = admin.rsplit("/", 1)[0] + f"/{name}"

    def load_pg(release: str) -> str:
        import psycopg

        dump = (FIXTURES / f"trialflow-{release}.postgresql.sql").read_text()
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
            conn.execute(dump)  # pg_dump's plain SQL, run as one simple query
        return url

    return load_pg


def cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("release", RELEASES)
def test_an_earlier_releases_store_is_refused_then_upgraded_then_opens_shows_and_continues(database, release, capsys):
    url = database(release)
    # refused where it opens (a task, the CLI), saying what to run; nothing changed
    with pytest.raises(
        StoreSchemaError, match=rf"written by trialflow {release} .* run `trialflow db upgrade --store URL"
    ):
        ExperimentStore(url)
    code, said = cli(capsys, "experiments", "--store", url)
    assert code == 1 and "trialflow db upgrade" in said and "Traceback" not in said
    code, said = cli(capsys, "db", "check", "--store", url)
    assert code == 1 and f"needs schema {HEAD}" in said
    # the upgrade, then again (nothing to do)
    code, said = cli(capsys, "db", "upgrade", "--store", url)
    assert code == 0 and f"0.1.0's unversioned tables -> schema {HEAD}" in said, said
    code, said = cli(capsys, "db", "upgrade", "--store", url)
    assert code == 0 and f"already at schema {HEAD}" in said
    code, said = cli(capsys, "db", "check", "--store", url)
    assert code == 0
    store = ExperimentStore(url)
    engine = store.engine
    # it shows: the pages' and the CLI's read models, as the old release wrote it
    listed = {r.experiment_id: r for r in queries.list_experiments(engine)}
    assert listed["fixture-finished"].counts == {"SUCCEEDED": 38, "FAILED": 1, "EARLY_STOPPED": 1}
    assert listed["fixture-running"].counts == {"SUCCEEDED": 2, "RUNNING": 1}
    summary = queries.experiment_summary(engine, "fixture-finished")
    assert summary["best"]["metric"] == max(r.final_metric or 0 for r in store.trial_rows("fixture-finished"))
    assert queries.curves(engine, "fixture-finished", None)["curves"]
    assert "".join(queries.iter_csv(engine, "fixture-finished")).count("\n") == 41  # the header and 40 trials
    # it continues: the running trial closes, the asked-for trial runs next, the limit holds
    running = store.find_trial("fixture-running", 2)
    assert running is not None and store.close(running.storage_id, TrialStatus.SUCCEEDED).status is not None
    from trialflow.config.model import AlgorithmConfig
    from trialflow.config.search_space import parse_search_space

    config = queries.experiment_config(engine, "fixture-running")
    tuner = AlgorithmConfig.model_validate(config["tuner"])
    space = parse_search_space(config["searchSpace"])
    asked = ask(store, "fixture-running", 3, "fixture-running-0003", tuner, space)
    assert asked.parameters == {"x": 0.5, "k": "b"} and not asked.resumed
    store.finish(asked.storage_id, TrialStatus.SUCCEEDED, 0.5)
    following = ask(store, "fixture-running", 4, "fixture-running-0004", tuner, space)  # the tuner's own
    assert set(following.parameters) == {"x", "k"}
    assert read_concurrency(engine, "fixture_dag_running") == 3
    # and the 0.1.0 key length is gone: a task group's limits row of two long ids fits
    from trialflow.store.concurrency_changes import limits_key, write_concurrency

    write_concurrency(engine, limits_key("d" * 250, "g" * 250), "fixture-running", 2)
    assert read_concurrency(engine, limits_key("d" * 250, "g" * 250)) == 2
    assert store_schema.state(engine).revision == HEAD


def test_trialflow_run_on_a_home_of_an_earlier_release_says_what_to_run_before_starting_airflow(tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(FIXTURES / "trialflow-0.1.0.sqlite", home / "experiments.db")
    config = tmp_path / "config.yml"
    config.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\ntrialConcurrency: 1\n"
        "maxTrialNumber: 1\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    code, said = cli(capsys, "run", str(config), "--home", str(home))
    squeezed = "".join(said.split())  # rich wraps the line anywhere
    assert code == 1 and "".join(f"run `trialflow db upgrade --home {home}`".split()) in squeezed, said
    assert "Starting Airflow" not in said and not (home / "airflow" / "airflow.cfg").exists()
    code, said = cli(capsys, "db", "upgrade", "--home", str(home))
    assert code == 0 and f"schema {HEAD}" in said
