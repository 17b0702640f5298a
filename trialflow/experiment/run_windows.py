"""What each DAG run owns in its experiment (its run window), and the one place that knows how
windows are kept in the store. No Airflow.

A window is one study user attribute per run, ``run:<run_id>`` -> its first trial index, how
many it holds, its deadline, when its duration counts from, whether a person stopped it and
when its end step ran. Experiments, steering, the pages' queries and the command line read and
change windows through this module only: the key's encoding, the mapping of a run's map index
to a trial index, and the atomic updates live here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trialflow.trial import sealing

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

#: Study user attribute prefix holding one DAG run's window (``run:<run_id>``).
PREFIX = "run:"
#: The same, as a SQL LIKE pattern (the pages read every experiment's windows in one query).
LIKE_PATTERN = PREFIX + "%"


#: Why a trial of a run past its maxExperimentDuration deadline does not start, or is stopped.
EXPERIMENT_DEADLINE_REASON = "maxExperimentDuration reached"


@dataclass(frozen=True)
class Refusal:
    """Why trial ``map_index`` of a run does not start (RunWindow.admission). ``owned``: the
    run owns that trial and may not start it now (stopped, past its deadline or a changed
    maxTrialNumber, beyond what the run holds): the task skips. Not owned: the run has no
    window at all (no start step of a run that may drive the experiment gave it one), and
    starting it would land in a trial index another run owns: the task fails."""

    reason: str
    owned: bool = True


def key_of(run_id: str) -> str:
    return PREFIX + run_id


def run_id_of(key: str) -> str | None:
    """The run a study attribute is the window of, or None when it is not a window."""
    return key[len(PREFIX) :] if key.startswith(PREFIX) else None


@dataclass(frozen=True)
class RunWindow:
    """What one DAG run owns in its experiment: trial indexes first_index .. first_index+count-1
    (runs that continue one study get consecutive ranges) and its maxExperimentDuration deadline."""

    first_index: int = 0
    count: int = 0
    deadline: float | None = None
    #: Who stopped the run and why (trialflow.steering): no trial of it starts any more.
    stopped: dict[str, Any] | None = None
    #: When its end step ran (epoch seconds): the run is over.
    ended: float | None = None
    #: Its start step gave it this window (a run it did not give one has none: count 0).
    exists: bool = False
    #: When its maxExperimentDuration counts from (its start, or the start of the run it continues).
    counted_from: float | None = None
    #: The run's inputs as its start step rendered them (trialflow.trial.inputs): every trial
    #: of the run gets them.
    inputs: dict[str, Any] | None = None
    #: The names of those inputs Airflow's secrets masker knew as secrets when the start step
    #: rendered them (a connection's password, a sensitive Variable, a value given to
    #: ``mask_secret``): the trials get them as they are, a reader of the store sees ``***``.
    secret_inputs: tuple[str, ...] = ()

    @property
    def over(self) -> bool:
        """The run ended (its end step ran) or was stopped: steering no longer acts on it."""
        return self.ended is not None or bool(self.stopped)

    @property
    def end_index(self) -> int:
        return self.first_index + self.count

    def holds(self, trial_index: int) -> bool:
        return self.first_index <= trial_index < self.end_index

    def trial_index(self, map_index: int) -> int | None:
        """The trial index the run's mapped task ``map_index`` runs, or None outside the window."""
        return self.first_index + map_index if 0 <= map_index < self.count else None

    @classmethod
    def of(cls, attrs: Mapping[str, Any], run_id: str) -> RunWindow:
        """Run ``run_id``'s window among an experiment's attributes (an empty one if none)."""
        return cls.parse(attrs.get(key_of(run_id)))

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> RunWindow:
        raw = raw or {}
        counted_from = raw.get("counted_from") or raw.get("started_at")
        return cls(
            int(raw.get("first_index", 0)),
            int(raw.get("count", 0)),
            raw.get("deadline"),
            raw.get("stopped"),
            raw.get("ended_at"),
            "first_index" in raw,
            None if counted_from is None else float(counted_from),
            _opened_inputs(raw.get("inputs")),
            tuple(str(n) for n in raw.get("secret_inputs") or () if isinstance(n, str)),
        )

    @property
    def stop_reason(self) -> str | None:
        """Why a person stopped the run, when one did."""
        return str(self.stopped.get("reason") or "the run was stopped") if self.stopped else None

    def admission(
        self,
        map_index: int,
        max_trial_number: int | None,
        asked_before: Callable[[int], bool],
        now: float | None = None,
    ) -> Refusal | None:
        """None when the run's trial ``map_index`` may start (or re-attach), else why not.

        A trial the tuner already asked for (``asked_before(trial_index)``: a retry, a resumed
        run) re-attaches even after a stop, the deadline or a lowered maxTrialNumber: it is a
        trial of the experiment already, and its follower then ends it as those say."""
        if not self.exists:
            return Refusal("its start step did not give it that trial", owned=False)
        if map_index >= self.count:
            # The DAG's fan-out is fixed when it is parsed; a run holds only the indexes
            # maxTrialNumber leaves it (a follow-on run after a trial was added holds one).
            return Refusal(f"this run holds {self.count} trial(s) of the experiment (maxTrialNumber leaves no more)")
        index = self.first_index + map_index
        past_limit = max_trial_number is not None and index >= max_trial_number
        if not (self.expired(now) or self.stopped or past_limit) or asked_before(index):
            return None
        if self.stopped:
            return Refusal(str(self.stop_reason))
        if past_limit:
            return Refusal(f"maxTrialNumber is {max_trial_number} (changed while the experiment ran)")
        return Refusal(EXPERIMENT_DEADLINE_REASON)

    def stored(self, started_at: float) -> dict[str, Any]:
        """The window as the store keeps it (what :meth:`parse` reads back), given when its run
        started. Only a start step writes a window whole; every later change is one of
        RunWindows' mutators, each one field."""
        fields: dict[str, Any] = {
            "first_index": self.first_index,
            "count": self.count,
            "deadline": self.deadline,
            "started_at": started_at,
            "counted_from": self.counted_from if self.counted_from is not None else started_at,
        }
        if self.inputs:
            secret = set(self.secret_inputs)  # kept only sealed (trialflow.trial.sealing)
            fields["inputs"] = {n: sealing.seal(v) if n in secret else v for n, v in self.inputs.items()}
        if self.secret_inputs:
            fields["secret_inputs"] = list(self.secret_inputs)
        return fields

    def secret_values(self) -> list[str]:
        """The secret inputs' values as text (to mask them wherever a trial may have echoed
        them); one this process cannot open is not known here, and not listed."""
        inputs = self.inputs or {}
        return [
            str(inputs[n])
            for n in self.secret_inputs
            if n in inputs and str(inputs[n]) and not isinstance(inputs[n], sealing.SealedValue)
        ]

    def expired(self, now: float | None = None) -> bool:
        return self.deadline is not None and (now if now is not None else time.time()) >= self.deadline


def _opened_inputs(raw: Any) -> dict[str, Any] | None:
    """The stored inputs with each sealed one opened (or a SealedValue where it cannot be)."""
    if not isinstance(raw, dict):
        return None
    return {name: sealing.opened(value) for name, value in raw.items()}


def shown_window(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A stored window as it may be shown to a reader (pages, REST, CLI, exports): its secret
    inputs as ``***``, the secrets inside every other input's text masked (``TOKEN=...``,
    ``user:pass@``). The store keeps the values as the trials must get them."""
    from trialflow.config.redaction import REDACTED, mask_text

    shown = dict(raw)
    inputs = raw.get("inputs")
    if isinstance(inputs, dict):
        secret = set(RunWindow.parse(raw).secret_inputs)
        shown["inputs"] = {
            name: REDACTED if name in secret else mask_text(value) if isinstance(value, str) else value
            for name, value in inputs.items()
        }
    return shown


def windows_in(attrs: Mapping[str, Any]) -> dict[str, RunWindow]:
    """Every run's window among an experiment's attributes, by run id."""
    found = {}
    for key, value in attrs.items():
        run_id = run_id_of(key)
        if run_id is not None and isinstance(value, dict):
            found[run_id] = RunWindow.parse(value)
    return found


class RunWindows:
    """One experiment's run windows in the store: read, allocate, change."""

    def __init__(self, store: ExperimentStore, experiment_id: str):
        self.store, self.experiment_id = store, experiment_id

    def all(self) -> dict[str, RunWindow]:
        return windows_in(self.store.experiment_attrs(self.experiment_id))

    def get(self, run_id: str) -> RunWindow:
        return RunWindow.parse(self.store.experiment_attr(self.experiment_id, key_of(run_id)))

    def has(self, run_id: str) -> bool:
        return isinstance(self.store.experiment_attr(self.experiment_id, key_of(run_id)), dict)

    def put(self, run_id: str, window: RunWindow, started_at: float) -> None:
        """Write run ``run_id``'s window whole (its start step)."""
        self.store.set_experiment_attrs(self.experiment_id, {key_of(run_id): window.stored(started_at)})

    def mark_ended(self, run_id: str, at: float) -> None:
        """Run ``run_id``'s end step ran at ``at``: the run is over."""
        self.merge({run_id: {"ended_at": at}})

    def mark_stopped(self, run_ids: Iterable[str], request: Mapping[str, Any]) -> None:
        """A person (or trialflow for them) stopped these runs: ``request`` says who, when and
        why (trialflow.steering.stops); no trial of them starts any more."""
        self.merge({run_id: {"stopped": dict(request)} for run_id in run_ids})

    def move_deadlines(self, seconds: float, now: float) -> dict[str, RunWindow]:
        """Every run's deadline becomes the time its duration counts from (``now`` where that is
        not known) + ``seconds``; returns the windows as they are then."""
        self.merge({run_id: {"deadline": (w.counted_from or now) + seconds} for run_id, w in self.all().items()})
        return self.all()

    def merge(self, changes: Mapping[str, Mapping[str, Any]]) -> None:
        """Add ``changes[run_id]``'s fields to each run's stored window, each atomically: a stop
        and a duration change at the same instant both keep their field (a read of every
        window and one write of all of them let the later writer put back what the other
        had just changed: a stop mark could be undone by a deadline move)."""
        for run_id, fields in changes.items():

            def merged(old: dict[str, Any], fields: Mapping[str, Any] = fields) -> dict[str, Any]:
                return {**old, **fields}

            self.update(run_id, merged)

    def update(self, run_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Change run ``run_id``'s stored window atomically (a window that does not exist stays so)."""
        self.store.update_experiment_attr(
            self.experiment_id, key_of(run_id), lambda old: change(dict(old)) if isinstance(old, dict) else old
        )
