"""`trialflow db | experiments | trials | export | import-nni`: the store read (nnictl's list,
show and export), its schema checked and upgraded, NNI's history brought in."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trialflow.cli.failures import _fail
from trialflow.config import ConfigError, load_config, to_v2_dict

if TYPE_CHECKING:
    pass

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
