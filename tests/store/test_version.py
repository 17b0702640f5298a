"""The look at a SQLite store's version that a warm `trialflow run` takes before its trigger:
"current" exactly where the full open would find nothing to do, and nothing written."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
import sqlalchemy as sa

from trialflow.store import version as store_version
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.store.schema import state
from trialflow.store.schema_check import was_checked
from trialflow.store.version import HEAD, StoreSchemaError, sqlite_store_is_current


def opened(tmp_path: Path) -> Path:
    database = tmp_path / "experiments.db"
    ExperimentStore(sqlite_url(database))
    return database


def write(database: Path, sql: str) -> None:
    with closing(sqlite3.connect(database)) as conn, conn:
        conn.execute(sql)


def full_open_finds_nothing_to_do(database: Path) -> bool:
    engine = sa.create_engine(sqlite_url(database), poolclass=sa.pool.NullPool)
    return state(engine).current and was_checked(engine)


def test_a_store_this_code_opened_is_current(tmp_path):
    database = opened(tmp_path)
    assert sqlite_store_is_current(database)
    assert full_open_finds_nothing_to_do(database)


def test_no_file_is_not_current_and_no_file_is_made(tmp_path):
    assert not sqlite_store_is_current(tmp_path / "experiments.db")
    assert not (tmp_path / "experiments.db").exists()


@pytest.mark.parametrize("content", [b"", b"not a database at all" * 100])
def test_an_empty_or_foreign_file_is_not_current_and_is_left_as_it_was(tmp_path, content):
    database = tmp_path / "experiments.db"
    database.write_bytes(content)
    assert not sqlite_store_is_current(database)
    assert database.read_bytes() == content


def test_a_store_of_another_revision_is_not_current_and_the_full_open_says_why(tmp_path):
    database = opened(tmp_path)
    write(database, "UPDATE trialflow_alembic_version SET version_num = '0003'")
    assert not sqlite_store_is_current(database)
    with pytest.raises(StoreSchemaError, match="trialflow db upgrade"):
        ExperimentStore(sqlite_url(database))


def test_two_revision_rows_are_not_current(tmp_path):
    database = opened(tmp_path)
    write(database, f"INSERT INTO trialflow_alembic_version VALUES ('{HEAD}x')")
    assert not sqlite_store_is_current(database)


def test_another_optuna_version_or_a_moved_optuna_schema_is_not_current(tmp_path, monkeypatch):
    database = opened(tmp_path)
    monkeypatch.setattr(store_version, "version", lambda name: "0.0.1")
    assert not sqlite_store_is_current(database)
    monkeypatch.undo()
    assert sqlite_store_is_current(database)
    write(database, "UPDATE alembic_version SET version_num = 'v0.0.0.a'")
    assert not sqlite_store_is_current(database)
    assert not full_open_finds_nothing_to_do(database)


def test_the_look_takes_no_lock_a_writer_would_wait_on(tmp_path):
    database = opened(tmp_path)
    with closing(sqlite3.connect(database)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("DELETE FROM trialflow_checked_schema")
        assert sqlite_store_is_current(database)  # WAL: the reader sees the last commit
        writer.commit()
    assert not sqlite_store_is_current(database)


def test_a_warm_run_is_prepared_without_optuna_or_sqlalchemy(tmp_path):
    """What a warm `trialflow run` imports before its trigger (store current): neither Optuna nor
    SQLAlchemy nor Airflow, ~1 s of its start on two cores (measured: 1.8 -> 0.7-1.0 s)."""
    home = tmp_path / "home"
    opened(home)
    config = tmp_path / "c.yml"
    config.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\n"
        "maxTrialNumber: 2\ntrialConcurrency: 1\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    probe = (
        "import sys\nfrom pathlib import Path\nimport trialflow.cli, trialflow.cli.progress\n"
        "from trialflow.cli.runner import ExperimentRun\n"
        "from trialflow.store.version import sqlite_store_is_current\n"
        "run = ExperimentRun(sys.argv[1], Path(sys.argv[2]))\n"
        "print(sqlite_store_is_current(run.home / 'experiments.db'),"
        " sorted({m.split('.')[0] for m in sys.modules} & {'optuna', 'sqlalchemy', 'airflow', 'alembic'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(config), str(home)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "[]"]
