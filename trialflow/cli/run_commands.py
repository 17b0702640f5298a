"""`trialflow run | ui | up | down`: an experiment run on a private or a home Airflow, and
that Airflow's pages."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trialflow.cli.config_commands import _checkpoint_store_problem, _tracking_finding
from trialflow.cli.dag_files import NoExperiment, is_dag_file
from trialflow.cli.failures import _fail
from trialflow.config import ConfigError
from trialflow.config.errors import Problem

if TYPE_CHECKING:
    pass


def cmd_run(args: argparse.Namespace) -> int:
    from trialflow.experiment import load_runnable_config

    if is_dag_file(args.config):
        return _run_dag_file(args)
    if args.dag_id is not None:
        return _fail(ValueError(f"--dag-id {args.dag_id}: only a DAG file (.py) has DAGs to choose from"))

    try:  # validate before importing Airflow or starting anything
        config = load_runnable_config(args.config)
    except ConfigError as exc:
        return _fail(exc)
    tracking = _tracking_finding(config)
    if tracking is not None:  # the home's Airflow gets this environment: what is missing here is missing there
        if tracking.error:
            return _fail(ConfigError([Problem(config.source_file, ("mlflow",), tracking.message)]))
        print(f"warning: {tracking.message}", file=sys.stderr)
    unwritable = _checkpoint_store_problem(config)
    if unwritable is not None:  # the home's Airflow writes the store from this machine
        return _fail(ConfigError([Problem(config.source_file, ("checkpoints", "store"), unwritable)]))
    from trialflow.cli.progress import RunDisplay
    from trialflow.cli.runner import ExperimentRun

    try:
        run = ExperimentRun(
            args.config,
            Path(args.home) if args.home else None,
            new=args.new,
            viewers=tuple(args.viewer),
            downstream=tuple(Path(p) for p in args.downstream),
        )
    except FileNotFoundError as exc:
        return _fail(exc)
    # `kill` (SIGTERM) gets the same clean stop as Ctrl-C: trials cancelled, Airflow stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    objectives = [{"metric": o.metric, "mode": o.mode} for o in run.config.objectives or []]
    display = RunDisplay(
        run.total_trials, quiet=args.json, optimize_mode=run.config.optimize_mode, objectives=objectives
    )
    state = "failed"
    downstream: list[dict[str, Any]] = []
    try:
        try:
            run.start(say=display.say, keep=args.keep_running)
            # where to watch it while it runs, not only at the end
            display.say(f"Watch it: {run.page_url()}")
            display.say(f"  log in as trialflow; the password is in {run.airflow.home / 'passwords.json'}")
            started = time.monotonic()
            with display:
                state = run.wait(display.update, timeout=args.timeout, say=display.say)
            left = None if args.timeout is None else max(1.0, args.timeout - (time.monotonic() - started))
            downstream = run.wait_downstream(display.say, timeout=left) if state == "success" else []
        except KeyboardInterrupt:
            state = _interrupted(run, display.say)
        except Exception as exc:
            display.say(f"error: {exc}")
            state = "error"
        if run.run_id is None:
            return 1
        result = run.result(state)
        result.downstream = downstream
        if args.json:
            print(json.dumps(result.to_json(), indent=2))
        else:
            display.results(result)
    finally:
        stopped = run.stop(keep=args.keep_running and state != "interrupted")
    _left(run.airflow, run.home, run.page_url() if run.run_id else None, stopped, display.say)
    return 0 if result.succeeded else 1


def _interrupted(run: Any, say: Callable[[str], None]) -> str:
    """Ctrl-C (or SIGTERM) during a run, of a config or of a DAG file: its trials cancelled."""
    say("Interrupted: cancelling running trials and stopping Airflow")
    say(f"Cancelled {run.cancel_running('trialflow run interrupted')} running trial(s)")
    return "interrupted"


def _run_dag_file(args: argparse.Namespace) -> int:
    """`trialflow run my_dag.py`: the author's DAG once on the home's private Airflow."""
    if args.new or args.downstream:
        flag = "--new" if args.new else "--downstream"
        return _fail(
            ValueError(f"{flag}: for a config; a DAG file's run is a new DAG run each time, with its own tasks")
        )
    try:
        from trialflow.cli.dag_file_run import DagFileRun

        run = DagFileRun(args.config, args.dag_id, Path(args.home) if args.home else None, viewers=tuple(args.viewer))
    except (ConfigError, NoExperiment) as exc:
        return _fail(exc)
    from trialflow.cli.progress import GroupsDisplay

    signal.signal(signal.SIGTERM, _interrupt)
    display = GroupsDisplay(
        [
            (
                g.label,
                g.total_trials,
                g.config.optimize_mode,
                [{"metric": o.metric, "mode": o.mode} for o in g.config.objectives or []],
            )
            for g in run.groups
        ],
        quiet=args.json,
    )
    state = "failed"
    try:
        try:
            run.start(say=display.say, keep=args.keep_running)
            for group in run.groups:
                display.say(f"Watch {group.label}: {run.page_url(group)}")
            display.say(f"  log in as trialflow; the password is in {run.airflow.home / 'passwords.json'}")
            with display:
                state = run.wait(
                    display.update_group, timeout=args.timeout, on_waiting=lambda w: display.say(w.line(run.dag_id))
                )
        except KeyboardInterrupt:
            state = _interrupted(run, display.say)
        except Exception as exc:
            display.say(f"error: {exc}")
            state = "error"
        if run.run_id is None:
            return 1
        result = run.result(state)
        if args.json:
            print(json.dumps(result.to_json(), indent=2))
        else:
            display.dag_results(result)
    finally:
        stopped = run.stop(keep=args.keep_running and state != "interrupted")
    page = f"{run.airflow.base_url}/dags/{run.dag_id}/runs/{run.run_id}" if run.run_id else None
    _left(run.airflow, run.home, page, stopped, display.say)
    return 0 if result.succeeded else 1


def _left(airflow: Any, home: Path, page: str | None, stopped: bool, say: Any) -> None:
    """What a run leaves: Airflow stopped (how to browse the results), or up for the next run."""
    if stopped:
        say(f"Browse it: trialflow ui --home {home}  (or run with --keep-running)")
        return
    if page:
        say(f"Page: {page}")
    say(
        f"Airflow stays up in {home} for the next `trialflow run` (log in as trialflow; the password is in "
        f"{airflow.home / 'passwords.json'}); `trialflow down --home {home}` stops it"
    )


def _serve(airflow: Any, url: str, say: Any) -> None:
    """Print where to look and how to log in, then keep Airflow up until Ctrl-C."""
    say(f"Experiment page: {url}")
    say(f"Log in as trialflow; the password is in {airflow.home / 'passwords.json'}. Ctrl-C stops Airflow.")
    if airflow.viewers:
        say(f"Read-only logins: {', '.join(airflow.viewers)} (their passwords are in the same file)")
    try:
        while True:
            airflow.check_alive()
            time.sleep(1)
    except KeyboardInterrupt:
        pass


def cmd_ui(args: argparse.Namespace) -> int:
    """Serve the experiment pages of a `trialflow run` home (its api-server only)."""
    from trialflow.cli.runner import embedded_airflow
    from trialflow.experiment import default_home

    home = Path(args.home) if args.home else default_home(Path(args.config)) if args.config else Path(".trialflow")
    home = home.resolve()
    if not (home / "airflow" / "airflow.db").exists():
        return _fail(
            FileNotFoundError(f"no trialflow run in {home} (run `trialflow run CONFIG` first, or give --home)")
        )
    airflow = embedded_airflow(home, viewers=tuple(args.viewer))
    from trialflow.cli.shared_airflow import adopt_running

    if adopt_running(airflow) is not None:  # the home's Airflow is up (`trialflow up`, a run): its pages
        _stderr(f"The Airflow of this home is up: {airflow.base_url}/plugin/trialflow")
        _stderr(f"Log in as trialflow; the password is in {airflow.home / 'passwords.json'}")
        return 0
    if args.port:
        airflow.port = args.port
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        airflow.start(components=("api-server",))
        airflow.wait_serving()
        _serve(airflow, f"{airflow.base_url}/plugin/trialflow", lambda text: print(text, file=sys.stderr))
    finally:
        airflow.stop()
    return 0


def _home_airflow(args: argparse.Namespace) -> Any:
    """The private Airflow of the home `up`/`down` name: beside a config (its DAG written) or a
    DAG file (its folder as the DAGs folder), or --home."""
    from trialflow.cli.runner import embedded_airflow
    from trialflow.experiment import default_home

    path = Path(args.path).expanduser().resolve() if args.path else None
    if path is not None and not path.is_file():
        raise FileNotFoundError(f"{args.path}: no such config or DAG file")
    home = (Path(args.home) if args.home else default_home(path) if path else Path(".trialflow")).resolve()
    if path is not None and is_dag_file(path):
        return embedded_airflow(home, UP_PARALLELISM, tuple(args.viewer), dags_folder=path.parent)
    if path is not None and args.func is cmd_up:
        from trialflow.cli.runner import ExperimentRun

        run = ExperimentRun(path, home)  # a config: its DAG is written now, parsed before its run
        run.write_dag()
        run.airflow.parallelism = UP_PARALLELISM
        return run.airflow
    return embedded_airflow(home, UP_PARALLELISM, tuple(args.viewer))


#: Worker processes of an Airflow kept up for several runs (LocalExecutor starts them all at once:
#: 16 were 16 idle processes).
UP_PARALLELISM = 8


def cmd_up(args: argparse.Namespace) -> int:
    """Start a home's private Airflow and keep it up: every later `trialflow run` of the home
    uses it (triggered at once instead of after Airflow's start)."""
    from trialflow.cli.shared_airflow import up

    try:
        airflow = _home_airflow(args)
    except (ConfigError, FileNotFoundError) as exc:
        return _fail(exc)
    say = _stderr
    started = up(airflow)
    say(f"Airflow {'started' if started else 'was already up'}: {airflow.base_url} (DAGs folder {airflow.dags_folder})")
    say(f"Log in as trialflow; the password is in {airflow.home / 'passwords.json'}")
    say(f"`trialflow down --home {airflow.home.parent}` stops it")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Stop a home's kept Airflow (after its last run, when runs use it)."""
    from trialflow.cli.shared_airflow import down

    try:
        airflow = _home_airflow(args)
    except (ConfigError, FileNotFoundError) as exc:
        return _fail(exc)
    _stderr(f"Airflow of {airflow.home.parent}: {down(airflow)}")
    return 0


def _stderr(text: str) -> None:
    print(text, file=sys.stderr)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
