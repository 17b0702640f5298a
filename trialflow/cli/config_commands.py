"""`trialflow validate | convert | render`: what a config or a DAG file holds, checked and
shown without running anything."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import yaml

from trialflow.authoring.plan import Built
from trialflow.cli.dag_files import NoExperiment, experiments_in
from trialflow.cli.failures import _fail
from trialflow.config import ConfigError, ExperimentConfig, load_config, to_v2_dict
from trialflow.config.errors import Problem

if TYPE_CHECKING:
    from trialflow.tracking.preflight import TrackingFinding

T = TypeVar("T")


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
