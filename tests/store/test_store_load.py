"""The experiment store under load: 64 trials at once, each reporting 200 intermediate results.

Real parts end to end: real trial processes (trialflow's SDK writing NNI's metric
files), the local platform, the follow loop that the triggerer and the workers
run, several follower processes writing at once, and a real database (the SQLite
default, and PostgreSQL from Debian's packages).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import time
import traceback
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.experiment.follow import follow_trial
from trialflow.platforms.base import TrialStatus, trial_id_for
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.tuning.asker import ask

pytestmark = pytest.mark.integration

TRIALS, REPORTS, FOLLOWERS = 64, 200, 4
EXPERIMENT = "eload000"
TRIAL = """\
import time
from trialflow import trial
p = trial.get_next_parameter()
seq = trial.get_sequence_id()
for step in range({reports}):
    trial.report_intermediate_result(seq + step / 1000)
    if step % 20 == 0:
        time.sleep(0.01)
trial.report_final_result({{"default": float(seq), "steps": {reports}}})
"""


def _config(folder: Path) -> Path:
    (folder / "trial.py").write_text(TRIAL.format(reports=REPORTS))
    path = folder / "config.yml"
    path.write_text(
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: {sys.executable} trial.py\n"
        f"trialConcurrency: {TRIALS}\nmaxTrialNumber: {TRIALS}\ntuner: {{name: TPE, classArgs: {{seed: 1}}}}\n"
        "trainingService: {platform: local}\n"
    )
    return path


def _follower(config_path: str, url: str, indexes: list[int], errors: str) -> None:
    """One worker/triggerer: ask, submit and follow its share of the trials, all at once."""
    try:
        experiment = Experiment(load_config(config_path), EXPERIMENT, Path(config_path).parent / "work")
        store = ExperimentStore(url)
        experiment.open(store)
        study = EXPERIMENT
        platform = experiment.platform()
        platform.prepare_sync(EXPERIMENT)

        async def one(index: int) -> None:
            asked = await asyncio.to_thread(
                ask, store, study, index, trial_id_for(EXPERIMENT, index), experiment.algorithm, experiment.space
            )
            handle = await platform.submit(experiment.trial_spec(index, asked.number, asked.parameters))
            outcome = await follow_trial(platform, store, handle, asked.storage_id, poll_interval=0.2)
            final = store.storage.get_trial(asked.storage_id).user_attrs.get("final_metric")
            # the platform's message is kept: a failure here must say why (exit code, vanished...)
            await asyncio.to_thread(store.finish, asked.storage_id, outcome.status, final, outcome.message)

        async def main() -> None:
            await asyncio.gather(*(one(i) for i in indexes))

        asyncio.run(main())
    except BaseException:
        Path(errors).write_text(traceback.format_exc())
        raise


def _load(tmp_path: Path, url: str) -> ExperimentStore:
    config = _config(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    errors = [tmp_path / f"errors.{i}" for i in range(FOLLOWERS)]
    procs = [
        ctx.Process(target=_follower, args=(str(config), url, list(range(i, TRIALS, FOLLOWERS)), str(errors[i])))
        for i in range(FOLLOWERS)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    problems = [e.read_text() for e in errors if e.exists()]
    assert not problems, problems[0]
    assert [p.exitcode for p in procs] == [0] * FOLLOWERS
    return ExperimentStore(url)


def _check(store: ExperimentStore) -> None:
    rows = store.trial_rows(EXPERIMENT)
    assert [r.trial_index for r in rows] == list(range(TRIALS))
    assert [(r.trial_index, r.status, r.message) for r in rows if r.status != TrialStatus.SUCCEEDED.value] == []
    assert [r.final_metric for r in rows] == [float(i) for i in range(TRIALS)]
    assert all(r.final_extra == {"steps": REPORTS} for r in rows)
    study = optuna.load_study(study_name=EXPERIMENT, storage=store.storage)
    for trial in study.get_trials(deepcopy=False):
        seq = trial.user_attrs["trial_index"]
        # nothing lost, nothing out of place: every step once, with its own value
        assert trial.intermediate_values == {s: seq + s / 1000 for s in range(REPORTS)}
    # This experiment's rows only: the session's PostgreSQL holds other tests' studies too.
    mine = (
        "FROM trial_intermediate_values v JOIN trials t ON t.trial_id = v.trial_id "
        "JOIN studies s ON s.study_id = t.study_id WHERE s.study_name = :name"
    )
    with store.storage.engine.connect() as conn:
        duplicates = conn.execute(
            sa.text(f"SELECT v.trial_id, v.step, COUNT(*) {mine} GROUP BY v.trial_id, v.step HAVING COUNT(*) > 1"),
            {"name": EXPERIMENT},
        ).fetchall()
        total = conn.execute(sa.text(f"SELECT COUNT(*) {mine}"), {"name": EXPERIMENT}).scalar_one()
    assert duplicates == []
    assert total == TRIALS * REPORTS


def test_sqlite_store_under_load(tmp_path: Path):
    _check(_load(tmp_path, sqlite_url(tmp_path / "store.db")))


def test_postgresql_store_under_load(tmp_path: Path, postgres_url: str):
    _check(_load(tmp_path, postgres_url))


def _open_store(url: str, go: str, done: str) -> None:
    while not Path(go).exists():  # all processes open the store at the same moment
        pass
    ExperimentStore(url).open_experiment("race")
    Path(done).write_text("ok")


def test_workers_creating_the_tables_at_once_on_postgresql(tmp_path: Path, postgres_url: str):
    """Eight workers start on an empty database together; all of them get a working store."""
    admin = sa.create_engine(
        postgres_url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(sa.text("CREATE DATABASE fresh_tables"))
    admin.dispose()
    url = postgres_url.rsplit("/", 1)[0] + "/fresh_tables"
    ctx = multiprocessing.get_context("spawn")
    go = tmp_path / "go"
    procs = [ctx.Process(target=_open_store, args=(url, str(go), str(tmp_path / f"done.{i}"))) for i in range(8)]
    for p in procs:
        p.start()
    time.sleep(3)  # let every process import and reach the barrier
    go.write_text("")
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 8
    assert len(list(tmp_path.glob("done.*"))) == 8
