"""The `trialflow` command's arguments, one parser (as cncf-kubernetes' cli/definition.py):
which subcommand takes what, and which function runs it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from trialflow.cli.config_commands import cmd_convert, cmd_render, cmd_validate
from trialflow.cli.run_commands import cmd_down, cmd_run, cmd_ui, cmd_up
from trialflow.cli.steer_commands import (
    cmd_add_trial,
    cmd_kill,
    cmd_limits,
    cmd_remove_artifacts,
    cmd_rerun,
    cmd_stop,
    cmd_sync_mlflow,
    cmd_update_searchspace,
)
from trialflow.cli.store_commands import cmd_db, cmd_experiments, cmd_export, cmd_import_nni, cmd_trials

if TYPE_CHECKING:
    pass


def _count(text: str) -> int:
    """A row count or offset: 0..2**31-1 (a larger one is a typo, not a database error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"expected 0..{2**31 - 1}, got {text}")
    return value


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
