"""trialflow's tables carry a schema version (issue 40, 2): new stores are made at HEAD, the
migrations make exactly the tables the code defines, a store of another schema is refused
saying what to run, and an upgrade is whole or nothing."""

from __future__ import annotations

import shutil

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from trialflow.store import schema as store_schema
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.store.version import HEAD, RELEASES, VERSION_TABLE, StoreSchemaError


def scripts() -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", str(store_schema.MIGRATIONS))
    return ScriptDirectory.from_config(config)


def test_head_is_the_newest_migration_and_every_revision_names_its_release():
    assert scripts().get_current_head() == HEAD
    assert [r.revision for r in reversed(list(scripts().walk_revisions()))] == list(RELEASES)


def trialflow_only(obj, name, type_, reflected, compare_to):
    table = obj if type_ == "table" else getattr(obj, "table", None)
    return table is None or str(getattr(table, "name", name)).startswith("trialflow_") and name != VERSION_TABLE


def differences(engine: sa.Engine) -> list:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_object": trialflow_only, "version_table": VERSION_TABLE}
        )
        return compare_metadata(context, store_schema.head_metadata())


def empty_database(store) -> sa.Engine:
    """The store fixture's database with Optuna's tables and none of trialflow's."""
    engine = store.engine
    with engine.begin() as conn:
        for table in reversed(store_schema.head_metadata().sorted_tables):
            conn.execute(sa.text(f"DROP TABLE {table.name}"))
        conn.execute(sa.text(f"DROP TABLE {VERSION_TABLE}"))
    return engine


@pytest.mark.both_databases
def test_the_migrations_make_exactly_the_tables_the_code_defines(store):
    assert differences(store.engine) == []  # a new store, made from the code's tables
    engine = empty_database(store)
    assert store_schema.state(engine).fresh
    assert store_schema.upgrade(engine) == (None, HEAD)
    assert differences(engine) == []  # the same tables, made by 0001..HEAD


@pytest.mark.both_databases
def test_a_new_store_is_stamped_where_alembic_reads_it(store):
    with store.engine.connect() as conn:
        assert MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision() == HEAD
    assert store_schema.state(store.engine).current


@pytest.mark.both_databases
def test_a_store_of_a_newer_trialflow_is_refused_and_not_touched(store):
    with store.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '0099'"))
    url = store.engine.url.render_as_string(hide_password=False)
    with pytest.raises(
        StoreSchemaError, match="schema '0099', which trialflow .* does not know: it was written by a newer"
    ):
        ExperimentStore(url)
    with pytest.raises(StoreSchemaError, match="newer trialflow"):
        store_schema.upgrade(store.engine)
    assert store_schema.state(store.engine).revision == "0099"
    assert "trialflow_alembic_version" in sa.inspect(store.engine).get_table_names()
    assert "secret" not in str(url) or "secret" not in store_schema.refusal(
        store.engine, store_schema.state(store.engine)
    )


@pytest.mark.both_databases
def test_new_and_upgraded_stores_index_optunas_trials_by_study_and_state(store):
    """Migration 0003: counting an experiment's finished trials and reading its running ones
    scanned every trial of it; a new store has the index, a store of 0002 is refused until
    upgraded, and the upgrade adds it."""
    from trialflow.store.tables import TRIALS_BY_STATE

    engine = store.engine

    def indexed() -> list[str] | None:
        found = {i["name"]: i["column_names"] for i in sa.inspect(engine).get_indexes("trials")}
        return found.get(TRIALS_BY_STATE.name)

    assert indexed() == ["study_id", "state"]
    with engine.begin() as conn:  # what a store of schema 0002 holds
        conn.execute(sa.text(f"DROP INDEX {TRIALS_BY_STATE.name}"))
        conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '0002'"))
    with pytest.raises(StoreSchemaError, match="trialflow db upgrade"):
        ExperimentStore(engine.url.render_as_string(hide_password=False))
    assert indexed() is None
    assert store_schema.upgrade(engine) == ("0002", HEAD)
    assert indexed() == ["study_id", "state"]


def test_the_refusal_hides_the_password(tmp_path):
    engine = sa.create_engine("postgresql+psycopg://user:hunter2@127.0.0.1:1/db")
    said = store_schema.refusal(engine, store_schema.SchemaState(None, True))
    assert "hunter2" not in said and "trialflow db upgrade" in said and "0.1.0" in said


@pytest.mark.both_databases
def test_an_upgrade_that_fails_half_way_leaves_the_store_as_it_was(store, tmp_path, monkeypatch):
    engine = empty_database(store)
    with engine.begin() as conn:  # a 0.1.0 store: its trial index and limits table, no version
        conn.execute(
            sa.text(
                "CREATE TABLE trialflow_trial_index (study_id INTEGER, trial_index INTEGER, "
                "trial_id INTEGER NOT NULL, PRIMARY KEY (study_id, trial_index))"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TABLE trialflow_dag_limits (dag_id VARCHAR(250) PRIMARY KEY, "
                "experiment_id VARCHAR(64) NOT NULL, trial_concurrency INTEGER NOT NULL, "
                "updated_at FLOAT NOT NULL)"
            )
        )
        conn.execute(sa.text("INSERT INTO trialflow_dag_limits VALUES ('dag_a', 'e1', 3, 1.0)"))
    broken = tmp_path / "migrations"
    shutil.copytree(store_schema.MIGRATIONS, broken)
    second = broken / "versions" / "0002_wider_limits_key.py"
    second.write_text(
        second.read_text().replace(
            "def upgrade() -> None:\n", "def upgrade() -> None:\n    raise RuntimeError('the disk filled up')\n"
        )
    )
    monkeypatch.setattr(store_schema, "MIGRATIONS", broken)
    before = set(sa.inspect(engine).get_table_names())
    with pytest.raises(RuntimeError, match="the disk filled up"):
        store_schema.upgrade(engine)
    # 0001 had created the four missing tables and recorded itself: all of it rolled back
    assert set(sa.inspect(engine).get_table_names()) == before
    assert store_schema.state(engine) == store_schema.SchemaState(None, True)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT dag_id, trial_concurrency FROM trialflow_dag_limits")).all() == [
            ("dag_a", 3)
        ]
    monkeypatch.undo()
    assert store_schema.upgrade(engine) == (None, HEAD)  # the real migrations then go through


@pytest.mark.slow
def test_many_processes_opening_a_new_store_at_once_all_find_it_current(tmp_path):
    import concurrent.futures
    import subprocess
    import sys

    url = sqlite_url(tmp_path / "new.db")
    code = (
        "import sys; from trialflow.store.experiment_store import ExperimentStore; "
        "from trialflow.store.schema import state; "
        "s = ExperimentStore(sys.argv[1]); print(state(s.engine).revision)"
    )
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        runs = list(
            pool.map(
                lambda _: subprocess.run(
                    [sys.executable, "-c", code, url], capture_output=True, text=True, timeout=120
                ),
                range(6),
            )
        )
    assert [r.stdout.strip() for r in runs] == [HEAD] * 6, [r.stderr[-500:] for r in runs]
    assert differences(sa.create_engine(url)) == []


def test_a_table_written_before_the_store_was_first_opened_is_no_old_store(tmp_path):
    from trialflow.store.concurrency_changes import read_concurrency, write_concurrency

    engine = sa.create_engine(sqlite_url(tmp_path / "s.db"))
    write_concurrency(engine, "dag_a", "e1", 4)  # makes its table when first needed, as 0.1.0 did
    assert store_schema.state(engine).fresh
    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    assert store_schema.state(store.engine).current and differences(store.engine) == []
    assert read_concurrency(store.engine, "dag_a") == 4


@pytest.mark.both_databases
def test_a_store_made_between_the_two_reads_of_its_state_is_current_not_old(store):
    """The window CI met (issue 46, 0): an opener reads the version table before a twin made the
    store and looks at the tables after; the tables are there, so it reads the revision again
    instead of calling the store 0.1.0's."""
    engine = empty_database(store)
    url = engine.url.render_as_string(hide_password=False)
    twin = sa.create_engine(url)
    made = []

    @sa.event.listens_for(engine, "handle_error")
    def _twin_makes_the_store(context) -> None:  # the opener's first read found no version table
        if not made:
            made.append(True)
            store_schema.ensure_schema(twin, checked=False)

    try:
        found = store_schema.state(engine)
    finally:
        sa.event.remove(engine, "handle_error", _twin_makes_the_store)
        twin.dispose()
    assert made and found.current, found


@pytest.mark.both_databases
def test_a_new_store_is_never_seen_with_tables_and_no_version(store):
    """Creation and stamp are one transaction: a reader during creation sees no trialflow table
    or all of them with HEAD."""
    engine = empty_database(store)
    url = engine.url.render_as_string(hide_password=False)
    seen: list[tuple[str | None, bool]] = []
    reader = sa.create_engine(url)

    def look() -> None:
        names = set(sa.inspect(reader).get_table_names())
        with reader.connect() as conn:
            revision = (
                conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
                if VERSION_TABLE in names
                else None
            )
        seen.append((revision, "trialflow_trial_index" in names))

    @sa.event.listens_for(sa.Engine, "after_cursor_execute")
    def _look_after_each_statement(conn, cursor, statement, parameters, context, executemany) -> None:
        if conn.engine is not reader and statement.lstrip().upper().startswith("CREATE TABLE"):
            look()

    try:
        store_schema.create_store(engine)
    finally:
        sa.event.remove(sa.Engine, "after_cursor_execute", _look_after_each_statement)
    look()
    reader.dispose()
    assert len(seen) > 3 and all(s in {(None, False), (HEAD, True)} for s in seen), seen
    assert seen[-1] == (HEAD, True) and store_schema.state(engine).current


def test_every_trialflow_table_is_declared_in_one_metadata_and_the_schema_needs_no_optuna():
    """One declaration per table (trialflow.store.tables.METADATA), the one the migrations are
    compared with; the schema check imports no Optuna (`trialflow db check` and the pages)."""
    import subprocess
    import sys

    from trialflow.store import tables

    assert store_schema.head_metadata() is tables.METADATA
    assert all(name.startswith("trialflow_") for name in tables.METADATA.tables)
    assert VERSION_TABLE not in tables.METADATA.tables  # alembic's own, made by the stamp
    probe = "import sys, trialflow.store.schema; print('optuna' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
