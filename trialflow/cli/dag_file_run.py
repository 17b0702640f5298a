"""`trialflow run my_dag.py`: the author's own DAG, run once on the private Airflow of a home.

A DAG that places experiments between the author's tasks (ExperimentTaskGroup, or a whole
experiment_dag) runs as it would on their Airflow: the file's folder is the private Airflow's
DAGs folder (nothing is written into it: the home beside it hides itself from Airflow with its
.airflowignore), one DAG run is triggered, and each experiment in it is followed through the
store by its own progress line. At the end: each experiment's results table, what the author's
own tasks did (a failed one with the tail of its log, as Airflow serves it, masked), and the DAG
run's state as the exit code. Unlike a config's run, a DAG file's run is a new DAG run each time
(the author's pipeline runs again); an experiment that continues across runs is the config's
``scheduledRuns: continue``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from trialflow.cli.approvals import WaitingForPerson, waiting_for_people
from trialflow.cli.dag_files import dag_of, experiments_in
from trialflow.cli.embedded import COMPONENTS
from trialflow.cli.runner import (
    TERMINAL_RUN_STATES,
    RunResult,
    embedded_airflow,
    experiment_result,
    keep_out_of_dag_folders,
)
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
from trialflow.runs import cancel_trials
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.store.results import TrialRow
from trialflow.trial.status import TrialStatus

#: Lines of a failed task's log shown under the table (Airflow's page has the rest).
LOG_TAIL_LINES = 20
#: Characters of one log line shown (a trace's line can be a whole repr).
LOG_LINE_CHARS = 300
FAILED_STATES = frozenset({"failed", "upstream_failed"})
#: Seconds between two looks for tasks waiting for a person (one REST call; the progress lines
#: are read every poll).
HITL_LOOK_EVERY = 3.0


@dataclass(frozen=True)
class GroupOfRun:
    """One experiment of the DAG file: where it sits and, once the run is triggered, its id."""

    label: str
    group: str | None
    config: ExperimentConfig
    experiment_id: str = ""

    @property
    def total_trials(self) -> int | None:
        return None if unbounded(self.config) else trial_count(self.config)


@dataclass(frozen=True)
class TaskOutcome:
    """What one of the author's own tasks did in the run (every map index of a mapped one)."""

    task_id: str
    states: dict[str, int]
    #: (map index, try number) of its first failed instance, whose log tail is shown.
    failed: tuple[int, int] | None = None
    log_tail: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """``success``, or each state with its count when a mapped task's instances differ."""
        if len(self.states) == 1 and sum(self.states.values()) == 1:
            return next(iter(self.states))
        return ", ".join(f"{n} {state}" for state, n in sorted(self.states.items()))


def own_tasks(task_instances: Iterable[dict[str, Any]], groups: Sequence[str | None]) -> list[TaskOutcome]:
    """The author's own tasks of a run (Airflow's task instances, as its REST API lists them),
    without the experiments' tasks: a group's tasks are ``<group>.<step>``; a whole experiment
    DAG (group None) has no tasks of the author's. In the DAG's order as Airflow listed them."""
    if None in groups:
        return []
    prefixes = tuple(f"{g}." for g in groups if g)
    states: dict[str, Counter[str]] = {}
    failed: dict[str, tuple[int, int]] = {}
    for ti in task_instances:
        task_id = str(ti.get("task_id"))
        if task_id.startswith(prefixes):
            continue
        state = str(ti.get("state") or "none")
        states.setdefault(task_id, Counter())[state] += 1
        if state == "failed" and task_id not in failed:
            failed[task_id] = (int(ti.get("map_index", -1)), int(ti.get("try_number") or 1))
    return [TaskOutcome(task_id, dict(counts), failed.get(task_id)) for task_id, counts in states.items()]


def log_lines(entries: Iterable[Any], limit: int = LOG_TAIL_LINES) -> tuple[str, ...]:
    """The last ``limit`` lines of a task log as Airflow's API returns it: structured entries
    (their level and event, a trace's lines after it) or plain lines; Airflow's group markers
    (``::group::``) left out. Each line cut to LOG_LINE_CHARS."""
    lines: list[str] = []
    for entry in entries:
        if isinstance(entry, dict):
            event = str(entry.get("event", ""))
            if event.startswith("::"):
                continue
            level = str(entry.get("level") or "")
            lines.append(f"{level}: {event}" if level else event)
            for error in entry.get("error_detail") or ():
                if isinstance(error, dict):
                    lines.append(f"  {error.get('exc_type', '')}: {error.get('exc_value', '')}")
        else:
            lines += str(entry).splitlines()
    return tuple(line[:LOG_LINE_CHARS] for line in lines[-limit:])


@dataclass
class DagFileResult:
    dag_id: str
    run_id: str
    state: str
    experiments: list[tuple[str, RunResult]]
    tasks: list[TaskOutcome] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.state == "success"

    def to_json(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "state": self.state,
            "experiments": [{"label": label} | result.to_json() for label, result in self.experiments],
            "tasks": [{"task_id": t.task_id, "state": t.state, "log_tail": list(t.log_tail)} for t in self.tasks],
        }


class DagFileRun:
    """One run of the author's DAG file on the private Airflow of ``home``."""

    def __init__(
        self,
        dag_file: str | Path,
        dag_id: str | None = None,
        home: Path | None = None,
        poll_interval: float = 0.5,
        viewers: tuple[str, ...] = (),
    ):
        self.dag_file = Path(dag_file).expanduser().resolve()
        found = experiments_in(str(self.dag_file))  # ConfigError / NoExperiment before anything starts
        self.dag_id = dag_of(str(dag_file), found, dag_id)
        self.groups = [
            GroupOfRun(b.label, b.group, load_runnable_config(b.source)) for b in found if b.dag_id == self.dag_id
        ]
        self.home = (home or default_home(self.dag_file)).resolve()
        self.poll_interval = poll_interval
        self.store_url = sqlite_url(self.home / "experiments.db")
        concurrency = sum(g.config.trial_concurrency for g in self.groups)
        self.airflow = embedded_airflow(
            self.home, max(2, min(concurrency + 2, 16)), viewers, dags_folder=self.dag_file.parent
        )
        self.run_id: str | None = None

    def page_url(self, group: GroupOfRun) -> str:
        return f"{self.airflow.base_url}/plugin/trialflow?experiment={group.experiment_id}"

    def start(self, say: Callable[[str], None] = lambda _: None, keep: bool = False) -> None:
        """Start the home's private Airflow on the file's folder, or attach to the one up there
        for that folder (trialflow.cli.shared_airflow), and trigger one run of the DAG."""
        ExperimentStore(self.store_url)  # an older store is refused here, before Airflow starts
        keep_out_of_dag_folders(self.home)
        with joined(self.airflow, keep) as attached:
            if attached:
                say(f"Using the Airflow already up in this home ({self.airflow.base_url})")
                changed = max(self.dag_file.stat().st_mtime, *(self._config_times()))
                self.airflow.wait_for_fresh_dag(self.dag_id, self.dag_file, changed)
                self._trigger(say)
                return
            say("Preparing Airflow's database")
            self.airflow.migrate()
            say(f"Starting Airflow (DAGs folder {self.airflow.dags_folder}; every listener on 127.0.0.1)")
            self.airflow.start(tuple(c for c in COMPONENTS if c != "triggerer"))
            self.airflow.wait_serving()
            self.airflow.warm_up()
            self.airflow.wait_for_dag(self.dag_id, self.dag_file)
            self._trigger(say)
            self.airflow.start(("triggerer",))
            self.airflow.wait_healthy()

    def _config_times(self) -> list[float]:
        """Modification times of the YAML configs the DAG's groups read (inline ones live in
        the DAG file)."""
        files = [g.config.source_file for g in self.groups if g.config.source_file is not None]
        return [Path(f).stat().st_mtime for f in files if Path(f).exists()]

    def _trigger(self, say: Callable[[str], None]) -> None:
        self.run_id = self.airflow.trigger(self.dag_id)
        self.groups = [
            GroupOfRun(
                g.label, g.group, g.config, experiment_id_for_run(g.config, self.dag_id, self.run_id, {}, g.group)
            )
            for g in self.groups
        ]
        say(f"DAG {self.dag_id}: run {self.run_id} started")

    def rows(self, group: GroupOfRun) -> list[TrialRow]:
        try:
            return ExperimentStore(self.store_url).trial_rows(group.experiment_id)
        except KeyError:  # its start step has not run yet
            return []

    def state(self) -> str:
        assert self.run_id is not None
        return self.airflow.dag_run_state(self.dag_id, self.run_id)

    def wait(
        self,
        on_progress: Callable[[int, list[TrialRow]], None],
        timeout: float | None = None,
        on_waiting: Callable[[WaitingForPerson], None] = lambda _: None,
    ) -> str:
        """Follow every experiment until the DAG run ends (``on_progress(index, rows)``), and
        say each task that waits for a person's answer once (``on_waiting``)."""
        deadline = time.monotonic() + timeout if timeout else None
        said: set[tuple[str, int]] = set()
        next_look = 0.0
        while True:
            self.airflow.check_alive()
            for index, group in enumerate(self.groups):
                on_progress(index, self.rows(group))
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + HITL_LOOK_EVERY
                for waiting in self.waiting_for_people():
                    if waiting.key not in said:
                        said.add(waiting.key)
                        on_waiting(waiting)
            state = self.state()
            if state in TERMINAL_RUN_STATES:
                for index, group in enumerate(self.groups):
                    on_progress(index, self.rows(group))
                return state
            if deadline and time.monotonic() > deadline:
                return "timeout"
            time.sleep(self.poll_interval)

    def waiting_for_people(self) -> list[WaitingForPerson]:
        """The run's tasks that wait for a person's answer ([] when Airflow cannot say now)."""
        assert self.run_id is not None
        try:
            details = self.airflow.hitl_details(self.dag_id, self.run_id)
        except (httpx.HTTPError, ValueError):
            return []
        return waiting_for_people(details, self.airflow.base_url, self.dag_id, self.run_id)

    def tasks(self) -> list[TaskOutcome]:
        """The author's own tasks and, for a failed one, its log's tail."""
        if self.run_id is None:
            return []
        outcomes = own_tasks(self.airflow.task_instances(self.dag_id, self.run_id), [g.group for g in self.groups])
        shown = []
        for outcome in outcomes:
            if outcome.failed is not None:
                map_index, try_number = outcome.failed
                entries = self.airflow.task_log(self.dag_id, self.run_id, outcome.task_id, try_number, map_index)
                outcome = TaskOutcome(outcome.task_id, outcome.states, outcome.failed, log_lines(entries))
            shown.append(outcome)
        return shown

    def cancel_running(self, reason: str) -> int:
        """Ctrl-C: cancel every experiment's running trials (they run in sessions of their own)."""
        if self.run_id is None:
            return 0
        store = ExperimentStore(self.store_url)
        running = {
            t.storage_id
            for g in self.groups
            if store.experiment_exists(g.experiment_id)
            for t in store.active_trials(g.experiment_id)
        }
        # Failing the run may close its trials itself (the api-server's listener acts on the
        # tasks it fails): they count as cancelled here too.
        self.airflow.fail_run(self.dag_id, self.run_id)  # a shared Airflow would go on running it
        for g in self.groups:
            cancel_trials(Experiment(g.config, g.experiment_id, run_workdir(g.config, self.home)), store, reason)
        return sum(store.trial(i).status == TrialStatus.USER_CANCELED for i in running)

    def result(self, state: str) -> DagFileResult:
        experiments = [
            (
                g.label,
                experiment_result(
                    g.config,
                    g.experiment_id,
                    run_workdir(g.config, self.home),
                    self.rows(g),
                    state,
                    self.dag_id,
                    self.run_id or "",
                    self.home,
                ),
            )
            for g in self.groups
        ]
        return DagFileResult(self.dag_id, self.run_id or "", state, experiments, self.tasks())

    def stop(self, keep: bool = False) -> bool:
        """Leave the home's Airflow (stopped unless used by another run or kept)."""
        return leave(self.airflow, keep)
