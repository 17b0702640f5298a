"""The store's Optuna storage (TrialflowStorage) and its plain-SQL reader (trial_reader.py)
give exactly what Optuna's own reader and writers give, on SQLite and PostgreSQL; the schema
check (schema_check.py) is done once per database and Optuna version."""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import RDBStorage
from optuna.study import StudyDirection
from optuna.trial import TrialState

from trialflow.store.optuna_storage import TrialflowStorage
from trialflow.store.schema_check import DeferredVersionManager
from trialflow.store.urls import with_installed_driver
from trialflow.tuning.asker import ask

optuna.logging.set_verbosity(optuna.logging.ERROR)


def _fill(storage: TrialflowStorage, directions: list[str]) -> int:
    """A study with every kind of row the reader must turn back: each distribution type and
    categorical choice type, every trial state, infinite and NaN values, attributes."""
    study = optuna.create_study(storage=storage, study_name=f"s-{uuid.uuid4().hex[:8]}", directions=directions)
    objectives = len(directions)
    for i in range(12):
        trial = study.ask(
            {
                "lr": FloatDistribution(1e-5, 1.0, log=True),
                "drop": FloatDistribution(0.0, 0.5, step=0.1),
                "layers": IntDistribution(1, 8),
                "width": IntDistribution(16, 256, step=16),
                "act": CategoricalDistribution(["relu", None, True, 2.5, 7]),
            }
        )
        trial.set_user_attr("parameters", {"nested": [i, {"k": "v"}], "text": "é\n'\""})
        trial.set_user_attr("trial_index", i)
        storage.set_trial_system_attr(trial._trial_id, "fixed", [i])
        for step, value in enumerate([0.5, math.inf, -math.inf, math.nan][: i % 5]):
            trial.report(value, step) if objectives == 1 else None
        kind = i % 6
        if kind == 0:
            study.tell(trial, [float(i)] * objectives if objectives > 1 else float(i))
        elif kind == 1:
            study.tell(trial, [math.inf, -math.inf][:objectives] if objectives > 1 else -math.inf)
        elif kind == 2:
            study.tell(trial, state=TrialState.FAIL)
        elif kind == 3 and objectives == 1:
            study.tell(trial, state=TrialState.PRUNED)
        # kinds 4, 5 (and 3 with two objectives): still running
    study.enqueue_trial({"layers": 3})  # a WAITING trial
    return study._study_id


def _comparable(trials: list) -> list[dict]:
    """FrozenTrial's equality with NaN equal to NaN (a NaN intermediate result is never == itself)."""
    return [
        {k: repr(sorted(v.items())) if k.endswith("intermediate_values") else v for k, v in t.__dict__.items()}
        for t in trials
    ]


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request, tmp_path: Path) -> TrialflowStorage:
    if request.param == "sqlite":
        return TrialflowStorage(f"sqlite:///{tmp_path / 'reader.db'}")
    return TrialflowStorage(with_installed_driver(request.getfixturevalue("postgres_url")))


@pytest.mark.parametrize("literal_ids", [2000, 0], ids=["by-ids", "by-subquery"])
@pytest.mark.parametrize("directions", [["maximize"], ["minimize", "maximize"]])
def test_the_reader_returns_what_optunas_own_reader_returns(
    storage: TrialflowStorage, directions, literal_ids, monkeypatch
):
    """Both ways the reader names the trials whose rows it reads (their ids, up to
    LITERAL_IDS of them; the selection again past it) return what Optuna's reader returns."""
    from trialflow.store import trial_reader

    monkeypatch.setattr(trial_reader, "LITERAL_IDS", literal_ids)
    study_id = _fill(storage, directions)
    all_ids = [t._trial_id for t in RDBStorage._get_trials(storage, study_id, None, set(), -1)]
    middle = all_ids[len(all_ids) // 2]
    cases = [
        (None, set(), -1),
        ((TrialState.COMPLETE,), set(), -1),
        ((TrialState.COMPLETE, TrialState.PRUNED), set(), -1),
        ((TrialState.WAITING,), set(), -1),
        (None, set(), middle),  # what Optuna's cache asks for: the newer trials ...
        (None, {all_ids[0], all_ids[3], middle + 1}, middle),  # ... and the unfinished older ones
        ((TrialState.RUNNING,), {all_ids[4]}, middle),
    ]
    for states, included, greater in cases:
        theirs = RDBStorage._get_trials(storage, study_id, states, set(included), greater)
        ours = storage._get_trials(study_id, states, set(included), greater)
        assert _comparable(ours) == _comparable(theirs), (states, included, greater)
        assert [t.number for t in ours] == [t.number for t in theirs]
    assert len(storage._get_trials(study_id, None, set(), -1)) == 13


def test_an_unknown_study_raises_as_optuna_does(storage: TrialflowStorage):
    with pytest.raises(KeyError):
        RDBStorage._get_trials(storage, 987654, None, set(), -1)
    with pytest.raises(KeyError):
        storage._get_trials(987654, None, set(), -1)
    with pytest.raises(KeyError):  # an ask's question (waiting trials) finds no rows there either
        storage._get_trials(987654, (TrialState.WAITING,), set(), -1)
    _fill(storage, ["maximize"])  # a study without trials of its own reads as empty, not an error
    empty = optuna.create_study(storage=storage, study_name=f"e-{uuid.uuid4().hex[:8]}")
    assert storage._get_trials(empty._study_id, None, set(), -1) == []
    assert storage._get_trials(empty._study_id, (TrialState.WAITING,), set(), -1) == []


def test_samplers_see_the_same_history_through_the_store_cache(tmp_path: Path):
    """The store's asks read through one Optuna cache: a second ask in the same process sees a
    trial finished in between (by another store, as another worker would)."""
    from trialflow.config.model import AlgorithmConfig
    from trialflow.config.search_space import parse_search_space
    from trialflow.store.experiment_store import ExperimentStore, sqlite_url
    from trialflow.trial.status import TrialStatus

    url = sqlite_url(tmp_path / "s.db")
    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    tpe = AlgorithmConfig(name="TPE", class_args={"seed": 1})
    mine, other = ExperimentStore(url), ExperimentStore(url)
    mine.open_experiment("cache")
    first = ask(mine, "cache", 0, "t0", tpe, space)
    elsewhere = ask(other, "cache", 1, "t1", tpe, space)
    other.finish(elsewhere.storage_id, TrialStatus.SUCCEEDED, 0.75)
    ask(mine, "cache", 2, "t2", tpe, space)
    seen = mine.sampling_storage.get_all_trials(mine.study_id("cache"), deepcopy=False)
    by_number = {t.number: t for t in seen}
    assert by_number[1].state == TrialState.COMPLETE and by_number[1].value == 0.75
    assert by_number[0].state == TrialState.RUNNING and first.storage_id == by_number[0]._trial_id


def test_a_database_checked_once_reopens_without_the_schema_check(storage: TrialflowStorage, tmp_path: Path):
    """The second open of a store skips alembic (0.3 s per task process) and is the same storage."""
    from trialflow.store.experiment_store import ExperimentStore

    url = storage.url
    with storage.engine.begin() as conn:  # a database another test's store opened is checked already
        conn.exec_driver_sql("DROP TABLE IF EXISTS trialflow_checked_schema")
    first = ExperimentStore(url).storage  # the full path, which records the check
    again = ExperimentStore(url).storage  # the store's own open: it takes the short way now
    assert isinstance(again._version_manager, DeferredVersionManager)
    assert not isinstance(first._version_manager, DeferredVersionManager)
    assert set(vars(again)) == set(vars(first))  # every attribute RDBStorage.__init__ sets
    for name in ("url", "engine_kwargs", "heartbeat_interval", "grace_period", "heartbeat_stale_trial_callback"):
        assert getattr(again, name) == getattr(first, name), name
    assert again.skip_compatibility_check and not first.skip_compatibility_check  # the one difference
    assert again.get_current_version() == first.get_current_version()  # built when asked for
    study_id = _fill(again, ["maximize"])
    assert len(first._get_trials(study_id, None, set(), -1)) == 13
    # Another Optuna version (or a migrated database) takes the full path again.
    with again.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE trialflow_checked_schema SET optuna_version = 'other'")
    assert TrialflowStorage.reopen(url, {}) is None
    ExperimentStore(url)
    assert TrialflowStorage.reopen(url, {}) is not None


def test_several_user_attributes_are_one_write_and_a_finished_trial_takes_none(storage: TrialflowStorage):
    from optuna.exceptions import UpdateFinishedTrialError

    study = optuna.create_study(storage=storage, study_name=f"attrs-{uuid.uuid4().hex[:8]}")
    trial = study.ask()
    storage.set_trial_user_attrs(trial._trial_id, {"a": 1, "b": {"nested": [1, "é"]}})
    storage.set_trial_user_attrs(trial._trial_id, {"b": "replaced", "c": None})
    assert storage.get_trial_user_attrs(trial._trial_id) == {"a": 1, "b": "replaced", "c": None}
    study.tell(trial, 1.0)
    with pytest.raises(UpdateFinishedTrialError):
        storage.set_trial_user_attrs(trial._trial_id, {"a": 2, "d": 4})
    assert storage.get_trial_user_attrs(trial._trial_id) == {"a": 1, "b": "replaced", "c": None}


# -- grouped writes and the one-trial reader, against Optuna's own paths ------------------------


def test_get_trial_returns_what_optunas_get_trial_returns(storage: TrialflowStorage):
    study_id = _fill(storage, ["maximize"])
    for trial in RDBStorage._get_trials(storage, study_id, None, set(), -1):
        ours, theirs = storage.get_trial(trial._trial_id), RDBStorage.get_trial(storage, trial._trial_id)
        assert _comparable([ours]) == _comparable([theirs])
    with pytest.raises(KeyError):
        storage.get_trial(987654)


def test_a_trials_summary_is_what_its_frozen_trial_says_in_three_statements(storage: TrialflowStorage):
    """What a close and a record read (trial_reader.read_summary): the number, state, user
    attributes, how many intermediate values and the last step, as the FrozenTrial has them
    (0 to 4 values, NaN and infinities among them; every state), without reading the values."""
    import dataclasses

    import sqlalchemy as sa

    from trialflow.store.trial_reader import TrialSummary, read_summary

    study_id = _fill(storage, ["maximize"])
    statements: list[str] = []
    sa.event.listen(storage.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    for trial in RDBStorage._get_trials(storage, study_id, None, set(), -1):
        statements.clear()
        with storage.engine.connect() as conn:
            summary = read_summary(conn, trial._trial_id)
        assert len(statements) == 3
        assert summary is not None and summary.study_id == study_id  # a close reads the objectives by it
        frozen = RDBStorage.get_trial(storage, trial._trial_id)
        assert dataclasses.replace(summary, study_id=None) == TrialSummary.of(frozen, trial._trial_id)
    with storage.engine.connect() as conn:
        assert read_summary(conn, 987654) is None


def _two_trials(storage: TrialflowStorage) -> tuple[int, int]:
    study = optuna.create_study(storage=storage, study_name=f"w-{uuid.uuid4().hex[:8]}")
    return study.ask()._trial_id, study.ask()._trial_id


def _attrs_and_state(storage: TrialflowStorage, trial_id: int) -> tuple:
    frozen = RDBStorage.get_trial(storage, trial_id)
    return frozen.user_attrs, frozen.state, frozen.values, frozen.datetime_complete is not None


ATTRS = {"parameters": {"lr": 0.1, "text": "é\n'\""}, "nni_status": "WAITING", "trial_index": 3, "none": None}


def test_grouped_user_attributes_are_optunas_per_key_writes(storage: TrialflowStorage):
    mine, theirs = _two_trials(storage)
    for trial_id, write in ((mine, storage.set_trial_user_attrs), (theirs, None)):
        for attrs in (ATTRS, {"nni_status": "RUNNING", "handle": {"pid": 7}}):  # the second overwrites one key
            if write is not None:
                write(trial_id, attrs)
            else:
                for key, value in attrs.items():
                    RDBStorage.set_trial_user_attr(storage, trial_id, key, value)
    assert _attrs_and_state(storage, mine) == _attrs_and_state(storage, theirs)
    assert _attrs_and_state(storage, mine)[0]["nni_status"] == "RUNNING"


def test_a_finished_trials_attributes_are_refused_as_optuna_refuses_them(storage: TrialflowStorage):
    trial_id, _ = _two_trials(storage)
    storage.set_trial_state_values(trial_id, TrialState.FAIL)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        storage.set_trial_user_attrs(trial_id, {"late": 1})


def test_the_first_value_of_an_attribute_is_kept_and_returned_as_optuna_stores_it(storage: TrialflowStorage):
    mine, theirs = _two_trials(storage)
    first = {"default": 0.5, "loss": [1, "é"]}
    assert storage.keep_first_user_attr(mine, "final_metric", first) == first
    assert storage.keep_first_user_attr(mine, "final_metric", 0.9) == first  # a second: the first stays
    RDBStorage.set_trial_user_attr(storage, theirs, "final_metric", first)
    assert _attrs_and_state(storage, mine) == _attrs_and_state(storage, theirs)  # the row Optuna writes
    storage.set_trial_state_values(mine, TrialState.COMPLETE, [0.5])
    assert storage.keep_first_user_attr(mine, "final_metric", 0.9) == first  # finished: it keeps what it has
    lone, _ = _two_trials(storage)
    storage.set_trial_state_values(lone, TrialState.FAIL)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        storage.keep_first_user_attr(lone, "final_metric", 0.9)  # finished with none: refused
    assert "final_metric" not in storage.get_trial_user_attrs(lone)


@pytest.mark.parametrize(
    "state, values",
    [
        (TrialState.COMPLETE, [0.25]),
        (TrialState.COMPLETE, [float("inf"), -0.5]),  # two objectives, one not finite
        (TrialState.COMPLETE, [float("-inf")]),
        (TrialState.PRUNED, None),
        (TrialState.FAIL, None),
    ],
)
def test_closing_in_one_transaction_is_optunas_two_writes(storage: TrialflowStorage, state, values):
    mine, theirs = _two_trials(storage)
    storage.close_trial(mine, state, values, {"nni_status": "X", "message": "m"})
    RDBStorage.set_trial_user_attr(storage, theirs, "nni_status", "X")
    RDBStorage.set_trial_user_attr(storage, theirs, "message", "m")
    RDBStorage.set_trial_state_values(storage, theirs, state, values)
    assert _attrs_and_state(storage, mine) == _attrs_and_state(storage, theirs)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):  # a second close: the first stands
        storage.close_trial(mine, TrialState.FAIL, None, {"nni_status": "Y"})
    assert _attrs_and_state(storage, mine)[0]["nni_status"] == "X"
    with pytest.raises(KeyError):
        storage.close_trial(987654, state, values, {"nni_status": "X"})  # no such trial, as Optuna says


def test_held_parameters_are_written_as_optuna_writes_them(storage: TrialflowStorage):
    """Parameters the sampler sets while held reach the tables only with write_params, and then
    as Optuna's own set_trial_param leaves them; a distribution that disagrees with the study's
    earlier one is still refused."""
    space = {"lr": FloatDistribution(1e-5, 1.0, log=True), "act": CategoricalDistribution(["relu", None, 2.5])}
    study = optuna.create_study(storage=storage, study_name=f"p-{uuid.uuid4().hex[:8]}")
    reference = study.ask(space)
    with storage.holding_params() as held:
        trial = study.ask(space)
        assert RDBStorage.get_trial(storage, trial._trial_id).params == {}  # nothing written yet
    assert [h.name for h in held] == ["lr", "act"]
    with storage.transaction() as session:
        storage.write_params(session, held)
    ours = RDBStorage.get_trial(storage, trial._trial_id)
    assert ours.params == trial.params and ours.distributions == reference.distributions
    with storage.holding_params() as held:
        other = study.ask({"lr": IntDistribution(1, 3)})
    with pytest.raises(ValueError, match="Cannot set different distribution"), storage.transaction() as session:
        storage.write_params(session, held)
    assert RDBStorage.get_trial(storage, other._trial_id).params == {}  # the transaction left nothing


def test_a_new_trial_is_made_and_numbered_as_optuna_makes_it(storage: TrialflowStorage):
    """Trials made by our plain-SQL path and by Optuna's ORM path, interleaved in one study, are
    numbered one after the other, and what ours returns is what Optuna's reader reads back; a
    template trial (a prior result) still goes Optuna's way; an unknown study is a KeyError."""
    study = optuna.create_study(storage=storage, study_name=f"n-{uuid.uuid4().hex[:8]}")
    study_id = study._study_id
    made = []
    for i in range(6):
        made.append(storage._create_new_trial(study_id) if i % 2 else RDBStorage._create_new_trial(storage, study_id))
    assert [t.number for t in made] == list(range(6))
    for trial in made[1::2]:
        theirs = RDBStorage.get_trial(storage, trial._trial_id)
        assert _comparable([trial]) == _comparable([theirs]) and theirs.state == TrialState.RUNNING
    template = optuna.trial.create_trial(params={}, distributions={}, value=0.5)
    prior = storage._create_new_trial(study_id, template_trial=template)
    assert prior.number == 6 and RDBStorage.get_trial(storage, prior._trial_id).state == TrialState.COMPLETE
    with pytest.raises(KeyError):
        storage._create_new_trial(987654)


def test_an_asks_trial_is_read_back_as_made_once_and_then_from_the_tables(storage: TrialflowStorage):
    """Within holding_params (an ask), Optuna's read of the trial it just made is served from
    what _create_new_trial returned: the same FrozenTrial Optuna's reader gives, without a
    statement; the next read of it, and every read outside an ask, is the tables'."""
    import sqlalchemy as sa

    study = optuna.create_study(storage=storage, study_name=f"m-{uuid.uuid4().hex[:8]}")
    statements: list[str] = []

    def executed(conn, cursor, statement, *rest):
        statements.append(statement)

    sa.event.listen(storage.engine, "before_cursor_execute", executed)
    try:
        with storage.holding_params():
            made = study.ask()
            reads = [s for s in statements if "FROM trials" in s and "trials.trial_id =" in s]
            assert reads == []  # Trial(study, id) read nothing back
            # what it was given is what Optuna's own reader gives
            assert _comparable([made._cached_frozen_trial]) == _comparable(
                [RDBStorage.get_trial(storage, made._trial_id)]
            )
            storage.set_trial_user_attrs(made._trial_id, {"written": 1})  # then something writes it
            assert storage.get_trial(made._trial_id).user_attrs == {"written": 1}  # the tables'
        statements.clear()
        outside = study.ask()  # no ask of trialflow's: Optuna's read, as always
        assert any("trials.trial_id =" in s for s in statements)
        assert storage.get_trial(outside._trial_id).number == outside.number
    finally:
        sa.event.remove(storage.engine, "before_cursor_execute", executed)


def test_directions_read_on_a_callers_connection_are_optunas(storage: TrialflowStorage):
    study = optuna.create_study(
        storage=storage, study_name=f"d-{uuid.uuid4().hex[:8]}", directions=["minimize", "maximize"]
    )
    study_id = storage.get_study_id_from_name(study.study_name)
    with storage.engine.connect() as conn:
        storage.read_directions(conn, study_id)
    assert storage._directions[study_id] == RDBStorage.get_study_directions(storage, study_id)
    assert storage.get_study_directions(study_id) == [StudyDirection.MINIMIZE, StudyDirection.MAXIMIZE]


def test_held_parameters_of_a_trial_are_three_statements_however_many(storage: TrialflowStorage):
    """Ten parameters: the trial, the study's earlier distributions and one insert, as Optuna's
    per-parameter writes leave them; a finished trial refuses them as Optuna refuses them."""
    import sqlalchemy as sa

    space = {f"p{i}": FloatDistribution(0, 1) if i % 2 else IntDistribution(0, 9) for i in range(10)}
    study = optuna.create_study(storage=storage, study_name=f"t-{uuid.uuid4().hex[:8]}")
    reference = study.ask(space)  # written by Optuna, one parameter at a time
    with storage.holding_params() as held:
        trial = study.ask(space)
    statements: list[str] = []

    def executed(conn, cursor, statement, *rest):
        statements.append(statement)

    sa.event.listen(storage.engine, "before_cursor_execute", executed)
    try:
        with storage.transaction() as session:
            storage.write_params(session, held)
    finally:
        sa.event.remove(storage.engine, "before_cursor_execute", executed)
    assert len([s for s in statements if not s.lstrip().upper().startswith(("BEGIN", "COMMIT"))]) <= 3
    ours = RDBStorage.get_trial(storage, trial._trial_id)
    assert ours.params == trial.params and ours.distributions == reference.distributions
    with storage.holding_params() as held:
        late = study.ask(space)
    storage.set_trial_state_values(late._trial_id, TrialState.FAIL)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError), storage.transaction() as session:
        storage.write_params(session, held)
    assert RDBStorage.get_trial(storage, late._trial_id).params == {}


def test_held_parameters_without_a_known_distribution_are_checked_against_the_studys(storage: TrialflowStorage):
    """A process that has not seen the study's parameters holds them without their earlier
    distribution: write_params reads it (one statement for every name) and refuses a disagreeing
    one, as Optuna's own write does."""
    study = optuna.create_study(storage=storage, study_name=f"e-{uuid.uuid4().hex[:8]}")
    study.ask({"lr": FloatDistribution(0, 1), "n": IntDistribution(0, 9)})
    with storage.holding_params() as held:
        fine = study.ask({"lr": FloatDistribution(0, 1), "n": IntDistribution(0, 9)})
    with storage.transaction() as session:
        storage.write_params(session, [h._replace(previous_distribution=None) for h in held])
    assert RDBStorage.get_trial(storage, fine._trial_id).params == fine.params
    with storage.holding_params() as held:
        study.ask({"lr": FloatDistribution(0, 1), "n": CategoricalDistribution(["a"])})
    unknown = [h._replace(previous_distribution=None) for h in held]
    with pytest.raises(ValueError, match="Cannot set different distribution"), storage.transaction() as session:
        storage.write_params(session, unknown)
