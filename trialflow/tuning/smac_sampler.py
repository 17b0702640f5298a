"""NNI's SMAC tuner as an Optuna sampler, through the SMAC3 package (the ``smac`` extra).

NNI's SMACTuner drove SMAC3 (0.x) in its dispatcher: a random forest of the observed losses and
expected improvement, its first trials from SMAC's initial design. Here each ask builds SMAC3's
hyperparameter-optimisation facade anew, tells it every finished trial (SMAC's ask/tell
interface), and asks it for one configuration: SMAC serves its Sobol initial design (10 points,
in order, from the experiment's ``seed``) until that many results are in, then its model's
choice, interleaved with random configurations one time in five (SMAC's default).

classArgs as NNI honoured them: ``optimize_mode`` (SMAC minimises; a maximised metric is told
negated) and ``config_dedup`` (True: a configuration already run is never asked again, as NNI's
option did; SMAC is asked again, a bounded number of times, then a random point is drawn).
Running trials' configurations are never handed out twice, whatever ``config_dedup`` says:
NNI's single dispatcher never did either.

Where it differs from NNI's: SMAC's forest is grown in one thread (its joblib workers spent half
an ask waiting; the forest is the same, seeded); parameters are SMAC floats in the unit cube
(log-scaled where the distribution is; integers and steps rounded), and choices SMAC
categoricals; SMAC3 2.x's random forest is scikit-learn's, where 0.x used pyrfr. SMAC writes its
run history to a temporary folder per ask, removed when the ask ends.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any, cast

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution

from trialflow.tuning.model_sampler import UnitCubeSampler, grid_keys

#: SMAC's initial design: this many Sobol points before the model.
INITIAL_DESIGN = 10
#: Asks for a configuration not run before (config_dedup) before a random point is drawn.
DEDUP_ASKS = 20


class SmacSampler(UnitCubeSampler):
    def __init__(self, *, seed: int | None = None, config_dedup: bool = False, model_seed: int | None = None):
        super().__init__(seed=seed, cold_start=0)
        self.config_dedup = config_dedup
        # SMAC's own seed: the experiment's, so its initial design is one sequence across asks.
        self.model_seed = model_seed if model_seed is not None else int(self._rng.randint(0, 2**31 - 1))

    def propose(self, x: np.ndarray, loss: np.ndarray, dists: list[BaseDistribution]) -> np.ndarray | None:
        import joblib
        from ConfigSpace import Categorical, Configuration, ConfigurationSpace, Float
        from smac import HyperparameterOptimizationFacade, Scenario
        from smac.runhistory.dataclasses import TrialInfo, TrialValue

        logging.getLogger("smac").setLevel(logging.ERROR)
        space = ConfigurationSpace(seed=self.model_seed)
        space.add(
            [
                Categorical(f"p{i}", list(range(len(d.choices))))
                if isinstance(d, CategoricalDistribution)
                else Float(f"p{i}", (0.0, 1.0))
                for i, d in enumerate(dists)
            ]
        )
        taken = set(grid_keys(self.running, dists))
        if self.config_dedup:
            taken |= set(grid_keys(x, dists))

        def config_of(point: np.ndarray) -> Configuration:
            return Configuration(space, values=_values(point, dists))

        with tempfile.TemporaryDirectory(prefix="trialflow-smac-") as folder:
            scenario = Scenario(
                space,
                deterministic=True,
                n_trials=len(x) + DEDUP_ASKS + 1,
                seed=self.model_seed,
                output_directory=Path(folder),
            )
            initial = HyperparameterOptimizationFacade.get_initial_design(
                scenario, n_configs=INITIAL_DESIGN if len(x) < INITIAL_DESIGN else 0
            )
            smac = HyperparameterOptimizationFacade(
                scenario, _never_called, initial_design=initial, overwrite=True, logging_level=40
            )
            for point, value in zip(x, loss):
                smac.tell(TrialInfo(config_of(point), seed=0), TrialValue(cost=float(value)))
            # one thread: the forest's joblib workers spent most of an ask waiting (profiled)
            with joblib.parallel_config(backend="sequential"):
                for _ in range(DEDUP_ASKS):
                    asked = _point(dict(smac.ask().config), dists)
                    if grid_keys(asked, dists)[0] not in taken:
                        return asked
        return cast(np.ndarray, self._rng.uniform(size=len(dists)))


def _values(point: np.ndarray, dists: list[BaseDistribution]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for i, (v, d) in enumerate(zip(point, dists)):
        if isinstance(d, CategoricalDistribution):
            values[f"p{i}"] = int(round(float(v) * max(1, len(d.choices) - 1)))
        else:
            values[f"p{i}"] = float(min(max(v, 0.0), 1.0))
    return values


def _point(values: dict[str, Any], dists: list[BaseDistribution]) -> np.ndarray:
    return np.array(
        [
            int(values[f"p{i}"]) / max(1, len(d.choices) - 1)
            if isinstance(d, CategoricalDistribution)
            else float(values[f"p{i}"])
            for i, d in enumerate(dists)
        ]
    )


def _never_called(config: Any, seed: int = 0) -> float:
    """SMAC's facade wants a target function; trials run as Airflow tasks, and only ask/tell
    is used, which never calls it."""
    raise RuntimeError("SMAC's target function is not called: trialflow asks and tells")
