"""Calls to a custom tuner, assessor or advisor (trialflow.tuning.custom.host), and where its state lives.

**Where the state lives.** NNI kept the class's object in its dispatcher's memory. Here it lives
in the experiment store, as the experiment attribute ``custom_tuner`` (``custom_assessor``; an
advisor, which chooses parameters and may stop trials, is kept as ``custom_tuner``): the
object pickled after each call, and which trials it has been told of. Any worker's ask and the
triggerer's judgement restore it, so the class keeps its memory when the triggerer restarts or
the trials move between workers and machines, as if one process had run it throughout.
It reaches the store through a view of its experiment (trialflow.tuning.study_view), never the
store itself.

**A class whose object cannot be pickled** (it holds a lock, a file, a thread) or grows past
host.MAX_STATE is made anew at each call: ``__init__(**classArgs)``, ``update_search_space``, then
``import_data`` with every earlier final result, which is what NNI's resume gave it after a
restart. The experiment's history says so once.

**One call at a time.** A lease (the attribute ``custom_<role>_lease``, taken with the store's
compare-and-set) makes concurrent asks take turns, as NNI's one dispatcher thread did; a
holder that died lets go when its lease runs out.

**Errors stay the class's.** A call that raises, exits, returns parameters outside the search
space or returns something JSON cannot carry raises CustomAlgorithmError with the class's own
message; one that runs past CALL_TIMEOUT is killed with its whole process group. The ask fails
(the trial task fails, saying why), the experiment and the scheduler carry on.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import SearchSpace, point_problems
from trialflow.trial.env import inherited_env
from trialflow.trial.status import TrialStatus

if TYPE_CHECKING:
    from trialflow.store.records import TrialHistory
    from trialflow.tuning.study_view import StudyView

log = logging.getLogger(__name__)

#: Seconds one call of the class may take (its restore, what it is told, and the call).
CALL_TIMEOUT = float(os.environ.get("TRIALFLOW_CUSTOM_CALL_TIMEOUT", "60"))
#: Where trialflow's ``nni`` stand-in is (trialflow/trial/shim): the class imports nni.tuner.
SHIM = Path(__file__).resolve().parents[2] / "trial" / "shim"
#: The experiment attribute holding the class's state, and its lease, by role.
STATE_ATTR = "custom_{role}"
LEASE_ATTR = "custom_{role}_lease"
#: The longest error message kept from the class (its traceback's last line and place).
MAX_ERROR = 2000


class CustomAlgorithmError(RuntimeError):
    """The class failed the call: its own message, or that it ran out of time."""


class AdvisorWaits(Exception):
    """A custom advisor sent no parameters for the asking trial (NNI's NoMoreTrialJobs, or
    nothing): the trial waits and asks again while other trials run, as NNI's free slot did.
    ``final``: no other trial was unfinished when it was told every end, so nothing will
    change its mind."""

    def __init__(self, label: str, final: bool):
        self.final = final
        super().__init__(
            f"{label} sent no parameters"
            + (" and no trial is running: it has no more trials" if final else " yet (it waits for running trials)")
        )


@dataclass(frozen=True)
class CustomClass:
    """A custom tuner or assessor as the config names it."""

    role: str
    class_name: str
    code_directory: Path | None
    class_args: dict[str, Any]

    @classmethod
    def of(cls, algorithm: AlgorithmConfig, role: str) -> CustomClass:
        if algorithm.class_name is None:
            raise ValueError(f"{role} names no className")
        directory = Path(algorithm.code_directory) if algorithm.code_directory is not None else None
        return cls(role, algorithm.class_name, directory, dict(algorithm.class_args))

    @property
    def label(self) -> str:
        return self.class_name.rpartition(".")[2]


@dataclass(frozen=True)
class Answer:
    value: Any
    state: str | None
    note: str | None
    waits: bool = False  # an advisor sent no parameters
    #: Whether another trial was unfinished when the class was told what had ended (the same
    #: reading): only then can a later ask find it changed its mind.
    others_running: bool = False


def call(custom: CustomClass, request: dict[str, Any], timeout: float | None = None) -> Answer:
    """One call in a fresh host process (see host.py), bounded by ``timeout`` (CALL_TIMEOUT)."""
    timeout = CALL_TIMEOUT if timeout is None else timeout
    body = {
        "role": custom.role,
        "class_name": custom.class_name,
        "code_directory": str(custom.code_directory) if custom.code_directory else None,
        "class_args": custom.class_args,
        **request,
    }
    what = next(iter(request.get("call") or {"check": None}))
    with tempfile.TemporaryDirectory(prefix="trialflow-custom-") as folder:
        answer_path = Path(folder) / "answer.json"
        env = {
            # the trials' environment: never Airflow's settings, connections or variables
            **inherited_env(os.environ),
            "TRIALFLOW_HOST_ANSWER": str(answer_path),
            "PYTHONPATH": os.pathsep.join(
                [str(SHIM), str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH", "")]
            ),
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "trialflow.tuning.custom.host"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(custom.code_directory) if custom.code_directory else None,
            start_new_session=True,  # its own process group: a timeout kills whatever it started
        )
        try:
            output, _ = process.communicate(json.dumps(body).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise CustomAlgorithmError(
                f"{custom.label}: its {what} did not answer within {timeout:g} s and was stopped "
                "(a class that hangs is bounded by TRIALFLOW_CUSTOM_CALL_TIMEOUT)"
            ) from None
        finally:
            _kill_group(process)  # whatever it left running in its group
        printed = output.decode(errors="replace").strip()
        if printed:
            log.info("%s printed:\n%s", custom.label, printed[-MAX_ERROR:])
        if not answer_path.exists():
            raise CustomAlgorithmError(
                f"{custom.label}: its process ended (exit {process.returncode}) before answering its {what}"
                + (f": {printed[-MAX_ERROR:]}" if printed else "")
            )
        answer = json.loads(answer_path.read_text())
    if not answer.get("ok"):
        phase = str(answer.get("phase") or "import")
        # a method of the class (its __init__, generate_parameters...), or a step of trialflow's
        method = phase.isidentifier() and phase != "import"
        where = f"{custom.label}.{phase}" if method else f"{custom.label} ({phase})"
        raise CustomAlgorithmError(f"{where} failed: {str(answer.get('error'))[:MAX_ERROR]}")
    return Answer(answer.get("value"), answer.get("state"), answer.get("note"), answer.get("waits") is True)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


@contextmanager
def turn(view: StudyView, role: str, wait: float | None = None) -> Iterator[None]:
    """The class's lease for one call (see module)."""
    wait = 2 * CALL_TIMEOUT + 10 if wait is None else wait
    key, token = LEASE_ATTR.format(role=role), uuid.uuid4().hex
    deadline = time.monotonic() + wait

    def take(current: Any) -> Any:
        free = not isinstance(current, dict) or float(current.get("until", 0)) < time.time()
        return {"holder": token, "until": time.time() + CALL_TIMEOUT + 10} if free else current

    while True:
        held = view.change_attr(key, take)
        if isinstance(held, dict) and held.get("holder") == token:
            break
        if time.monotonic() > deadline:
            raise CustomAlgorithmError(f"the custom {role} stayed busy with another call for {wait:g} s")
        time.sleep(0.2)
    try:
        yield
    finally:
        view.change_attr(
            key,
            lambda current: None if isinstance(current, dict) and current.get("holder") == token else current,
        )


@dataclass(frozen=True)
class Saved:
    """The class's state as the store keeps it."""

    state: str | None
    told: frozenset[int]
    note: str | None
    #: The search space version the object was last given (trialflow.tuning.space_versions).
    space_version: int = 0

    @classmethod
    def read(cls, raw: Any) -> Saved:
        if not isinstance(raw, dict):
            return cls(None, frozenset(), None)
        told = raw.get("told")
        version = raw.get("space_version")
        return cls(
            raw.get("state") if isinstance(raw.get("state"), str) else None,
            frozenset(int(i) for i in told if isinstance(i, int)) if isinstance(told, list) else frozenset(),
            raw.get("note") if isinstance(raw.get("note"), str) else None,
            version if isinstance(version, int) and not isinstance(version, bool) else 0,
        )

    def to_attr(self) -> dict[str, Any]:
        return {"state": self.state, "told": sorted(self.told), "note": self.note, "space_version": self.space_version}


def _ended(histories: list[TrialHistory]) -> list[TrialHistory]:
    return sorted(
        (h for h in histories if h.finished and h.trial_index is not None and h.prior_of is None),
        key=lambda h: h.trial_index or 0,
    )


def _final(history: TrialHistory) -> Any:
    """What NNI handed the tuner as a trial's result: its final, or for an early-stopped trial
    its last intermediate result; None when it has neither."""
    if history.final is not None:
        return history.final
    if history.status == TrialStatus.EARLY_STOPPED.value and history.intermediate:
        return history.intermediate[max(history.intermediate)]
    return None


def _tuner_events(ended: list[TrialHistory]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for h in ended:
        value = _final(h)
        known = {"parameter_id": h.trial_index, "trial_job_id": h.trial_id, "parameters": h.parameters}
        if value is not None:
            events.append({"kind": "result", **known, "value": value})
        events.append({"kind": "end", **known, "status": h.status, "success": h.status == TrialStatus.SUCCEEDED.value})
    return events


def _exchange(
    view: StudyView,
    custom: CustomClass,
    space: SearchSpace | None,
    events_of: Any,
    request: dict[str, Any],
    space_version: int | None = None,
) -> Answer:
    """Restore the class, tell it what it has not heard, make the call, keep its state. With
    ``space_version`` (an ask), a kept object given an older space is first given the newest
    (``update_search_space``, an advisor's ``handle_update_search_space``), as NNI's
    ``nnictl update searchspace`` did."""
    key = STATE_ATTR.format(role=custom.role)
    with turn(view, custom.role):
        raw = view.attr(key)
        saved = Saved.read(raw)
        histories = view.histories()
        ended = _ended(histories)
        asking = (request.get("call") or {}).get("generate")
        others_running = any(not h.finished for h in histories if h.trial_index != asking)
        fresh = [h for h in ended if (h.trial_index or 0) not in saved.told]
        body: dict[str, Any] = {"search_space": space.raw if space is not None else {}, **request}
        version = saved.space_version if space_version is None else space_version
        if saved.state is not None:
            body.update(state=saved.state, events=events_of(fresh), space_changed=version != saved.space_version)
        elif raw is None or custom.role != "tuner":  # its first call: told what ended, as it ended
            body["events"] = events_of(ended)
        else:  # made anew (its object is not kept): the earlier results through import_data (NNI's resume)
            body["imported"] = [{"parameter": h.parameters, "value": _final(h)} for h in ended if _final(h) is not None]
        answer = call(custom, body)
        told = saved.told | {h.trial_index or 0 for h in ended}
        if answer.note and answer.note != saved.note:
            log.warning(
                "%s: %s; it is made anew at each call and given the earlier results (import_data)",
                custom.label,
                answer.note,
            )
        kept = Saved(answer.state, frozenset(told), answer.note, version).to_attr()
        # kept only over the state this call restored: a call that outlived its lease (and so
        # its turn) leaves what the next holder kept, and what it was told is told again
        stored = view.change_attr(key, lambda current: kept if current == raw else current)
        if stored != kept:
            log.warning(
                "%s: another call kept its state first (this call outlived its turn); its state stands", custom.label
            )
    return replace(answer, others_running=others_running)


def generate(
    view: StudyView,
    trial_index: int,
    custom: CustomClass,
    space: SearchSpace,
    trial_id: str | None = None,
    space_version: int = 0,
) -> dict[str, Any]:
    """Trial ``trial_index``'s parameters from the class's ``generate_parameters`` (its
    parameter id is the trial's index), or from what an advisor sent, checked to be a point of
    the search space. An advisor that sent none raises AdvisorWaits."""
    request = {"call": {"generate": trial_index, "trial_job_id": trial_id}}
    answer = _exchange(view, custom, space, _tuner_events, request, space_version)
    if answer.waits:
        # final only if nothing ran when it was told every end: a trial that ended since is told next time
        raise AdvisorWaits(custom.label, final=not answer.others_running)
    parameters = answer.value
    if not isinstance(parameters, dict):
        raise CustomAlgorithmError(
            f"{custom.label}.generate_parameters returned {type(parameters).__name__}, not a dict of parameters"
        )
    problems = point_problems(space, parameters) if space.params else []
    if problems:
        said = "; ".join(f"{'.'.join(map(str, p.path)) or 'parameters'}: {p.message}" for p in problems[:5])
        raise CustomAlgorithmError(
            f"{custom.label}.generate_parameters returned parameters outside the search space: {said}"
        )
    return parameters


def _assessor_events(ended: list[TrialHistory]) -> list[dict[str, Any]]:
    return [
        {"kind": "end", "trial_job_id": h.trial_id, "success": h.status == TrialStatus.SUCCEEDED.value} for h in ended
    ]


def assess(
    view: StudyView,
    custom: CustomClass,
    space: SearchSpace | None,
    trial_id: str,
    steps: list[tuple[int, float]],
    after: int | None = None,
) -> int | None:
    """The step after ``after`` at which the class's ``assess_trial`` first says Bad, asked once
    per step with the curve up to it (as NNI asked at each new result); None: the trial runs on."""
    if not steps:
        return None
    judged_from = steps[0][0] if after is None else after + 1
    request = {"call": {"assess": {"trial_job_id": trial_id, "steps": [[s, v] for s, v in steps], "from": judged_from}}}
    # an advisor (kept as the tuner) hears of results and ends as it does when asked for trials
    events_of = _tuner_events if custom.role == "tuner" else _assessor_events
    stop = _exchange(view, custom, space, events_of, request).value
    return int(stop) if isinstance(stop, int) else None


def check(custom: CustomClass, space: SearchSpace, timeout: float = 30.0) -> str | None:
    """What is wrong with making the class (import, ``__init__(**classArgs)``, and a tuner's
    ``update_search_space``), in its own words; None when it is made."""
    try:
        call(custom, {"search_space": space.raw, "call": {}}, timeout)
    except CustomAlgorithmError as exc:
        return str(exc)
    return None


def custom_classes(tuner: AlgorithmConfig | None, assessor: AlgorithmConfig | None) -> list[CustomClass]:
    """The experiment's own classes: its tuner or advisor (kept as the tuner) and its assessor,
    where they name a ``className``."""
    found = [CustomClass.of(tuner, "tuner")] if tuner is not None and tuner.class_name is not None else []
    if assessor is not None and assessor.class_name is not None:
        found.append(CustomClass.of(assessor, "assessor"))
    return found


def tell(view: StudyView, custom: CustomClass, space: SearchSpace | None) -> bool:
    """Tell the class what ended since its last call, and keep its state; False when there was
    nothing new to tell (no process is started).

    A class hears of results when it is next called, and after the last trial there is no next
    ask: NNI's dispatcher told it as each result arrived, so a class that records or exports
    what it learnt lost the end of every experiment. The end step calls this for every
    custom class (trialflow.runs.end), which tells whatever no ask or judgement did, the trials
    that ended after the last ask included. A class made anew at each call (its object is
    not kept) is not made for this: it keeps nothing it could be told."""
    key = STATE_ATTR.format(role=custom.role)
    raw = view.attr(key)
    saved = Saved.read(raw)
    if raw is not None and saved.state is None:
        return False
    if all((h.trial_index or 0) in saved.told for h in _ended(view.histories())):
        return False
    events_of = _tuner_events if custom.role == "tuner" else _assessor_events
    _exchange(view, custom, space, events_of, {"call": {}})
    return True
