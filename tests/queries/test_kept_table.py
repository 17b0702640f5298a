"""The trial table searched or sorted by a parameter from the kept trials: the order and the
matches are the table's (numbers, then texts, then nothing; any ASCII case), a settled trial's
column is read once while new and running trials are read each time, and columns past their
budget are dropped without changing an answer (SQLite and PostgreSQL)."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from tests.helpers.filled_store import RANDOM, SPACE, fill
from trialflow import queries
from trialflow.platforms.base import TrialStatus
from trialflow.queries import settled
from trialflow.queries.tables import study_id_of
from trialflow.tuning.asker import ask

pytestmark = pytest.mark.both_databases


@pytest.fixture(autouse=True)
def fresh_kept(store, monkeypatch):
    """Nothing kept from another test's store, and every ended trial settled at once."""
    settled._stores.pop(str(store.storage.engine.url), None)
    monkeypatch.setattr(settled, "SETTLE_S", -3600.0)
    yield
    settled._stores.pop(str(store.storage.engine.url), None)


def set_parameters(engine: sa.Engine, experiment_id: str, index: int, parameters: dict) -> None:
    """A trial's parameters written behind Optuna's back (what a hand-edited store may hold)."""
    with engine.begin() as conn:
        sid = study_id_of(conn, experiment_id)
        conn.execute(
            sa.text(
                "UPDATE trial_user_attributes SET value_json = :v WHERE key = 'parameters' AND trial_id = "
                "(SELECT trial_id FROM trialflow_trial_index WHERE study_id = :s AND trial_index = :i)"
            ),
            {"v": json.dumps(parameters), "s": sid, "i": index},
        )


def order(engine: sa.Engine, sort: str, descending: bool = False, **filters) -> list[int]:
    page = queries.trials_page(engine, "eq000001", sort=sort, descending=descending, limit=100, **filters)
    assert page["total"] == len(page["rows"])
    return [r["trial_index"] for r in page["rows"]]


def test_numbers_then_texts_by_code_point_then_nothing_ties_by_index(store):
    fill(store)
    engine = store.storage.engine
    values = {0: 3, 1: 1.5, 2: "beta", 3: "Zeta", 4: None, 5: {"_name": "gamma"}, 6: 1.5, 7: -2}
    for index, value in values.items():
        set_parameters(engine, "eq000001", index, {} if value is None else {"v": value})
    # numbers (the two 1.5 by index), then texts by code point ('Zeta' < 'beta', as in SQLite;
    # a PostgreSQL collation would put 'beta' first), a nested choice by its _name, then nothing
    assert order(engine, "param:v") == [7, 1, 6, 0, 3, 2, 5, 4]
    assert order(engine, "param:v", descending=True) == [0, 1, 6, 7, 5, 2, 3, 4]
    assert order(engine, "param:v", statuses=["SUCCEEDED"]) == [7, 6, 0, 2, 4]  # 0 2 4 6 7 succeeded
    assert order(engine, "param:v", indexes=[5, 3, 1]) == [1, 3, 5]
    assert order(engine, "param:nowhere") == list(range(8))


def test_a_settled_trials_column_is_read_once_and_new_trials_join_it(store):
    fill(store)  # trial 5 runs; the others ended
    engine = store.storage.engine
    for index in range(8):
        set_parameters(engine, "eq000001", index, {"v": 10 - index})
    assert order(engine, "param:v") == [7, 6, 5, 4, 3, 2, 1, 0]
    statements: list[str] = []

    def seen(conn, cursor, statement, *rest):
        statements.append(statement)

    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        # a settled trial never changes: written behind Optuna's back, it is not read again
        set_parameters(engine, "eq000001", 0, {"v": -100})
        # the running trial is read each time, and so is a new trial
        set_parameters(engine, "eq000001", 5, {"v": 100})
        asked = ask(store, "eq000001", 8, "eq000001-0008", RANDOM, SPACE)
        set_parameters(engine, "eq000001", 8, {"v": 5.5})
        statements.clear()
        assert order(engine, "param:v") == [7, 6, 8, 4, 3, 2, 1, 0, 5]
        column_reads = [s for s in statements if "trial_user_attributes AS p" in s]
        assert column_reads and all("trial_index IN" in s for s in column_reads)  # never the whole study
        # once settled, the new trial stays as read at its end
        store.finish(asked.storage_id, TrialStatus.SUCCEEDED, 1.0)
        assert order(engine, "param:v") == [7, 6, 8, 4, 3, 2, 1, 0, 5]
        set_parameters(engine, "eq000001", 8, {"v": -50})
        assert order(engine, "param:v") == [7, 6, 8, 4, 3, 2, 1, 0, 5]
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)


def test_a_search_matches_any_ascii_case_on_both_paths(store):
    made = fill(store)
    engine = store.storage.engine
    adam = {m["index"] for m in made if m["parameters"]["opt"]["_name"] == "adam"}
    assert adam and len(adam) < 8
    for text in ("adam", "ADAM", "aDaM"):
        kept = set(order(engine, "index", search=text))  # from the kept trials
        in_sql = set(order(engine, "metric", search=text))  # sorted by a value: searched in SQL
        assert kept == in_sql == adam, text
    assert order(engine, "index", search="EQ000001-0003") == [3]  # the trial id, any case
    assert order(engine, "index", search="boom") == [1]  # the failed trial's message
    assert order(engine, "index", search="Early_Stopped") == [3]  # the status
    assert order(engine, "index", search="100%") == []  # % is text, not a wildcard


def test_columns_past_their_budget_are_dropped_and_answers_do_not_change(store, monkeypatch):
    fill(store)
    engine = store.storage.engine
    asked = (("param:lr", ""), ("param:act", ""), ("index", "a"), ("param:lr", "a"))
    wanted = [order(engine, sort, search=search) for sort, search in asked]
    settled._stores.pop(str(engine.url), None)
    monkeypatch.setattr(settled, "KEPT_COLUMN_VALUES", 10)  # one column of 8 trials fits
    for _ in range(2):
        for (sort, search), expected in zip(asked, wanted, strict=True):
            assert order(engine, sort, search=search) == expected, (sort, search)
            kept = settled._stores[str(engine.url)].studies
            assert sum(len(c) for s in kept.values() for c in s.columns.values()) <= 10
