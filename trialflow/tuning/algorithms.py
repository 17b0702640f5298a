"""NNI algorithm names: which trialflow runs, and what to say about the others.

Kept free of Optuna so validating a config (and parsing an experiment DAG) stays
cheap; tuning/tuners.py builds the samplers. Names with no faithful, well-kept
implementation are refused with the closest supported choice rather than
silently replaced.
"""

from __future__ import annotations

import difflib

from trialflow.config.model import AlgorithmConfig
from trialflow.tuning.search_space import SearchSpace, SearchSpaceError

#: The tuners trialflow runs (tuning/tuners.py has the sampler for each).
SUPPORTED_TUNERS = ("TPE", "Random", "GridSearch")


class UnsupportedAlgorithm(ValueError):
    """An algorithm trialflow will not run, with what to use instead."""


#: NNI's spellings that mean the same tuner.
ALIASES = {"tpe": "TPE", "random": "Random", "randomsearch": "Random", "gridsearch": "GridSearch",
           "grid": "GridSearch"}
#: NNI algorithms trialflow does not run, and what to use instead.
CLOSEST = {
    "anneal": "TPE", "evolution": "TPE", "regularizedevolution": "TPE", "smac": "TPE", "metis": "TPE",
    "metistuner": "TPE", "gp": "TPE", "gptuner": "TPE", "pbt": "TPE", "pbttuner": "TPE",
    "dngo": "TPE", "dngotuner": "TPE", "ppo": "TPE", "ppotuner": "TPE", "networkmorphism": "TPE",
    "batchtuner": "GridSearch", "hyperband": "TPE", "bohb": "TPE",
}


def canonical_tuner_name(algorithm: AlgorithmConfig) -> str:
    """The supported tuner this config names, or UnsupportedAlgorithm saying what to use."""
    if algorithm.class_name is not None:
        raise UnsupportedAlgorithm(
            f"custom tuner className {algorithm.class_name!r} is not supported; "
            f"use one of {', '.join(SUPPORTED_TUNERS)}")
    name = str(algorithm.name)
    key = name.replace("_", "").replace(" ", "").lower()
    if key in ALIASES:
        return ALIASES[key]
    closest = CLOSEST.get(key) or next(
        iter(difflib.get_close_matches(name, list(SUPPORTED_TUNERS), n=1, cutoff=0.5)), "TPE")
    raise UnsupportedAlgorithm(
        f"tuner {name!r} is not supported yet; the closest supported choice is {closest!r} "
        f"(supported: {', '.join(SUPPORTED_TUNERS)})")


def check_algorithms(tuner: AlgorithmConfig | None, advisor: AlgorithmConfig | None,
                     assessor: AlgorithmConfig | None, space: SearchSpace) -> list[tuple[str, str]]:
    """Problems as (config key, message), for `trialflow validate` and DAG building."""
    problems: list[tuple[str, str]] = []
    if advisor is not None:
        problems.append(("advisor", f"advisor {advisor.name or advisor.class_name!r} is not supported yet; "
                         "use tuner: {name: TPE}"))
    if assessor is not None:
        problems.append(("assessor", f"assessor {assessor.name or assessor.class_name!r} is not supported yet; "
                         "remove it (trials then run to the end)"))
    if tuner is not None:
        try:
            name = canonical_tuner_name(tuner)
            mode = str(tuner.class_args.get("optimize_mode", "maximize")).lower()
            if mode not in ("maximize", "minimize"):
                problems.append(("tuner.classArgs.optimize_mode", f"expected maximize or minimize, got {mode!r}"))
            if name == "GridSearch":
                space.grid()
        except UnsupportedAlgorithm as exc:
            problems.append(("tuner", str(exc)))
        except SearchSpaceError as exc:
            problems.append(("searchSpace." + ".".join(map(str, exc.path)), exc.message))
    return problems


