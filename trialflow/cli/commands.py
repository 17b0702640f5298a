"""The `trialflow` command: validate | convert | render | run | ui | experiments | trials | export."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from trialflow.authoring.plan import Built
from trialflow.cli.dag_files import NoExperiment, experiments_in, is_dag_file
from trialflow.config import ConfigError, ExperimentConfig, load_config, to_v2_dict
from trialflow.config.errors import Problem

if TYPE_CHECKING:
    from trialflow.tracking.preflight import TrackingFinding

T = TypeVar("T")


def _count(text: str) -> int:
    """A row count or offset: 0..2**31-1 (a larger one is a typo, not a database error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"expected 0..{2**31 - 1}, got {text}")
    return value


def _fail(exc: Exception) -> int:
    print(str(exc), file=sys.stderr)
    return 1


def _load(path: str) -> ExperimentConfig | None:
    """The config, or None after printing every problem to stderr."""
    try:
        return load_config(path)
    except ConfigError as exc:
        _fail(exc)
        return None


def trials_sentence(config: ExperimentConfig) -> str:
    """How many trials the experiment runs, as it will run them: a config without
    maxTrialNumber is not "100 trials" but unbounded, in DAG runs of that many."""
    from trialflow.config.units import format_duration
    from trialflow.experiment import trial_count, unbounded

    count = trial_count(config)
    if not unbounded(config):
        return f"{count} trials"
    until = (
        f"until maxExperimentDuration ({format_duration(config.max_experiment_duration)})"
        if config.max_experiment_duration
        else "until you stop it (no maxTrialNumber, no maxExperimentDuration)"
    )
    return f"trials without a limit {until}, {count} per DAG run"


def _each(path: str) -> list[tuple[Built, ExperimentConfig]] | None:
    """Every experiment of ``path`` loaded, or None after printing what is wrong."""
    try:
        sources = experiments_in(path)
    except (ConfigError, NoExperiment) as exc:
        _fail(exc)
        return None
    loaded = []
    for found in sources:
        config = _load(found.source)
        if config is None:
            return None
        loaded.append((found, config))
    return loaded


def cmd_validate(args: argparse.Namespace) -> int:
    from trialflow.experiment import check_runnable

    loaded = _each(args.config)
    if loaded is None:
        return 1
    for found, config in loaded:
        label = found.label
        problems = check_runnable(config) + _function_problems(config, found.inputs)
        problems = problems or _custom_class_problems(config)
        tracking = _tracking_finding(config)
        if tracking is not None and tracking.error:
            problems.append(Problem(config.source_file, ("mlflow",), tracking.message))
        unwritable = _checkpoint_store_problem(config)
        if problems:
            return _fail(ConfigError(problems))
        print(
            f"{label}: OK ({', '.join(config.platform_names)}; {trials_sentence(config)}, "
            f"{config.trial_concurrency} at a time)",
            file=sys.stderr,
        )
        note = _warm_start_note(config)
        if note:
            print(f"{label}: note: warmStart: {note}", file=sys.stderr)
        if tracking is not None:
            print(f"{label}: warning: {tracking.message}", file=sys.stderr)
        if unwritable is not None:  # the workers' disk may differ from this one's: said, not refused
            print(f"{label}: warning: {unwritable}", file=sys.stderr)
    return 0


def _checkpoint_store_problem(config: ExperimentConfig) -> str | None:
    """Why a ``file://`` checkpoint store cannot be written from here (trialflow.checkpoints.preflight)."""
    from trialflow.checkpoints.preflight import file_store_problem

    store = config.checkpoints.store if config.checkpoints is not None else None
    return file_store_problem(store) if store else None


def _tracking_finding(config: ExperimentConfig) -> TrackingFinding | None:
    """What trialflow.tracking.preflight finds of the config's MLflow server from here."""
    from trialflow.tracking.preflight import check_tracking

    return check_tracking(config.mlflow, os.environ)


def _custom_class_problems(config: ExperimentConfig) -> list[Problem]:
    """A custom tuner, assessor or advisor made as a run makes it (imported from its folder, in a
    Python of its own, with its classArgs), its own error said when it cannot be."""
    from trialflow.config.search_space import parse_search_space
    from trialflow.tuning.custom.runner import CustomClass, check

    problems = []
    for key, algorithm in (("tuner", config.tuner), ("assessor", config.assessor), ("advisor", config.advisor)):
        if algorithm is None or algorithm.class_name is None:
            continue
        role = "assessor" if key == "assessor" else "tuner"  # an advisor is kept as the tuner
        said = check(CustomClass.of(algorithm, role), parse_search_space(config.search_space))
        if said:
            problems.append(Problem(config.source_file, (key, "className"), said))
    return problems


def _function_problems(config: ExperimentConfig, inputs: tuple[str, ...]) -> list[Problem]:
    """A function trial imported as its trials would import it (from its code folder, in a
    Python of its own) and its signature checked against the run's inputs."""
    if not config.trial_function:
        return []
    from trialflow.config.loader import effective_code_directory
    from trialflow.trial.function import check_function

    folder = effective_code_directory(config)
    if not Path(folder).is_dir():
        return [Problem(config.source_file, ("trialCodeDirectory",), f"{folder} is not a folder")]
    found = check_function(config.trial_function, str(folder), list(inputs))
    return [Problem(config.source_file, ("trialFunction",), said) for said in found]


def _warm_start_note(config: ExperimentConfig) -> str:
    """What a warmStart's earlier results do to this tuner (trialflow.seeding.warm_start.learning_said)."""
    if config.warm_start is None or config.warm_start.use != "results":
        return ""
    from trialflow.experiment import Experiment
    from trialflow.seeding.warm_start import learning_said
    from trialflow.tuning.algorithms import canonical_tuner_name
    from trialflow.tuning.tuners import random_start

    experiment = Experiment(config, "validate", Path("."))
    algorithm = experiment.algorithm
    if algorithm.class_name is not None:
        return ""  # a user's own tuner: its start is its own
    return learning_said(random_start(algorithm, experiment.space), canonical_tuner_name(algorithm), None)


def cmd_convert(args: argparse.Namespace) -> int:
    loaded = _each(args.config)
    if loaded is None:
        return 1
    several = len(loaded) > 1
    for found, config in loaded:
        if several:  # one YAML document per experiment of the DAG file, each named
            sys.stdout.write(f"---\n# {found.label}\n")
        sys.stdout.write(yaml.safe_dump(to_v2_dict(config), sort_keys=False, allow_unicode=True))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from trialflow.cli.render import render_trial

    try:
        sources = experiments_in(args.config)
        if len(sources) > 1 and not args.experiment:
            names = ", ".join(s.label for s in sources)
            raise NoExperiment(
                f"{args.config} builds {len(sources)} experiments ({names}): choose one with --experiment"
            )
        wanted = args.experiment
        chosen = [s.source for s in sources if not wanted or wanted in (s.label, s.label.rpartition(" / ")[2])]
        if not chosen:
            raise NoExperiment(f"{args.config}: no experiment named {args.experiment!r}")
        rendered = render_trial(chosen[0], args.trial_index, Path(args.home) if args.home else None)
    except (ConfigError, NoExperiment) as exc:
        return _fail(exc)
    objects = rendered["submission"].get("objects")
    if objects is None:
        sys.stdout.write(yaml.safe_dump(rendered, sort_keys=False, allow_unicode=True))
        return 0
    # Kubernetes platforms: the objects one trial creates, as multi-document YAML that
    # `kubectl apply -f -` would take (secret values masked), with what chose them as comments.
    header = {k: v for k, v in rendered.items() if k != "submission"}
    for line in yaml.safe_dump(header, sort_keys=False, allow_unicode=True).splitlines():
        sys.stdout.write(f"# {line}\n")
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, allow_unicode=True, explicit_start=True))
    return 0


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


# -- reading the store (nnictl's list / show / export) --------------------------------------


def _store_engine(args: argparse.Namespace) -> Any:
    """The store named by --store, by --home (a `trialflow run` home), or by Airflow's
    ``trialflow_default`` connection."""
    return _store(args).storage.engine


def _store(args: argparse.Namespace, create: bool = False) -> Any:
    """The store the command names. Only a command that makes a store (``create``: an import)
    may open an empty database or a SQLite path that does not exist yet; every other command
    is refused one that holds no trialflow store (NotAStore), so that reading never writes
    (ExperimentStore creates its tables in whatever database it opens)."""
    from trialflow.store.experiment_store import ExperimentStore
    from trialflow.store.schema import existing_store
    from trialflow.store.urls import with_installed_driver

    url = _store_url(args)
    if not create:
        existing_store(with_installed_driver(url))
    return ExperimentStore(url)


def _store_url(args: argparse.Namespace) -> str:
    from trialflow.store.experiment_store import sqlite_url

    if args.store:
        return _readable_url(str(args.store))
    if args.home:
        if not (Path(args.home) / "experiments.db").exists():
            raise FileNotFoundError(f"no experiment store in {args.home} (expected experiments.db there)")
        return sqlite_url(Path(args.home) / "experiments.db")
    from trialflow.hooks.experiment_store import ExperimentStoreHook

    return str(ExperimentStoreHook().storage_url())


def _readable_url(url: str) -> str:
    """``url`` if it splits unambiguously (trialflow.store.urls.check_store_url), else
    StoreUrlError, showing no part of it past the scheme."""
    from trialflow.store.urls import check_store_url

    check_store_url(url)
    return url


def cmd_db(args: argparse.Namespace) -> int:
    """``db check``: the store's schema and whether this trialflow opens it; ``db upgrade``:
    move it to this trialflow's schema (Optuna's tables too), whole or not at all."""
    import sqlalchemy as sa

    from trialflow.store import schema as store_schema
    from trialflow.store.urls import StoreUrlError, safe_url, with_installed_driver
    from trialflow.store.version import HEAD, NotAStore, StoreSchemaError

    try:
        url = with_installed_driver(_store_url(args))
        store_schema.existing_store(url)  # nothing is created or written where there is no store
    except (FileNotFoundError, StoreUrlError) as exc:
        return _fail(exc)
    except NotAStore as exc:
        if args.action == "check" and exc.empty:
            print(f"{safe_url(url)}: no trialflow store here yet; a run or an import makes one at schema {HEAD}")
            return 0
        return _fail(exc)
    engine = sa.create_engine(url)
    try:
        found = store_schema.state(engine)
        if args.action == "check":
            if found.current:
                print(f"{safe_url(url)}: schema {HEAD}, as this trialflow needs")
                return 0
            return _fail(StoreSchemaError(store_schema.refusal(engine, found)))
        try:
            before, after = store_schema.upgrade(engine)
        except KeyboardInterrupt:
            # The upgrade is one transaction: interrupted, it is rolled back whole.
            return _fail(InterruptedError(f"{safe_url(url)}: upgrade interrupted; the store is as it was"))
    except StoreSchemaError as exc:
        return _fail(exc)
    finally:
        engine.dispose()
    said = "0.1.0's unversioned tables" if before is None else f"schema {before}"
    print(
        f"{safe_url(url)}: {said} -> schema {after}"
        if before != after
        else f"{safe_url(url)}: already at schema {after}"
    )
    return 0


def _when(epoch: float | None) -> str:
    import datetime as dt

    return "" if epoch is None else dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def _span(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def _cell(value: Any) -> str:
    from rich.markup import escape

    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return escape(value if isinstance(value, str) else json.dumps(value))


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))
    for column in columns:
        table.add_column(escape(column), overflow="fold")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(120, 16 * len(columns)))
    console.print(table)


def cmd_experiments(args: argparse.Namespace) -> int:
    from trialflow import queries

    try:
        rows = queries.list_experiments(_store_engine(args), kept=False)  # one read: nothing to keep
    except (FileNotFoundError, ValueError) as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=2))
        return 0
    _table(
        "trialflow experiments",
        ["experiment", "name", "dag", "status", "platform", "tuner", "trials", "best", "started", "duration"],
        [
            [
                r.experiment_id,
                r.name,
                r.dag_id,
                _experiment_status(r.active, r.stopped),
                r.platform,
                r.tuner,
                ", ".join(f"{n} {s.lower()}" for s, n in sorted(r.counts.items())),
                f"Pareto set of {r.pareto_size}" if r.pareto_size is not None else r.best,
                _when(r.started),
                _span((r.ended or 0) - r.started if r.started and r.ended else None),
            ]
            for r in rows
        ],
    )
    return 0


def _experiment_status(active: bool, stopped: dict[str, Any] | None) -> str:
    """running, stopped (by whom, when) or finished: the pages' words, without Airflow's run."""
    if stopped:
        return f"{'stopping' if active else 'stopped'} by {stopped.get('by') or '?'} {_when(stopped.get('at'))}"
    return "running" if active else "finished"


def nni_folder_of(given: str) -> Path:
    """An NNI experiment folder, or the folder of an experiment id under NNI's default
    (``~/nni-experiments/<id>``), as `nnictl experiment` names them."""
    path = Path(given).expanduser()
    if path.is_dir() or "/" in given or not given.isascii() or not given.isalnum() or len(given) > 32:
        return path
    return Path.home() / "nni-experiments" / given


def _result_file_config(args: argparse.Namespace) -> dict[str, Any]:
    """The NNI config an export or import-data file is read against (it holds none itself)."""
    from trialflow.nni_history import NniHistoryError

    if not args.config:
        raise NniHistoryError(
            f"{args.experiment}: an NNI export or import-data file holds no search space: "
            "pass the experiment's NNI config with --config"
        )
    return to_v2_dict(load_config(Path(args.config)))


def cmd_import_nni(args: argparse.Namespace) -> int:
    from trialflow.nni_history import NniHistoryError, read_experiment, read_result_file
    from trialflow.seeding.nni_import import import_experiment, import_target

    try:
        source = Path(args.experiment).expanduser()
        if source.is_file() or source.suffix.lower() in (".json", ".csv"):
            nni = read_result_file(source, _result_file_config(args))
        else:
            nni = read_experiment(nni_folder_of(args.experiment))
        import_target(nni, args.dag, args.experiment_id)  # bad input is refused before a store is made
        done = import_experiment(_store(args, create=True), nni, args.dag, args.experiment_id)
    except (NniHistoryError, ConfigError, FileNotFoundError) as exc:
        return _fail(exc)
    swapped = f"; {done.swapped} trial job(s) reported under another parameter set (kept as reported)"
    print(
        f"NNI experiment {nni.experiment_id} imported as {done.experiment_id} under DAG {args.dag}: "
        f"{done.trials} trial(s){swapped if done.swapped else ''}",
        file=sys.stderr,
    )
    return 0


def cmd_trials(args: argparse.Namespace) -> int:
    from trialflow import queries

    try:
        engine = _store_engine(args)
        page = queries.trials_page(
            engine,
            args.experiment,
            statuses=args.status.split(",") if args.status else None,
            search=args.search or "",
            sort=args.sort,
            descending=args.desc,
            limit=args.limit,
            offset=args.offset,
        )
    except queries.UnknownExperiment:
        return _fail(LookupError(f"no experiment {args.experiment!r} in the store (see `trialflow experiments`)"))
    except (FileNotFoundError, ValueError) as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(page, indent=2))
        return 0
    flat = [queries.flatten_parameters(r["parameters"]) for r in page["rows"]]
    names = sorted({k for f in flat for k in f})
    objectives = [o["metric"] for o in page.get("objectives", [])]  # several: a column each, * the Pareto set
    metric_columns = ["pareto", *objectives] if objectives else ["metric"]
    _table(
        f"experiment {args.experiment}: {page['total']} trials"
        + (f", {len(page['pareto'])} in the Pareto set (*)" if objectives else ""),
        ["#", "id", "status", *metric_columns, "duration", "platform", "source", *names],
        [
            [
                r["trial_index"],
                r["trial_id"],
                r["status"],
                *(
                    ["*" if r.get("pareto") else "", *((r.get("values") or {}).get(n) for n in objectives)]
                    if objectives
                    else [r["metric"]]
                ),
                _span(r["duration"]),
                r["platform"],
                r["parameter_source"] + (f" ({r['added_by']})" if r.get("added_by") else ""),
                *(f.get(n) for n in names),
            ]
            for r, f in zip(page["rows"], flat)
        ],
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from trialflow import queries

    try:
        engine = _store_engine(args)
        # Streamed a chunk at a time: an experiment of 20,000 trials is never held whole.
        chunks = (
            queries.iter_csv(engine, args.experiment)
            if args.format == "csv"
            else itertools.chain(queries.iter_json(engine, args.experiment), ["\n"])
        )
    except queries.UnknownExperiment:
        return _fail(LookupError(f"no experiment {args.experiment!r} in the store (see `trialflow experiments`)"))
    except (FileNotFoundError, ValueError) as exc:
        return _fail(exc)
    try:
        with contextlib.ExitStack() as stack:
            out = stack.enter_context(open(args.output, "w", encoding="utf-8")) if args.output else sys.stdout
            for chunk in chunks:
                out.write(chunk)
    except OSError as exc:  # a folder that is not there, a file that may not be written
        return _fail(OSError(f"cannot write the export to {args.output or 'stdout'}: {exc.strerror or exc}"))
    return 0


# -- acting on a running experiment (nnictl stop / trial kill) ---------------------------------


def _actor() -> str:
    import getpass

    return f"{getpass.getuser()} (CLI)"


def _steer(args: argparse.Namespace, action: Callable[[Any, str], T]) -> tuple[T | None, int]:
    """Run one steering action on the store ``args`` names, as the user at this terminal; a
    refused one (steering.ActionRefused is a ValueError) prints why and gives exit code 1."""
    try:
        return action(_store(args), _actor()), 0
    except (FileNotFoundError, ValueError) as exc:
        return None, _fail(exc)


def cmd_kill(args: argparse.Namespace) -> int:
    """Ask one trial to stop; whoever follows it cancels its job at its next poll."""
    from trialflow import steering

    record, code = _steer(args, lambda store, by: steering.kill_trial(store, args.experiment, args.trial, by))
    if record is None:
        return code
    print(f"trial {record.trial_index} ({record.trial_id}) asked to stop; it ends USER_CANCELED within seconds")
    return 0


def cmd_remove_artifacts(args: argparse.Namespace) -> int:
    """Delete an ended experiment's checkpoints and artifacts from its artifact store."""
    from trialflow.hooks.artifact_store import store_root
    from trialflow.steering.removals import remove_artifacts

    def remove(store: Any, by: str) -> Any:
        return remove_artifacts(store, args.experiment, by, lambda where: store_root(where.url, where.conn_id))

    from trialflow.checkpoints.keeper import CheckpointError
    from trialflow.hooks.artifact_store import ArtifactStoreUnavailable

    try:
        removed, code = _steer(args, remove)
    except (ArtifactStoreUnavailable, CheckpointError, OSError) as exc:  # the store: not there, refusing
        return _fail(exc)
    except Exception as exc:  # the store's own SDK (botocore, azure-core...) raises its own kinds
        from trialflow.config.redaction import mask_text

        said = " ".join(str(exc).split())[:300] or type(exc).__name__
        return _fail(RuntimeError(f"the artifact store could not be reached; nothing was removed: {mask_text(said)}"))
    if removed is None:
        return code
    print(f"experiment {args.experiment}: removed {removed.files} checkpoint and artifact file(s) from {removed.url}")
    return 0


def cmd_sync_mlflow(args: argparse.Namespace) -> int:
    """Send an experiment's MLflow runs what they lack (what a tracking server that was down
    missed after the run's end step); a second call sends nothing."""
    from trialflow.hooks import airflow_connections
    from trialflow.tracking.mlflow_rest import TrackingUnavailable
    from trialflow.tracking.runner import Tracking
    from trialflow.tracking.target import TrackingNotConfigured

    try:
        store = _store(args)
        if not store.experiment_exists(args.experiment):
            return _fail(ValueError(f"no experiment {args.experiment!r}"))
        tracking = Tracking.open(store, args.experiment, airflow_connections())
        if tracking is None:
            return _fail(
                ValueError(f"experiment {args.experiment!r} names no MLflow server (its config has no mlflow key)")
            )
        report = tracking.sync(budget=args.timeout)
    except (FileNotFoundError, ValueError, TrackingNotConfigured, TrackingUnavailable) as exc:
        return _fail(exc)
    if not report.passed:
        return _fail(ValueError("another process is sending this experiment to MLflow now: try again in a minute"))
    if report.error:
        return _fail(ValueError(f"{report.error}; {report.pending} run(s) still to send"))
    left = f"; {report.pending} left for the next call (out of time)" if report.pending else ""
    where = tracking.run_urls().get("experiment", tracking.target.uri)
    print(f"experiment {args.experiment}: {report.sent} MLflow run(s) brought up to date{left}: {where}")
    return 1 if report.pending else 0


def cmd_stop(args: argparse.Namespace) -> int:
    """Stop the experiment: no new trial starts, running ones are cancelled."""
    from trialflow import steering

    stopped, code = _steer(args, lambda store, by: steering.stop_experiment(store, args.experiment, by))
    if stopped is None:
        return code
    print(
        f"experiment {args.experiment} stopped: {len(stopped.asked)} running trial(s) asked to stop, "
        "no new trial starts"
    )
    return 0


def cmd_update_searchspace(args: argparse.Namespace) -> int:
    """Change a running experiment's search space (nnictl update searchspace), or list its
    versions without a FILE."""
    from trialflow import steering
    from trialflow.steering.space_changes import MAX_SPACE_BYTES

    if args.file is None:
        found, code = _steer(args, lambda store, _: steering.space_versions(store, args.experiment))
        for version in found or []:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(version.at or 0))
            when = "the config's" if version.at is None else f"{stamp} by {version.by}"
            print(f"version {version.version} ({when}): {json.dumps(version.space)}")
        return code
    from trialflow.config.files import FileProblem, load_yaml, read_bounded

    path = Path(args.file)
    try:  # the config reader's own bounds: size, UTF-8, no alias bombs or duplicate keys
        raw, _ = load_yaml(read_bounded(path, MAX_SPACE_BYTES, "search space file"))  # JSON is YAML
    except FileProblem as exc:
        return _fail(ValueError(str(exc)))
    except yaml.YAMLError as exc:
        return _fail(ValueError(f"{path}: not JSON or YAML: {exc}"))
    changed, code = _steer(args, lambda store, by: steering.change_search_space(store, args.experiment, by, raw))
    if changed is None:
        return code
    print(
        f"experiment {args.experiment}: search space version {changed.version} ({len(changed.space)} parameter(s)); "
        "trials asked from now on sample from it, and earlier trials reach the tuner only where they fit it"
    )
    return 0


def cmd_limits(args: argparse.Namespace) -> int:
    """Change a running experiment's limits (nnictl update concurrency / trialnum / duration)."""
    from trialflow import steering

    changes = {
        key: value
        for key, value in (
            ("trialConcurrency", args.concurrency),
            ("maxTrialNumber", args.max_trials),
            ("maxExperimentDuration", args.duration),
        )
        if value is not None
    }
    if not changes:
        shown, code = _steer(args, lambda store, _: steering.limits(store, args.experiment))
        if shown is not None:
            print(json.dumps(shown, indent=2))
        return code
    limits, code = _steer(args, lambda store, by: steering.change_limits(store, args.experiment, by, changes))
    if limits is None:
        return code
    print(json.dumps(limits, indent=2))
    if "trialConcurrency" in changes:
        print(
            "trialConcurrency reaches the running DAG run when Airflow next parses its file "
            "([dag_processor] min_file_process_interval; the pages' action asks for that parse at once)",
            file=sys.stderr,
        )
    return 0


def cmd_add_trial(args: argparse.Namespace) -> int:
    """Queue a trial with chosen parameters (NNI's "customized trial")."""
    from trialflow import steering

    try:
        parameters = json.loads(args.parameters)
    except json.JSONDecodeError as exc:
        return _fail(ValueError(f"--parameters: expected a JSON object, e.g. '{{\"lr\": 0.01}}' ({exc})"))
    _, code = _steer(args, lambda store, by: steering.add_trial(store, args.experiment, parameters, by))
    if code:
        return code
    print(f"queued: the next trial of {args.experiment} to start runs {json.dumps(parameters)}")
    return 0


def cmd_rerun(args: argparse.Namespace) -> int:
    """Queue failed trials again (or the ones named), each as a new trial."""
    from trialflow import steering

    rerun, code = _steer(args, lambda store, by: steering.rerun_trials(store, args.experiment, by, args.trial or None))
    if rerun is None:
        return code
    print(f"queued again: trial{'s' if len(rerun) > 1 else ''} {', '.join(map(str, rerun))}")
    return 0


def _viewer_arg(p: argparse.ArgumentParser) -> None:
    """--viewer NAME (repeatable): a read-only login of the private Airflow (`run` drops the
    shell's AIRFLOW__* settings, so its users are set here)."""

    def login(name: str) -> str:
        from trialflow.cli.embedded import check_login_name

        try:
            return check_login_name(name)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    p.add_argument(
        "--viewer",
        action="append",
        default=[],
        type=login,
        metavar="NAME",
        help="add a read-only login NAME (sees the pages, no button); its password is in the home's "
        "airflow/passwords.json",
    )


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--home", help="a `trialflow run` home (its experiments.db); default: the trialflow_default Airflow connection"
    )
    p.add_argument("--store", help="the store's SQLAlchemy URL")


def build_parser() -> argparse.ArgumentParser:
    from trialflow import __version__

    parser = argparse.ArgumentParser(prog="trialflow", description="NNI experiments on Apache Airflow.")
    parser.add_argument("--version", action="version", version=f"trialflow {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "validate", help="check a config (NNI v1 or v2), or the experiments of a DAG file; exit 0 if they can run"
    )
    p.add_argument("config")
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser(
        "convert", help="print the NNI v2 form of a config (v1 configs are converted) or of a DAG file's experiments"
    )
    p.add_argument("config")
    p.set_defaults(func=cmd_convert)
    p = sub.add_parser("render", help="print what would be submitted for one trial, without submitting")
    p.add_argument("config")
    p.add_argument("--trial-index", type=int, default=0)
    p.add_argument("--experiment", help="which experiment of a DAG file with several: its task group id")
    p.add_argument(
        "--home", help="the `trialflow run` home whose folders to show (default: .trialflow/ beside the config)"
    )
    p.set_defaults(func=cmd_render)
    p = sub.add_parser(
        "run", help="run the experiment (a config) or your DAG file end to end on a private, local Airflow"
    )
    p.add_argument("config", help="an NNI config (YAML), or a DAG file (.py) with experiments in it")
    p.add_argument("--dag-id", default=None, help="a DAG file's DAG to run, when it has several with experiments")
    p.add_argument("--home", help="private Airflow + results folder (default: .trialflow/ beside the config)")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary instead of a table")
    p.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    p.add_argument(
        "--new", action="store_true", help="start a fresh experiment instead of resuming the last one for this config"
    )
    p.add_argument(
        "--keep-running",
        action="store_true",
        help="when the experiment ends, keep Airflow up and print the experiment page's URL",
    )
    _viewer_arg(p)
    p.add_argument(
        "--downstream",
        action="append",
        default=[],
        metavar="DAG_FILE",
        help="a DAG file scheduled on the experiment's Asset (best_parameters_asset) to run beside it on the "
        "private Airflow (repeatable); `run` waits for the runs the published Asset starts",
    )
    p.set_defaults(func=cmd_run)
    for name, text in (
        ("up", "start a home's private Airflow and keep it up for the `trialflow run`s that follow"),
        ("down", "stop a home's private Airflow (after the last run using it)"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("path", nargs="?", help="a config or DAG file whose home (.trialflow beside it) it is")
        p.add_argument("--home", help="the home (default: .trialflow beside PATH, or in the current folder)")
        _viewer_arg(p)
        p.set_defaults(func=cmd_up if name == "up" else cmd_down)
    p = sub.add_parser("ui", help="serve the experiment pages of a `trialflow run` home (Airflow's api-server)")
    p.add_argument("config", nargs="?", help="the experiment config whose .trialflow home to serve")
    p.add_argument("--home", help="a `trialflow run` home (default: .trialflow beside CONFIG)")
    p.add_argument("--port", type=int, default=None)
    _viewer_arg(p)
    p.set_defaults(func=cmd_ui)
    p = sub.add_parser("experiments", help="list the experiments in the store")
    _store_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_experiments)
    p = sub.add_parser(
        "import-nni", help="make a store experiment of an NNI 2.x/3.0 experiment (its folder, or its id)"
    )
    p.add_argument(
        "experiment",
        help="an NNI experiment folder, an id under ~/nni-experiments, or a file of `nnictl experiment "
        "export` (.json/.csv) or of NNI's import data (.json)",
    )
    p.add_argument("--dag", required=True, help="the DAG the experiment belongs to (who may see it in the pages)")
    p.add_argument("--config", help="with a file: the experiment's NNI config (its search space and tuner)")
    p.add_argument("--experiment-id", help="the store experiment's id (default nni-<NNI's id>)")
    _store_args(p)
    p.set_defaults(func=cmd_import_nni)
    p = sub.add_parser("db", help="the experiment store's schema: check it, or upgrade it to this trialflow's")
    p.add_argument("action", choices=("check", "upgrade"))
    _store_args(p)
    p.set_defaults(func=cmd_db)
    p = sub.add_parser("trials", help="one experiment's trials, sorted and filtered")
    p.add_argument("experiment")
    _store_args(p)
    p.add_argument("--sort", default="index", help="index, status, metric, duration, platform or param:NAME")
    p.add_argument("--desc", action="store_true", help="sort descending")
    p.add_argument("--status", help="comma-separated statuses, e.g. SUCCEEDED,FAILED")
    p.add_argument("--search", help="text in the id, parameters or message")
    p.add_argument("--limit", type=_count, default=100)
    p.add_argument("--offset", type=_count, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_trials)
    p = sub.add_parser("export", help="every trial of an experiment as CSV or JSON")
    p.add_argument("experiment")
    _store_args(p)
    p.add_argument("--format", choices=("csv", "json"), default="csv")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("kill", help="stop one running trial (USER_CANCELED), as the page's Kill button")
    p.add_argument("experiment")
    p.add_argument("trial", type=_count, help="the trial's index")
    _store_args(p)
    p.set_defaults(func=cmd_kill)
    p = sub.add_parser(
        "remove-artifacts",
        help="delete an ended experiment's checkpoints and artifacts from its artifact store (said in its history)",
    )
    p.add_argument("experiment")
    _store_args(p)
    p.set_defaults(func=cmd_remove_artifacts)
    p = sub.add_parser(
        "sync-mlflow",
        help="send an experiment's MLflow runs what they lack (a tracking server that was down), once",
    )
    p.add_argument("experiment")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to keep sending (default 300)")
    _store_args(p)
    p.set_defaults(func=cmd_sync_mlflow)
    p = sub.add_parser("stop", help="stop an experiment: no new trial starts, running ones are cancelled")
    p.add_argument("experiment")
    _store_args(p)
    p.set_defaults(func=cmd_stop)
    p = sub.add_parser(
        "update-searchspace",
        help="change a running experiment's search space from a JSON or YAML file (nnictl update searchspace); "
        "without FILE, list its versions",
    )
    p.add_argument("experiment")
    p.add_argument("file", nargs="?")
    _store_args(p)
    p.set_defaults(func=cmd_update_searchspace)
    p = sub.add_parser("limits", help="show or change a running experiment's limits, as the pages' form")
    p.add_argument("experiment")
    p.add_argument("--concurrency", type=_count, help="trialConcurrency")
    p.add_argument("--max-trials", type=_count, help="maxTrialNumber")
    p.add_argument("--duration", help="maxExperimentDuration, e.g. 2h")
    _store_args(p)
    p.set_defaults(func=cmd_limits)
    p = sub.add_parser("add-trial", help="queue a trial with chosen parameters; it runs next, the tuner sees it")
    p.add_argument("experiment")
    p.add_argument("--parameters", required=True, help="a JSON object, a point of the search space")
    _store_args(p)
    p.set_defaults(func=cmd_add_trial)
    p = sub.add_parser("rerun", help="queue every failed trial again (or --trial N), each as a new trial")
    p.add_argument("experiment")
    p.add_argument("--trial", type=_count, action="append", help="a trial index (repeat for several)")
    _store_args(p)
    p.set_defaults(func=cmd_rerun)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from trialflow.store.version import NotAStore, StoreSchemaError

    args = build_parser().parse_args(argv)
    try:
        result: Any = args.func(args)
    except (StoreSchemaError, NotAStore) as exc:  # another trialflow's store, or none: say so
        return _fail(exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        said = _database_failure(exc)
        if said is None:
            raise
        return _fail(said)
    return int(result)


def _database_failure(exc: Exception) -> Exception | None:
    """What to say for SQLAlchemy's errors, or None for any other. SQLAlchemy is looked up,
    not imported: a command that never imported it cannot have raised its errors, and its
    import (0.4 s) is kept off the commands that do not read a store (a warm `trialflow run`
    triggers before anything imports it)."""
    sa = sys.modules.get("sqlalchemy")
    if sa is None:
        return None
    if isinstance(exc, sa.exc.ArgumentError):  # its text repeats the URL, password and all
        return ValueError("the store URL is not one SQLAlchemy reads (e.g. sqlite:///path/experiments.db)")
    if isinstance(exc, sa.exc.DBAPIError):  # unreachable, refused, locked, not a database: the driver says which
        return ConnectionError(f"the store's database failed: {_driver_said(exc)}")
    return None


def _driver_said(exc: Exception) -> str:
    """The first line of what the database driver said (an empty one named by its type),
    with any secret in it masked (a driver may echo the connection string), then bounded.
    Bounded first, a URL cut before its ``@`` would no longer read as one and keep the start of
    its password; so the text is capped before masking only at a space (a secret holds none),
    and a first word longer than the cap is not said at all."""
    from trialflow.config.redaction import mask_text

    orig = getattr(exc, "orig", None) or exc
    said = str(orig)
    if len(said) > 4096:
        words = said[:4096].rsplit(None, 1)
        said = words[0] if len(words) == 2 else ""
    first = next(iter(said.strip().splitlines()), "") or type(orig).__name__
    return mask_text(first)[:300]


if __name__ == "__main__":
    sys.exit(main())
