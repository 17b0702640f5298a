"""`trialflow kill | stop | update-searchspace | limits | add-trial | rerun | remove-artifacts |
sync-mlflow`: a person's actions on an experiment, as the pages' buttons take them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from trialflow.cli.failures import _fail
from trialflow.cli.store_commands import _store

if TYPE_CHECKING:
    pass

T = TypeVar("T")


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
