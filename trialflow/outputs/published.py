"""What an experiment tells the DAGs downstream: its best parameters, as an Asset event's extra.

No Airflow here. The publishing step and the downstream helper (trialflow.assets) only move
these dicts in and out of Airflow's asset events, so what is published, when nothing is, and
how a downstream DAG reads it back (checked, typed) are decided and tested without a scheduler.
The extra is plain JSON: a downstream DAG without trialflow installed can still read it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from trialflow.trial.folder import stays_below
from trialflow.trial.wire import ARTIFACTS_DIR

if TYPE_CHECKING:
    from trialflow.runs.summary import ExperimentSummary

#: Marks an asset event's extra as trialflow's, and the shape it has (bumped on a breaking change).
FORMAT_KEY = "trialflow"
FORMAT = 1


#: Asset names under this prefix are trialflow's, each its DAG's alone: trialflow/<dag_id>/...
NAMESPACE = "trialflow/"
#: The key of a custom-named asset's ``extra`` saying which experiment DAG it is for.
OWNER_KEY = "trialflow_dag_id"


def asset_name(dag_id: str) -> str:
    """The asset an experiment DAG publishes to unless ``experiment_dag(asset_name=...)`` says
    otherwise: named after the DAG, which is named after the experiment."""
    return f"{NAMESPACE}{dag_id}/best"


def named_owner(name: str) -> str | None:
    """The experiment DAG an asset name in trialflow's namespace belongs to (None outside it)."""
    if not name.startswith(NAMESPACE):
        return None
    owner, slash, _ = name[len(NAMESPACE) :].partition("/")
    return owner if slash and owner else None


def publishing_name(dag_id: str, name: str | None) -> str:
    """The asset name experiment DAG ``dag_id`` may publish on: its own (``trialflow/<dag_id>/best``
    by default) or a name outside trialflow's namespace. Another experiment DAG's name is refused
    at parse time: a DAG publishing ``trialflow/exp_a/best`` made exp_a's downstream train on
    its parameters."""
    if name is None:
        return asset_name(dag_id)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"asset_name: expected a non-empty asset name, got {name!r}")
    if name.startswith(NAMESPACE) and named_owner(name) != dag_id:
        raise ValueError(
            f"asset_name: {name!r} is in trialflow's namespace but not DAG {dag_id!r}'s; an experiment DAG "
            f"publishes on its own ({asset_name(dag_id)!r}) or on a name outside {NAMESPACE!r}"
        )
    return name


@dataclass(frozen=True)
class Objective:
    """One objective of the published result: the metric's name and its direction."""

    metric: str
    mode: str


@dataclass(frozen=True)
class ParetoTrial:
    """One trial of the Pareto set (several objectives): no other trial is as good on every
    objective and better on one."""

    trial_id: str
    trial_index: int
    parameters: dict[str, Any]
    values: dict[str, float]


@dataclass(frozen=True)
class PublishedArtifact:
    """One of the best trial's artifacts (trialflow.checkpoints.artifacts), as published: its
    name in the trial's artifacts folder and its size."""

    name: str
    size: int


class SeveralObjectives(ValueError):
    """The single-best shortcut of an experiment with several objectives: it has no one best
    trial, only a Pareto set, and a downstream step must choose a member."""


@dataclass(frozen=True)
class PublishedBest:
    """An experiment's outcome as a downstream DAG reads it.

    With one objective, ``trial_id``, ``trial_index``, ``parameters`` and ``metric`` are the best
    trial's. With several there is no single best: ``pareto`` holds the whole set, and those four
    refuse (SeveralObjectives, naming the choices) rather than hand over one member silently (a
    downstream DAG reading ``best.parameters`` took the first objective's best and ignored the
    trade-off); ``best_for(metric)`` and ``member(trial_id)`` choose one explicitly."""

    experiment_id: str
    experiment_name: str | None
    dag_id: str
    run_id: str
    best: ParetoTrial | None
    best_metric: float | dict[str, float] | None
    optimize_mode: str
    url: str | None = None
    directory: str | None = None
    objectives: tuple[Objective, ...] = ()
    pareto: tuple[ParetoTrial, ...] = field(default_factory=tuple)
    #: The best trial's artifacts, and the artifact store (its URL and Airflow connection) they
    #: are in: ``artifact_url`` names one (trialflow.assets.best_artifact opens it).
    artifacts: tuple[PublishedArtifact, ...] = ()
    artifact_store: str | None = None
    artifact_conn_id: str | None = None

    def artifact_url(self, name: str) -> str:
        """The store URL of the best trial's artifact ``name`` (a name it published only: no
        path leaves the trial's artifacts folder)."""
        if not any(a.name == name for a in self.artifacts):
            kept = ", ".join(a.name for a in self.artifacts) or "none"
            raise KeyError(f"the best trial of experiment {self.experiment_id} kept no artifact {name!r} ({kept})")
        assert self.artifact_store is not None  # read_published pairs them
        return f"{self.artifact_store.rstrip('/')}/{self.experiment_id}/{self.trial_id}/{ARTIFACTS_DIR}/{name}"

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    def _single(self) -> ParetoTrial:
        if self.multi_objective or self.best is None:
            names = ", ".join(o.metric for o in self.objectives)
            raise SeveralObjectives(
                f"experiment {self.experiment_id} has {len(self.objectives)} objectives ({names}): no single "
                f"best trial, a Pareto set of {len(self.pareto)}; choose one: best.pareto (all of them), "
                f"best.best_for({self.objectives[0].metric if self.objectives else 'metric'!r}) or "
                "best.member(trial_id)"
            )
        return self.best

    @property
    def trial_id(self) -> str:
        return self._single().trial_id

    @property
    def trial_index(self) -> int:
        return self._single().trial_index

    @property
    def parameters(self) -> dict[str, Any]:
        return self._single().parameters

    @property
    def metric(self) -> float | dict[str, float]:
        self._single()
        assert self.best_metric is not None
        return self.best_metric

    def best_for(self, metric: str) -> ParetoTrial:
        """The Pareto set's member best on objective ``metric`` (its mode decides which end)."""
        modes = {o.metric: o.mode for o in self.objectives}
        if metric not in modes:
            raise KeyError(f"{metric!r} is not an objective of experiment {self.experiment_id} ({', '.join(modes)})")
        if not self.pareto:
            raise LookupError(f"experiment {self.experiment_id} published no Pareto set")
        pick = max if modes[metric] == "maximize" else min
        return pick(self.pareto, key=lambda p: p.values[metric])

    def member(self, trial_id: str) -> ParetoTrial:
        """The Pareto set's member ``trial_id`` (a person chose it, say in an approval)."""
        for trial in self.pareto:
            if trial.trial_id == trial_id:
                return trial
        raise KeyError(f"trial {trial_id!r} is not in experiment {self.experiment_id}'s Pareto set")


def publication(
    summary: ExperimentSummary | None,
    dag_id: str,
    run_id: str,
    url: str | None,
    directory: str | None = None,
    artifacts: ArtifactsOfBest | None = None,
) -> tuple[dict[str, Any] | None, str]:
    """The extra to publish for an end step's summary, or None and why nothing is published.

    Published: the experiment's best (across its runs), once the experiment is over. Not: when
    the end step gave no summary (it failed: no trial succeeded), when the experiment goes on in
    a follow-on run (its last run publishes), or when no trial has a final result. ``directory``:
    the experiment's folder on the Airflow hosts (where a downstream step may put what it makes).
    ``artifacts``: the best trial's, where the experiment keeps them (with one objective)."""
    if not summary:
        return None, "the end step has no summary (no trial of this run succeeded, or it did not run)"
    following = summary["continuation"]["run_id"]
    if following:
        return None, f"the experiment goes on in run {following}; its last run publishes"
    best = summary["study_best"] or summary["best"]
    if not best:
        return None, f"no trial of experiment {summary['experiment_id']} succeeded with a final result"
    extra: dict[str, Any] = {
        FORMAT_KEY: FORMAT,
        "experiment_id": summary["experiment_id"],
        "experiment_name": summary["experiment_name"],
        "dag_id": dag_id,
        "run_id": run_id,
        "optimize_mode": summary["optimize_mode"],
        "url": url,
        "directory": directory,
    }
    objectives = summary.get("objectives") or []
    if len(objectives) > 1:
        # No single best to publish: the whole Pareto set, and a reader must choose a member.
        extra["objectives"] = objectives
        extra["pareto"] = [
            {
                "trial_id": p["trial_id"],
                "trial_index": p["trial_index"],
                "parameters": p["parameters"],
                "values": p["values"],
            }
            for p in summary.get("pareto") or []
        ]
        return extra, f"the Pareto set of {len(extra['pareto'])} trial(s) on {len(extra['objectives'])} objectives"
    extra.update(
        trial_id=best["trial_id"],
        trial_index=best["trial_index"],
        parameters=best["parameters"],
        metric=best["final_metric"],
    )
    said = f"best trial {best['trial_id']}: {best['parameters']} = {best['final_metric']}"
    if artifacts is not None and artifacts.trial_id == best["trial_id"]:
        extra["artifacts"] = {
            "store": artifacts.store_url,
            "conn_id": artifacts.conn_id,
            "files": [{"name": f.name, "size": f.size} for f in artifacts.files],
        }
        said += f", its artifacts {', '.join(f.name for f in artifacts.files) or '(none)'}"
    return extra, said


@dataclass(frozen=True)
class ArtifactsOfBest:
    """The best trial's artifacts as the publish step found them in the store."""

    trial_id: str
    store_url: str
    conn_id: str | None
    files: tuple[PublishedArtifact, ...]


class NotPublished(LookupError):
    """An asset event that is not an experiment's published outcome (or no event at all)."""


def read_published(extra: Any, where: str = "asset event") -> PublishedBest:
    """A published extra back as a PublishedBest; NotPublished names what is missing or wrong."""
    if not isinstance(extra, dict) or extra.get(FORMAT_KEY) is None:
        raise NotPublished(f"{where}: not a trialflow experiment's result (its extra has no {FORMAT_KEY!r} key)")
    if extra[FORMAT_KEY] != FORMAT:
        raise NotPublished(
            f"{where}: result format {extra[FORMAT_KEY]!r}, this trialflow reads {FORMAT}; upgrade trialflow"
        )
    expected: dict[str, type | tuple[type, ...]] = {
        "experiment_id": str,
        "dag_id": str,
        "run_id": str,
        "optimize_mode": str,
    }
    several = len(extra.get("objectives") or ()) > 1 if isinstance(extra.get("objectives"), list) else False
    if not several:  # one objective: its best trial
        expected.update(trial_id=str, trial_index=int, parameters=dict, metric=(int, float, dict))
    for key, kind in expected.items():
        if not isinstance(extra.get(key), kind) or isinstance(extra.get(key), bool):
            raise NotPublished(f"{where}: extra key {key!r}: expected {_kind_name(kind)}, got {extra.get(key)!r}")
    try:
        objectives = tuple(Objective(str(o["metric"]), str(o["mode"])) for o in extra.get("objectives") or ())
        pareto = tuple(
            ParetoTrial(str(p["trial_id"]), int(p["trial_index"]), dict(p["parameters"]), dict(p["values"]))
            for p in extra.get("pareto") or ()
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise NotPublished(
            f"{where}: extra keys 'objectives'/'pareto': expected lists of mappings with "
            f"metric/mode and trial_id/trial_index/parameters/values ({type(exc).__name__}: {exc})"
        ) from None
    artifacts, store, conn_id = _published_artifacts(extra.get("artifacts"), where)
    return PublishedBest(
        artifacts=artifacts,
        artifact_store=store,
        artifact_conn_id=conn_id,
        experiment_id=extra["experiment_id"],
        experiment_name=extra.get("experiment_name"),
        dag_id=extra["dag_id"],
        run_id=extra["run_id"],
        best=None if several else ParetoTrial(extra["trial_id"], extra["trial_index"], extra["parameters"], {}),
        best_metric=None if several else extra["metric"],
        optimize_mode=extra["optimize_mode"],
        url=extra.get("url"),
        directory=extra.get("directory"),
        objectives=objectives,
        pareto=pareto,
    )


def _published_artifacts(raw: Any, where: str) -> tuple[tuple[PublishedArtifact, ...], str | None, str | None]:
    """The artifacts part of an extra: (files, store URL, connection id); absent is none. A
    name that leads out of the trial's artifacts folder refuses the whole event."""
    if raw is None:
        return (), None, None
    try:
        store, conn_id = raw["store"], raw.get("conn_id")
        files = tuple(PublishedArtifact(str(f["name"]), int(f["size"])) for f in raw["files"])
        if not isinstance(store, str) or not (conn_id is None or isinstance(conn_id, str)):
            raise TypeError("store and conn_id are text")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise NotPublished(
            f"{where}: extra key 'artifacts': expected store, conn_id and files of name/size ({exc})"
        ) from None
    for file in files:
        if not stays_below(file.name) or len(file.name) > 1024:
            raise NotPublished(f"{where}: artifact name {file.name[:200]!r} leads outside the trial's artifacts")
    return files, store, conn_id


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "text", int: "a whole number", float: "a number", dict: "a mapping"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(dict.fromkeys(names[k] for k in kinds))


# Mid-line (every line starts with trialflow's own words), these are what Markdown or HTML
# act on: emphasis, code, links and images, raw HTML and entities, tables, strikethrough.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]()#!|<>~&])")
#: Characters of one value an approval shows at most (a parameter set is a few hundred).
APPROVAL_VALUE_LIMIT = 500


def _md(value: Any) -> str:
    """Plain text in Markdown: every character Markdown or HTML would act on is escaped, line
    breaks become spaces, and the length is bounded (CommonMark lets any ASCII punctuation be
    backslash-escaped)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    text = " ".join(text.split())
    if len(text) > APPROVAL_VALUE_LIMIT:
        text = text[:APPROVAL_VALUE_LIMIT] + "…"
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def safe_link(url: str | None, own_origin: str | None) -> str | None:
    """``url`` when it leads to this Airflow over http(s) (a path from its root, or an absolute
    address of ``own_origin``), else None: a link a person follows from an approval is never
    ``javascript:``, ``data:`` or another host's."""
    if not url or any(c in url for c in "\n\r\t <>\"'`()[]\\"):
        return None
    parts = urlsplit(url)
    if not parts.scheme and not parts.netloc:
        return url if url.startswith("/") and not url.startswith("//") else None
    if parts.scheme not in ("http", "https") or not own_origin:
        return None
    return url if f"{parts.scheme}://{parts.netloc}".lower() == own_origin.rstrip("/").lower() else None


def approval_markdown(best: PublishedBest, own_origin: str | None = None) -> str:
    """What a person is asked to approve, built from a result the reader accepted (its DAG
    emitted it), never from an event's raw extra: every value escaped, the one link checked by
    ``safe_link``."""
    link = safe_link(best.url, own_origin)
    experiment = f"[{_md(best.experiment_id)}]({link})" if link else _md(best.experiment_id)
    if best.multi_objective:
        lines = [f"Experiment {experiment} found a Pareto set of {len(best.pareto)} trial(s):"]
        lines += [f"- trial {_md(p.trial_id)}: {_md(p.values)} with {_md(p.parameters)}" for p in best.pareto[:20]]
        return "\n".join(lines)
    return (
        f"Experiment {experiment}: trial {_md(best.trial_id)} scored {_md(best.metric)} "
        f"({_md(best.optimize_mode)}) with {_md(best.parameters)}."
    )
