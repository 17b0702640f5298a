"""`trialflow render`: exactly what one trial would submit, without submitting it.

Parameters come from the configured tuner, seeded for that trial as a real
run seeds it, as it would propose them before any result is known; each platform renders its own
submission (local: command, working directory, environment; later platforms:
manifests, SSH commands, REST bodies). Secrets are redacted on the way out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from trialflow.config.errors import ConfigError, Problem
from trialflow.config.redaction import redact
from trialflow.experiment import Experiment, default_home, load_runnable_config, run_workdir, trial_count
from trialflow.platforms.base import experiment_id_for
from trialflow.tuning.tuners import make_sampler, sample_parameters


def render_trial(config_path: str | Path, trial_index: int = 0, home: Path | None = None) -> dict[str, Any]:
    """What trial ``trial_index`` would submit, with the folders `trialflow run` (``home``:
    its home, default .trialflow beside the config) would give it."""
    config = load_runnable_config(config_path)
    count = trial_count(config)
    if not 0 <= trial_index < count:
        raise ConfigError(
            [
                Problem(
                    config.source_file,
                    ("maxTrialNumber",),
                    f"--trial-index {trial_index} is outside this experiment's trials 0..{count - 1}",
                )
            ]
        )
    origin = Path(config.source_file or config_path)  # a config written in a DAG file: that file
    experiment = Experiment(
        config,
        experiment_id_for("render", config.source if config.inline_source else str(origin.resolve())),
        run_workdir(config, home or default_home(origin)),
    )
    algorithm = experiment.algorithm
    if algorithm.class_name is not None:  # a custom tuner runs only in a run: a random point shows the shape
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=trial_index))
        parameters = experiment.space.sample(study.ask())
    else:
        study = optuna.create_study(
            sampler=make_sampler(algorithm, experiment.space, trial_index), direction=config.optimize_mode
        )
        parameters = sample_parameters(algorithm, experiment.space, study.ask(), trial_index)
    spec = experiment.trial_spec(trial_index, trial_index, parameters)
    return redact(
        {
            "experiment_id": experiment.experiment_id,
            "trial_index": trial_index,
            "trial_id": spec.trial_id,
            "parameters": parameters,
            "submission": dict(experiment.platform().render(spec)),
        }
    )
