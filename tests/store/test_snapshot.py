"""The finished-trials snapshot: a new process's cache starts from it and sees exactly what
Optuna's own reader sees; a row that does not fit the study is ignored, never trusted."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.storages._cached_storage import _CachedStorage
from optuna.trial import TrialState

from tests.store.test_optuna_storage import _comparable, _fill
from trialflow.store import snapshot
from trialflow.store.optuna_storage import TrialflowStorage
from trialflow.store.snapshot import SnapshotCache
from trialflow.store.tables import SNAPSHOTS
from trialflow.store.urls import with_installed_driver


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request, tmp_path: Path) -> TrialflowStorage:
    if request.param == "sqlite":
        return TrialflowStorage(f"sqlite:///{tmp_path / 'snap.db'}")
    return TrialflowStorage(with_installed_driver(request.getfixturevalue("postgres_url")))


def _truth(storage: TrialflowStorage, study_id: int) -> list:
    return _comparable(RDBStorage.get_all_trials(storage, study_id, deepcopy=False))


def _reads(monkeypatch) -> list[int]:
    """How many trials each database read returned (in this process)."""
    counts: list[int] = []
    original = TrialflowStorage._get_trials

    def counting(self, *args, **kwargs):
        trials = original(self, *args, **kwargs)
        counts.append(len(trials))
        return trials

    monkeypatch.setattr(TrialflowStorage, "_get_trials", counting)
    return counts


def _finish_running(storage: TrialflowStorage, study_id: int) -> None:
    for t in RDBStorage.get_all_trials(storage, study_id, states=(TrialState.RUNNING,)):
        storage.set_trial_state_values(
            t._trial_id, TrialState.COMPLETE, [1.5] * len(storage.get_study_directions(study_id))
        )


@pytest.mark.parametrize("directions", [["maximize"], ["minimize", "maximize"]])
def test_a_new_process_starts_from_the_row_and_sees_what_optuna_sees(storage, monkeypatch, directions):
    monkeypatch.setattr(snapshot, "SNAPSHOT_STEP", 3)
    study_id = _fill(storage, directions)  # every state, inf/NaN values, every distribution kind
    writer = SnapshotCache(storage)
    assert _comparable(writer.get_all_trials(study_id, deepcopy=False)) == _truth(storage, study_id)
    with storage.engine.connect() as conn:
        row = conn.execute(sa.select(SNAPSHOTS).where(SNAPSHOTS.c.study_id == study_id)).one()
    trials, last, unfinished = snapshot.decode(row.payload)
    assert unfinished and all(t.state.is_finished() for t in trials)  # running ones are named, not kept
    assert row.trial_count == len(trials) + len(unfinished)

    _finish_running(storage, study_id)  # after the row: these must be read again, finished now
    reads = _reads(monkeypatch)
    reader = SnapshotCache(storage)  # "a new process"
    seen = reader.get_all_trials(study_id, deepcopy=False)
    read = list(reads)
    assert _comparable(seen) == _truth(storage, study_id)
    newer = sum(1 for t in seen if t._trial_id > last)
    assert read == [len(unfinished) + newer]  # only what the row could not know
    assert any(t._trial_id in unfinished and t.state == TrialState.COMPLETE for t in seen)


def test_samplers_ask_the_same_through_a_seeded_cache(tmp_path):
    storage = TrialflowStorage(f"sqlite:///{tmp_path / 'same.db'}")
    study = optuna.create_study(storage=storage, study_name="same")
    for _ in range(40):
        study.optimize(lambda t: (t.suggest_float("x", -3, 3) - 1) ** 2, n_trials=1)
    SnapshotCache(storage).get_all_trials(study._study_id)  # writes the row
    asked = []
    for cache in (_CachedStorage(storage), SnapshotCache(storage)):
        sampler = optuna.samplers.TPESampler(seed=7)
        asked.append(optuna.Study("same", cache, sampler=sampler).ask().params)
        storage.set_trial_state_values(
            storage.get_trial_id_from_study_id_trial_number(study._study_id, 40 + len(asked) - 1), TrialState.FAIL
        )
    assert asked[0] == asked[1]


@pytest.mark.parametrize(
    "spoil",
    [
        "count",  # the row's trials are not the study's (an id reused after a deletion)
        "payload",  # not a snapshot
        "format",  # written by another trialflow
        "version",  # written under another Optuna
    ],
)
def test_a_row_that_does_not_fit_is_ignored(tmp_path, monkeypatch, spoil):
    import json
    import zlib

    storage = TrialflowStorage(f"sqlite:///{tmp_path / 'spoil.db'}")
    study_id = _fill(storage, ["maximize"])
    monkeypatch.setattr(snapshot, "SNAPSHOT_STEP", 1)
    SnapshotCache(storage).get_all_trials(study_id)
    values: dict = {
        "count": {"trial_count": SNAPSHOTS.c.trial_count + 1},
        "payload": {"payload": b"\x00not zlib"},
        "format": {"payload": zlib.compress(json.dumps({"format": 99}).encode())},
        "version": {"optuna_version": "0.0.1"},
    }[spoil]
    with storage.engine.begin() as conn:
        conn.execute(SNAPSHOTS.update().values(**values))
    monkeypatch.setattr(snapshot, "SNAPSHOT_STEP", 10**6)  # the reader must not repair it either
    reads = _reads(monkeypatch)
    seen = SnapshotCache(storage).get_all_trials(study_id, deepcopy=False)
    assert _comparable(seen) == _truth(storage, study_id)
    assert reads[0] == len(seen)  # everything read from the tables


def test_a_row_only_moves_forward(tmp_path):
    storage = TrialflowStorage(f"sqlite:///{tmp_path / 'fwd.db'}")
    snapshot.save(storage.engine, 1, 50, 50, b"newer")
    snapshot.save(storage.engine, 1, 40, 40, b"older")  # a slower writer, after
    with storage.engine.connect() as conn:
        assert conn.execute(sa.select(SNAPSHOTS.c.payload, SNAPSHOTS.c.last_finished_trial_id)).one() == (b"newer", 50)
    snapshot.save(storage.engine, 1, 60, 60, b"newest")
    with storage.engine.connect() as conn:
        assert conn.execute(sa.select(SNAPSHOTS.c.payload)).scalar() == b"newest"


def test_the_row_is_written_every_step_of_finished_trials(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "SNAPSHOT_STEP", 5)
    storage = TrialflowStorage(f"sqlite:///{tmp_path / 'step.db'}")
    study = optuna.create_study(storage=storage, study_name="step")
    cache = SnapshotCache(storage)
    SNAPSHOTS.create(storage.engine)  # as the store makes it; the first save would otherwise
    written = []
    for _ in range(12):
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
        cache.get_all_trials(study._study_id)
        with storage.engine.connect() as conn:
            written.append(conn.execute(sa.select(SNAPSHOTS.c.trial_count)).scalar())
    assert written == [None] * 4 + [5] * 5 + [10] * 3


def test_values_that_json_cannot_spell_survive(tmp_path):
    storage = TrialflowStorage(f"sqlite:///{tmp_path / 'inf.db'}")
    study = optuna.create_study(storage=storage, study_name="inf", directions=["minimize", "maximize"])
    trial = study.ask()
    trial.suggest_float("x", 0, 1)
    study.tell(trial, [math.inf, -math.inf])
    [frozen] = storage.get_all_trials(study._study_id)
    [back], last, unfinished = snapshot.decode(snapshot.encode([frozen], frozen._trial_id, set()))
    assert back == frozen and back.values == [math.inf, -math.inf] and not unfinished
