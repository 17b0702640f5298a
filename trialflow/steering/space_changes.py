"""Change a running experiment's search space (NNI's ``nnictl update searchspace``). No Airflow.

The new space is checked with `trialflow validate`'s words (the key path and what was
expected, and whether the experiment's tuner can sample it), appended as a new version
(trialflow.tuning.space_versions says what an ask then samples and what the tuner keeps), and
said in the experiment's history, which NNI's command did not.

Refused: a tuner that runs its own points in order (GridSearch, BatchTuner: trial i is point i
of the space it was given), PBT (its generations copy and perturb their parents' parameters
within one space), and an experiment whose runs are over. A custom tuner or advisor class is
given the new space by its own ``update_search_space`` (``handle_update_search_space``) at its
next ask (trialflow.tuning.custom.runner), as NNI's command did.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import SearchSpaceError, parse_search_space
from trialflow.steering.base import BadInput, UnknownTarget, check_running, record_action
from trialflow.tuning.algorithms import check_algorithms
from trialflow.tuning.space_versions import SPACES_ATTR, SpaceVersion, versions

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

#: The most parameters (nested ones included) a changed space may hold, and its JSON's size.
MAX_PARAMETERS = 1000
MAX_SPACE_BYTES = 1_000_000
#: Tuners whose space cannot change while they run (see module).
FIXED_SPACE = ("GridSearch", "BatchTuner", "PBT")


def _algorithm(config: dict[str, Any], key: str) -> AlgorithmConfig | None:
    raw = config.get(key)
    return AlgorithmConfig.model_validate(raw) if isinstance(raw, dict) else None


def check_space(config: dict[str, Any], raw: Any) -> dict[str, Any]:
    """``raw`` as a space this experiment's tuner can sample, or BadInput naming the key."""
    if not isinstance(raw, dict) or not raw:
        shown = "an empty mapping" if isinstance(raw, dict) else type(raw).__name__
        raise BadInput(f"searchSpace: expected a mapping of parameter name -> {{_type, _value}}, got {shown}")
    try:
        space = parse_search_space(raw)
    except SearchSpaceError as exc:
        where = ".".join(map(str, exc.path))
        raise BadInput(f"searchSpace{'.' + where if where else ''}: {exc.message}") from None
    if sum(1 for _ in space.walk()) > MAX_PARAMETERS:
        raise BadInput(f"searchSpace: expected at most {MAX_PARAMETERS} parameters")
    tuner, advisor = _algorithm(config, "tuner"), _algorithm(config, "advisor")
    algorithm = tuner or advisor
    name = str(algorithm.name) if algorithm is not None and algorithm.name else ""
    if name.replace("Tuner", "") in FIXED_SPACE or name in FIXED_SPACE:
        raise BadInput(f"searchSpace: {name} runs its points in order over the space it started with; it cannot change")
    problems = check_algorithms(tuner, advisor, None, space)
    if problems:
        key, message = problems[0]
        raise BadInput(f"{key}: {message}")
    return raw


def change_search_space(store: ExperimentStore, experiment_id: str, by: str, raw: Any) -> SpaceVersion:
    """Append a new version of the space; trials asked from now on sample from it. Returns it."""
    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"there is no experiment {experiment_id!r}")
    config = store.experiment_attr(experiment_id, "config")
    checked = check_space(config if isinstance(config, dict) else {}, raw)
    check_running(store, experiment_id)
    added: list[SpaceVersion] = []

    def append(old: Any) -> list[Any]:
        entries = [e for e in old if isinstance(e, dict)] if isinstance(old, list) else []
        number = max((int(e.get("version", 0)) for e in entries), default=0) + 1
        added[:] = [SpaceVersion(number, checked, time.time(), by)]
        return [*entries, added[0].to_attr()]

    store.update_experiment_attr(experiment_id, SPACES_ATTR, append)  # atomic: two changes, two versions
    version = added[0]
    names = ", ".join(list(checked)[:10]) + (", ..." if len(checked) > 10 else "")
    record_action(store, experiment_id, by, "change search space", f"version {version.version}: {names}")
    return version


def space_versions(store: ExperimentStore, experiment_id: str) -> list[SpaceVersion]:
    """Every version of the experiment's space, the config's first (version 0)."""
    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"there is no experiment {experiment_id!r}")
    config = store.experiment_attr(experiment_id, "config")
    space = config.get("searchSpace") if isinstance(config, dict) else None
    return versions(store, experiment_id, space if isinstance(space, dict) else {})
