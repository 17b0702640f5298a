"""`trialflow run`: one experiment through a real, private Airflow, start to finish.

The config is validated before anything starts (a broken config never
half-starts an experiment). Then a loopback-only Airflow is brought up in the
experiment's private home, the one-line DAG file is written, one DAG run is
triggered and followed through the experiment store until it ends (an
experiment without maxTrialNumber goes on in the follow-on runs it starts), and
everything is stopped again, on success, failure or Ctrl-C (which also
cancels the trials still running).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from trialflow.authoring.plan import default_dag_id
from trialflow.cli.embedded import COMPONENTS, EmbeddedAirflow
from trialflow.cli.shared_airflow import joined, leave
from trialflow.config import ExperimentConfig
from trialflow.experiment import (
    Experiment,
    default_home,
    experiment_id_for_run,
    load_runnable_config,
    run_workdir,
    trial_count,
    unbounded,
)
from trialflow.limits import TRACKING_GIVE_UP_SECONDS
from trialflow.store.pareto import pareto_rows, with_values
from trialflow.store.results import TrialRow, best_row
from trialflow.store.urls import sqlite_url
from trialflow.store.version import sqlite_store_is_current
from trialflow.trial.status import TrialStatus

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

# The store (Optuna, SQLAlchemy) and trialflow.runs are imported where they are used, after
# the run is triggered: a warm run's trigger goes out before them (trialflow.store.version).

TERMINAL_RUN_STATES = {"success", "failed"}
#: The DAG file trialflow 0.1 wrote for whichever config ran last in a home.
LEGACY_DAG_FILE = "experiment.py"
DAG_FILE = """\
# An Airflow DAG written by `trialflow run`; the whole experiment is this one line.
from trialflow.dag import experiment_dag

dag = experiment_dag({config!r}, dag_id={dag_id!r}, poll_interval={poll!r})
"""


@dataclass
class RunResult:
    experiment_id: str
    dag_id: str
    run_id: str
    state: str
    rows: list[TrialRow]
    best: TrialRow | None
    optimize_mode: str
    home: Path
    #: Several objectives: the Pareto set's trial indexes (``best`` is its first member).
    pareto: list[int] = field(default_factory=list)
    #: ``--downstream``: each downstream DAG's run its Asset started ({dag_id, run_id, state}).
    downstream: list[dict[str, Any]] = field(default_factory=list)
    #: Several objectives: each trial carries its values by name.
    several: bool = False

    @property
    def succeeded(self) -> bool:
        return self.state == "success" and all(d["state"] == "success" for d in self.downstream)

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {
            "experiment_id": self.experiment_id,
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "state": self.state,
            "optimize_mode": self.optimize_mode,
            # each trial's message too: why it failed (a GPU request that can never fit said nothing)
            "trials": [
                _trial_json(r) | {"message": r.message} | ({"values": r.values} if self.several else {})
                for r in self.rows
            ],
            "best": None if best is None else _trial_json(best),
            **({"pareto": self.pareto} if self.pareto else {}),
            **({"downstream": self.downstream} if self.downstream else {}),
        }


#: Seconds between two looks at the MLflow step's state while a run is followed.
TRACKING_LOOK_EVERY = 5.0


def tracking_wait_line(task_instances: list[dict[str, Any]], experiment_id: str) -> str | None:
    """What to say when the run's MLflow step (``log_to_mlflow``) waits in the triggerer for a
    tracking server that did not take every result; None otherwise. After "12/12 done" the
    command printed nothing for minutes while it waited (issue 64, 2)."""
    from trialflow import task_ids

    waiting = any(
        str(ti.get("task_id", "")).rpartition(".")[2] == task_ids.TRACK and ti.get("state") == "deferred"
        for ti in task_instances
    )
    if not waiting:
        return None
    minutes = TRACKING_GIVE_UP_SECONDS / 60
    return (
        f"Waiting for MLflow: {task_ids.TRACK} tries again until the tracking server takes every result "
        f"(at most {minutes:.0f} min, then it is skipped); Ctrl-C stops waiting, and "
        f"`trialflow sync-mlflow {experiment_id}` sends the rest later"
    )


def _trial_json(row: TrialRow) -> dict[str, Any]:
    """A trial in ``trialflow run --json``."""
    return {
        "trial_index": row.trial_index,
        "trial_id": row.trial_id,
        "parameters": row.parameters,
        "status": row.status,
        "final_metric": row.final_metric,
        "intermediate_count": row.intermediate_count,
    }


#: A run home's .airflowignore: nothing in it is for an Airflow that scans the folder it sits in
#: (after `make demo`, an Airflow pointed at dags/ crashed its dag-processor on the home's log
#: folder's `latest` symlink, "Detected recursive loop", and would have parsed the home's own
#: copy of the experiment's DAG). `*` for the glob syntax (Airflow 3's default), `.*` for regexp.
HOME_IGNORE = """\
# trialflow run's private Airflow lives here: no Airflow that scans a folder above should look in.
*
.*
"""


def keep_out_of_dag_folders(home: Path) -> None:
    """Write the run home's .airflowignore (HOME_IGNORE)."""
    home.mkdir(parents=True, exist_ok=True)
    ignore = home / ".airflowignore"
    if not ignore.exists() or ignore.read_text() != HOME_IGNORE:
        ignore.write_text(HOME_IGNORE)


def embedded_parallelism(config: ExperimentConfig) -> int:
    """Size the embedded Airflow to the experiment: deferred trials hold no worker, so workers
    are needed only to submit and to finish trials, plus one for start/end."""
    return max(2, min(config.trial_concurrency + 1, 16))


def embedded_airflow(
    home: Path, parallelism: int = 8, viewers: tuple[str, ...] = (), dags_folder: Path | None = None
) -> EmbeddedAirflow:
    """The private Airflow of a `trialflow run` home (its store as trialflow_default);
    ``viewers``: read-only logins (``--viewer``); ``dags_folder``: the folder of the author's
    DAG file (`trialflow run my_dag.py`), else the home's own, where the one-line DAG is written."""
    return EmbeddedAirflow(
        home=home / "airflow",
        dags_folder=dags_folder or home / "dags",
        parallelism=parallelism,
        viewers=viewers,
        extra_env={
            "AIRFLOW_CONN_TRIALFLOW_DEFAULT": json.dumps(
                {"conn_type": "trialflow", "extra": {"storage_url": sqlite_url(home / "experiments.db")}}
            ),
            "TRIALFLOW_WORKDIR": str(home / "experiments"),
        },
    )


def experiment_result(
    config: ExperimentConfig,
    experiment_id: str,
    workdir: Path,
    rows: list[TrialRow],
    state: str,
    dag_id: str,
    run_id: str,
    home: Path,
) -> RunResult:
    """What a run of one experiment came to: its trials, its best (or its Pareto set)."""
    objectives = Experiment(config, experiment_id, workdir).objectives
    if objectives:  # several: the Pareto set, values shown by name
        rows = with_values(rows, objectives)
        pareto = pareto_rows(rows, objectives)
        best = pareto[0] if pareto else None
    else:
        pareto, best = [], best_row(rows, config.optimize_mode)
    return RunResult(
        experiment_id,
        dag_id,
        run_id,
        state,
        rows,
        best,
        config.optimize_mode,
        home,
        [r.trial_index for r in pareto if r.trial_index is not None],
        several=bool(objectives),
    )


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless ``path`` holds it already: a file rewritten unchanged gets a new
    mtime, and on a home's Airflow kept up that asked for a re-parse on every warm run (0.5-1.2 s
    before its trigger, measured) although the DAG was the same."""
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    path.write_text(text)


class ExperimentRun:
    def __init__(
        self,
        config_path: str | Path,
        home: Path | None = None,
        poll_interval: float = 0.5,
        new: bool = False,
        viewers: tuple[str, ...] = (),
        downstream: tuple[Path, ...] = (),
    ):
        self.config_path = Path(config_path).expanduser().resolve()
        self.config = load_runnable_config(self.config_path)  # raises ConfigError before anything starts
        self.home = (home or default_home(self.config_path)).resolve()
        self.poll_interval = poll_interval
        self.dag_id = default_dag_id(self.config_path, self.config.experiment_name)
        self.store_path = self.home / "experiments.db"
        self.store_url = sqlite_url(self.store_path)
        self.workdir = run_workdir(self.config, self.home)
        self.airflow = embedded_airflow(self.home, embedded_parallelism(self.config), viewers)
        self.run_id: str | None = None
        #: The run being followed: run_id, or the follow-on run an unbounded experiment is in now.
        self.current_run_id: str | None = None
        self._experiment_id: str | None = None
        self.new = new
        self.resumed = False
        #: DAG files run beside the experiment (``--downstream``): DAGs scheduled on its Asset.
        self.downstream = tuple(Path(p).expanduser().resolve() for p in downstream)
        for path in self.downstream:
            if not path.is_file():
                raise FileNotFoundError(f"--downstream {path}: no such DAG file")
        self.downstream_dags: list[str] = []
        self.triggered_at: datetime | None = None
        #: One DAG file per experiment DAG: runs of two configs of a home share its Airflow.
        self.dag_file_name = f"{self.dag_id}.py"

    @property
    def experiment_id(self) -> str:
        assert self._experiment_id is not None
        return self._experiment_id

    def _follow(self, run_id: str, conf: dict[str, Any] | None = None) -> None:
        self.run_id = self.current_run_id = run_id
        self._experiment_id = experiment_id_for_run(self.config, self.dag_id, run_id, conf)

    def page_url(self) -> str:
        """The experiment's page in the private Airflow's UI."""
        return f"{self.airflow.base_url}/plugin/trialflow?experiment={self.experiment_id}"

    @property
    def total_trials(self) -> int | None:
        """Trials the experiment will start; None when it goes on until maxExperimentDuration."""
        return None if unbounded(self.config) else trial_count(self.config)

    def write_dag(self) -> Path:
        self.airflow.dags_folder.mkdir(parents=True, exist_ok=True)
        keep_out_of_dag_folders(self.home)
        path = self.airflow.dags_folder / self.dag_file_name
        legacy = self.airflow.dags_folder / LEGACY_DAG_FILE
        if legacy.exists() and legacy != path:  # an earlier trialflow's one file for every config
            legacy.unlink()
        _write_if_changed(
            path, DAG_FILE.format(config=str(self.config_path), dag_id=self.dag_id, poll=self.poll_interval)
        )
        for index, source in enumerate(self.downstream):
            _write_if_changed(self.downstream_file(index, source), source.read_text())  # a copy, as of this start
        return path

    def downstream_file(self, index: int, source: Path) -> Path:
        return self.airflow.dags_folder / f"downstream_{index}_{source.name}"

    def changed_at(self) -> float:
        """When the experiment's DAG last changed: its DAG file, its config, its search space."""
        files = [self.airflow.dags_folder / self.dag_file_name, self.config_path]
        if self.config.search_space_file:
            files.append(Path(self.config.search_space_file))
        return max((f.stat().st_mtime for f in files if f.exists()), default=0.0)

    def start(self, say: Callable[[str], None] = lambda _: None, keep: bool = False) -> None:
        """Start the home's private Airflow, or attach to the one up there (another run's, or
        `trialflow up`'s: trialflow.cli.shared_airflow), and trigger (or resume) the run.
        ``keep``: leave Airflow up when the run ends (`--keep-running`)."""
        # The home's store opens before Airflow starts: one of an earlier trialflow is refused
        # here (StoreSchemaError, saying to run `trialflow db upgrade --home ...`), not by
        # every task of a run that was already under way. A store found current by a look at
        # its version rows is not opened here (Optuna's and SQLAlchemy's imports, ~1 s).
        if not sqlite_store_is_current(self.store_path):
            self.store()
        dag_file = self.write_dag()
        with joined(self.airflow, keep) as attached:
            if attached:
                say(f"Using the Airflow already up in this home ({self.airflow.base_url})")
                self.airflow.wait_for_fresh_dag(self.dag_id, dag_file, self.changed_at())
                self._find_downstream(say)
                self._trigger_or_resume(say)
                return
            say("Preparing Airflow's database")
            self.airflow.migrate()
            say("Starting Airflow (scheduler, triggerer, dag-processor, api-server on 127.0.0.1)")
            # The triggerer starts once the run is triggered: nothing defers before a trial has
            # run for defer_after seconds, and its start-up (~2 s of CPU) no longer competes
            # with the components the first trials wait for.
            self.airflow.start(tuple(c for c in COMPONENTS if c != "triggerer"))
            self.airflow.wait_serving()
            self.airflow.warm_up()  # while the other components start
            self.airflow.wait_for_dag(self.dag_id, dag_file)
            self._find_downstream(say)
            self._trigger_or_resume(say)
            self.airflow.start(("triggerer",))
            # The scheduler has been starting all along and a run waits for it anyway, so it is
            # checked last, with the triggerer (a component that died says so here).
            self.airflow.wait_healthy()

    def _find_downstream(self, say: Callable[[str], None]) -> None:
        for index, source in enumerate(self.downstream):
            found = self.airflow.dags_of_file(self.downstream_file(index, source))
            self.downstream_dags += found
            say(f"Downstream of the experiment: {', '.join(found)} ({source.name})")

    def _trigger_or_resume(self, say: Callable[[str], None]) -> None:
        self.triggered_at = datetime.now(UTC)
        previous = None if self.new else self.airflow.latest_run(self.dag_id)
        if previous is not None:
            # NNI's `nnictl resume`: the same DAG run, cleared, continues its experiment. Finished
            # trials report from the store, trials still running are re-attached, the rest start.
            # On a fresh Airflow the triggerer is not up yet: a clear drops the deferred tasks'
            # triggers unseen, where a running triggerer would take it as a person's stop.
            self._follow(previous, self.airflow.run_conf(self.dag_id, previous))
            self.resumed = True
            self.airflow.clear_run(self.dag_id, previous)
            say(
                f"Resuming experiment {self.experiment_id} (DAG {self.dag_id}, run {self.run_id}); "
                "--new starts a fresh one"
            )
        else:
            self._follow(self.airflow.trigger(self.dag_id))
            say(f"Experiment {self.experiment_id} started (DAG {self.dag_id}, run {self.run_id})")

    def store(self) -> ExperimentStore:
        """The home's store, opened (created, or checked: StoreSchemaError)."""
        from trialflow.store.experiment_store import ExperimentStore

        return ExperimentStore(self.store_url)

    def rows(self) -> list[TrialRow]:
        try:
            return self.store().trial_rows(self.experiment_id)
        except KeyError:  # the start task has not created the study yet
            return []

    def state(self) -> str:
        assert self.current_run_id is not None
        return self.airflow.dag_run_state(self.dag_id, self.current_run_id)

    def next_run(self) -> str | None:
        """The follow-on run the ended current run started (unbounded experiments only)."""
        if not unbounded(self.config) or self.current_run_id is None:
            return None
        from trialflow.runs import next_run_id

        experiment = Experiment(self.config, self.experiment_id, self.workdir)
        try:
            run_id = next_run_id(experiment, self.store(), self.current_run_id)
        except KeyError:
            return None
        return run_id if self.airflow.run_conf(self.dag_id, run_id) is not None else None

    def wait(
        self,
        on_progress: Callable[[list[TrialRow]], None],
        timeout: float | None = None,
        say: Callable[[str], None] = lambda _: None,
    ) -> str:
        """Follow the experiment's runs until the last one ends (``on_progress(rows)``), saying
        (``say``) once when only its MLflow step holds the run, waiting for a tracking server."""
        deadline = time.monotonic() + timeout if timeout else None
        waiting_said = False
        next_look = 0.0
        while True:
            self.airflow.check_alive()
            rows = self.rows()
            on_progress(rows)
            if self.config.mlflow is not None and not waiting_said and time.monotonic() >= next_look:
                next_look = time.monotonic() + TRACKING_LOOK_EVERY
                assert self.current_run_id is not None
                try:
                    instances = self.airflow.task_instances(self.dag_id, self.current_run_id)
                except (httpx.HTTPError, ValueError):  # Airflow busy: look again next time
                    instances = []
                line = tracking_wait_line(instances, self.experiment_id)
                if line:
                    say(line)
                    waiting_said = True
            state = self.state()
            if state in TERMINAL_RUN_STATES:
                following = self.next_run()
                if following is not None:  # the experiment goes on in the run this one started
                    self.current_run_id = following
                    continue
                on_progress(self.rows())
                return state
            if deadline and time.monotonic() > deadline:
                return "timeout"
            time.sleep(0.5)

    def wait_downstream(
        self, say: Callable[[str], None], timeout: float | None = None, appear_within: float = 60.0
    ) -> list[dict[str, Any]]:
        """After the experiment: wait for the runs its published Asset started in the downstream
        DAGs, saying once where a person is asked to approve (Airflow's Required Actions).
        Returns {dag_id, run_id, state} per downstream DAG; "not triggered" when nothing was
        published (or no run came within ``appear_within`` seconds of it)."""
        if not self.downstream_dags or self.current_run_id is None or self.triggered_at is None:
            return []
        tis = self.airflow.task_instances(self.dag_id, self.current_run_id)
        if not any(ti["task_id"] == "publish_best" and ti["state"] == "success" for ti in tis):
            say("The experiment published nothing: its downstream DAGs do not run")
            return [{"dag_id": d, "run_id": None, "state": "not triggered"} for d in self.downstream_dags]
        deadline = time.monotonic() + timeout if timeout else None
        appear_by = time.monotonic() + appear_within
        outcome: dict[str, dict[str, Any]] = {}
        asked: set[str] = set()
        while len(outcome) < len(self.downstream_dags):
            self.airflow.check_alive()
            for dag_id in self.downstream_dags:
                if dag_id in outcome:
                    continue
                runs = self.airflow.runs_since(dag_id, self.triggered_at)
                if not runs:
                    if time.monotonic() > appear_by:
                        outcome[dag_id] = {"dag_id": dag_id, "run_id": None, "state": "not triggered"}
                    continue
                run_id, state = str(runs[-1]["dag_run_id"]), str(runs[-1]["state"])
                if state in TERMINAL_RUN_STATES:
                    outcome[dag_id] = {"dag_id": dag_id, "run_id": run_id, "state": state}
                    say(f"Downstream DAG {dag_id}: run {run_id} {state}")
                elif run_id not in asked and any(
                    ti["state"] == "awaiting_input" for ti in self.airflow.task_instances(dag_id, run_id)
                ):
                    asked.add(run_id)
                    say(f"Downstream DAG {dag_id} asks a person: {self.airflow.base_url}/required_actions")
            if deadline and time.monotonic() > deadline:
                for dag_id in self.downstream_dags:
                    outcome.setdefault(dag_id, {"dag_id": dag_id, "run_id": None, "state": "timeout"})
                break
            if len(outcome) < len(self.downstream_dags):
                time.sleep(1.0)
        return [outcome[d] for d in self.downstream_dags]

    def cancel_running(self, reason: str) -> int:
        """Cancel trials still running (Ctrl-C): trials run in their own sessions and would
        otherwise outlive the Airflow that started them."""
        if self.run_id is None:
            return 0
        from trialflow.runs import cancel_trials

        store = self.store()
        exists = store.experiment_exists(self.experiment_id)
        running = {t.storage_id for t in store.active_trials(self.experiment_id)} if exists else set()
        if self.current_run_id is not None:  # a shared Airflow would go on running it
            # Failing the run may close its trials itself (the api-server's listener acts on
            # the tasks it fails, often before this returns): they count as cancelled here too.
            self.airflow.fail_run(self.dag_id, self.current_run_id)
        experiment = Experiment(self.config, self.experiment_id, self.workdir)
        cancel_trials(experiment, store, reason)
        return sum(store.trial(i).status == TrialStatus.USER_CANCELED for i in running)

    def result(self, state: str) -> RunResult:
        return experiment_result(
            self.config, self.experiment_id, self.workdir, self.rows(), state, self.dag_id, self.run_id or "", self.home
        )

    def stop(self, keep: bool = False) -> bool:
        """Leave the home's Airflow: stopped unless another run uses it or it is kept (True
        when it was stopped)."""
        return leave(self.airflow, keep)
