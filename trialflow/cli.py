"""The `trialflow` command: validate | convert | render | run."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

import yaml

from trialflow.config import ConfigError, ExperimentConfig, load_config, to_v2_dict


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


def cmd_validate(args: argparse.Namespace) -> int:
    from trialflow.experiment import check_runnable, trial_count

    config = _load(args.config)
    if config is None:
        return 1
    problems = check_runnable(config)
    if problems:
        return _fail(ConfigError(problems))
    print(f"{args.config}: OK ({', '.join(config.platform_names)}; {trial_count(config)} trials, "
          f"{config.trial_concurrency} at a time)", file=sys.stderr)
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if config is None:
        return 1
    sys.stdout.write(yaml.safe_dump(to_v2_dict(config), sort_keys=False, allow_unicode=True))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from trialflow.render import render_trial

    try:
        rendered = render_trial(args.config, args.trial_index)
    except ConfigError as exc:
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

    try:  # validate before importing Airflow or starting anything
        load_runnable_config(args.config)
    except ConfigError as exc:
        return _fail(exc)
    from trialflow.progress import RunDisplay
    from trialflow.runner import ExperimentRun

    run = ExperimentRun(args.config, Path(args.home) if args.home else None, new=args.new)
    # `kill` (SIGTERM) gets the same clean stop as Ctrl-C: trials cancelled, Airflow stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    display = RunDisplay(run.total_trials, quiet=args.json, optimize_mode=run.config.optimize_mode)
    state = "failed"
    try:
        run.start(say=display.say)
        with display:
            state = run.wait(display.update, timeout=args.timeout)
    except KeyboardInterrupt:
        display.say("Interrupted: cancelling running trials and stopping Airflow")
        cancelled = run.cancel_running("trialflow run interrupted")
        display.say(f"Cancelled {cancelled} running trial(s)")
        state = "interrupted"
    except Exception as exc:
        display.say(f"error: {exc}")
        state = "error"
    finally:
        run.stop()
    if run.run_id is None:
        return 1
    result = run.result(state)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        display.results(result)
    return 0 if result.succeeded else 1


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trialflow", description="NNI experiments on Apache Airflow.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="check a config (NNI v1 or v2); exit 0 if it can run")
    p.add_argument("config")
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("convert", help="print the NNI v2 form of a config (v1 configs are converted)")
    p.add_argument("config")
    p.set_defaults(func=cmd_convert)
    p = sub.add_parser("render", help="print what would be submitted for one trial, without submitting")
    p.add_argument("config")
    p.add_argument("--trial-index", type=int, default=0)
    p.set_defaults(func=cmd_render)
    p = sub.add_parser("run", help="run the experiment end to end on a private, local Airflow")
    p.add_argument("config")
    p.add_argument("--home", help="private Airflow + results folder (default: .trialflow/ beside the config)")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary instead of a table")
    p.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    p.add_argument("--new", action="store_true",
                   help="start a fresh experiment instead of resuming the last one for this config")
    p.set_defaults(func=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: Any = args.func(args)
    return int(result)


if __name__ == "__main__":
    sys.exit(main())
