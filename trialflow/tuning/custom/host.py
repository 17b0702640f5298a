"""The process a custom tuner, assessor or advisor runs in, one call at a time (trialflow.tuning.custom.runner).

NNI kept the class in its dispatcher, one process for the whole experiment. trialflow's asks
come from trial tasks on any worker and its judgements from the triggerer, so each call starts
this process: it restores the class from the state the store keeps (a pickle of the object) or
makes it anew (``__init__(**classArgs)``, ``update_search_space``, then ``import_data`` with the
earlier results, as NNI's resume did), tells it what happened since its last call
(``receive_trial_result`` and ``trial_end`` in trial order, as NNI's dispatcher did), makes the
one call asked for, and answers with the result and the object pickled again.

An advisor (a subclass of NNI's MsgDispatcherBase: it has ``handle_request_trial_jobs``) is
spoken to as NNI's dispatcher spoke to it: ``handle_initialize`` with the search space when made,
``handle_import_data`` on a resume, ``handle_report_metric_data`` (FINAL, and PERIODICAL when the
triggerer judges a running trial) and ``handle_trial_end``, and ``handle_request_trial_jobs(1)``
when a trial needs parameters and none it sent are waiting. What it sends (``send``) is collected
and kept in its object: NewTrialJob's parameters wait for the next trial that asks, KillTrialJob
stops that trial at the step it was sent, and no parameters at all makes the asking trial wait
(NNI's NoMoreTrialJobs: a slot with nothing to run yet). Its own parameter ids are kept, by
trial, to hand back with the trial's results.

A separate process because the class is someone's code: one that raises, exits, hangs or
prints never takes a worker or the triggerer with it (the caller bounds it with a timeout and
kills its process group). Its prints go to stderr, which the caller logs; the answer goes out
to a file of its own.

Reads one JSON request on stdin; writes one JSON answer to the file named by
TRIALFLOW_HOST_ANSWER. Run as ``python -m trialflow.tuning.custom.host``.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import pickle
import sys
import traceback
from typing import Any

#: A state over this many bytes is not kept (the class is made anew each call).
MAX_STATE = 8 * 1024 * 1024


def _load_class(class_name: str, code_directory: str | None) -> Any:
    if code_directory:
        sys.path.insert(0, code_directory)
    module_name, _, attr = class_name.rpartition(".")
    module = importlib.import_module(module_name)
    cls = getattr(module, attr, None)
    if cls is None:
        raise AttributeError(f"module {module_name!r} has no class {attr!r}")
    return cls


#: What the host is doing now, named as the class's method (said when it fails).
_phase = ["import"]


#: What an advisor's generate answers when it sent no parameters (the trial waits).
NO_JOB = object()


def _is_advisor(instance: Any) -> bool:
    return callable(getattr(instance, "handle_request_trial_jobs", None))


def _kept(instance: Any, name: str, empty: Any) -> Any:
    """A list or dict trialflow keeps in an advisor's object (pickled with it)."""
    return instance.__dict__.setdefault(f"_trialflow_{name}", empty)


def _sent(data: Any) -> Any:
    """What an advisor sent: NNI's manager read JSON (``nni.dump``); a plain string is kept as it is."""
    if not isinstance(data, (str, bytes)):
        return data
    try:
        return json.loads(data)
    except ValueError:
        return data.decode(errors="replace") if isinstance(data, bytes) else data


def _collect(instance: Any) -> None:
    """What the advisor sent during its last handler, into its object's queues."""
    module = sys.modules.get("nni.runtime.msg_dispatcher_base")
    outbox = getattr(module, "OUTBOX", None)
    if not outbox:
        return
    sent, outbox[:] = list(outbox), []
    for command, data in sent:
        name = getattr(command, "name", str(command))
        if name == "NewTrialJob":
            job = _sent(data)
            if not isinstance(job, dict) or not isinstance(job.get("parameters"), dict):
                raise ValueError(f"it sent NewTrialJob with {str(data)[:200]!r}: expected {{parameter_id, parameters}}")
            _kept(instance, "pending", []).append(job)
        elif name == "KillTrialJob":
            _kept(instance, "kills", []).append(str(_sent(data)))
        elif name == "Error":
            raise RuntimeError(f"it reported an error: {str(data)[:500]}")


def _handle(instance: Any, handler: str, data: Any) -> None:
    """One method of the class, named in the error if it fails; what it sent (an advisor) collected."""
    _phase[0] = handler
    getattr(instance, handler)(data)
    _collect(instance)


def _restore(request: dict[str, Any]) -> tuple[Any, bool]:
    """The class's object, and whether it was made anew (not restored)."""
    cls = _load_class(request["class_name"], request.get("code_directory"))
    state = request.get("state")
    if state:
        _phase[0] = "unpickling its kept object"
        instance = pickle.loads(base64.b64decode(state))
        if request.get("space_changed"):  # a person changed the space since its last call
            if _is_advisor(instance):
                # parameters it sent for the old space and no trial took are dropped: it is asked anew
                _kept(instance, "pending", []).clear()
                _kept(instance, "waiting", []).clear()
                _handle(instance, "handle_update_search_space", request.get("search_space", {}))
            elif request["role"] == "tuner":
                _handle(instance, "update_search_space", request.get("search_space", {}))
        return instance, False
    _phase[0] = "__init__"
    instance = cls(**request.get("class_args", {}))
    if _is_advisor(instance):
        _handle(instance, "handle_initialize", request.get("search_space", {}))
        if request.get("imported"):
            _handle(instance, "handle_import_data", request["imported"])
    elif request["role"] == "tuner":
        _handle(instance, "update_search_space", request.get("search_space", {}))
        if request.get("imported"):
            _handle(instance, "import_data", request["imported"])
    return instance, True


def _tell(instance: Any, role: str, events: list[dict[str, Any]]) -> None:
    if _is_advisor(instance):
        _tell_advisor(instance, events)
        return
    for event in events:
        if event["kind"] == "result":
            _phase[0] = "receive_trial_result"
            instance.receive_trial_result(event["parameter_id"], event["parameters"], event["value"])
            continue
        _phase[0] = "trial_end"
        instance.trial_end(event["parameter_id" if role == "tuner" else "trial_job_id"], event["success"])


def _tell_advisor(instance: Any, events: list[dict[str, Any]]) -> None:
    ids = _kept(instance, "ids", {})
    for event in events:
        trial_job_id = event.get("trial_job_id")
        parameter_id = ids.get(trial_job_id, event["parameter_id"])
        if event["kind"] == "result":
            data = {"parameter_id": parameter_id, "trial_job_id": trial_job_id, "type": "FINAL", "sequence": 0}
            _handle(instance, "handle_report_metric_data", {**data, "value": json.dumps(event["value"])})
            continue
        sent = {"parameter_id": parameter_id, "parameters": event.get("parameters"), "parameter_source": "algorithm"}
        data = {"trial_job_id": trial_job_id, "event": event.get("status"), "hyper_params": json.dumps(sent)}
        _handle(instance, "handle_trial_end", data)


def _advisor_call(instance: Any, call: dict[str, Any]) -> Any:
    if "generate" in call:
        index, pending, waiting = call["generate"], _kept(instance, "pending", []), _kept(instance, "waiting", [])
        if not pending and index not in waiting:  # one request per trial that waits, as NNI's slots asked
            _handle(instance, "handle_request_trial_jobs", 1)
            waiting.append(index)
        if not pending:
            return NO_JOB
        job = pending.pop(0)
        if index in waiting:
            waiting.remove(index)
        elif waiting:
            # a trial that never asked took parameters another trial's request produced: that
            # trial asks the advisor anew at its next try (each waiting slot keeps one request)
            waiting.pop(0)
        _kept(instance, "ids", {})[call.get("trial_job_id")] = job.get("parameter_id")
        return job["parameters"]
    if "assess" in call:
        asked = call["assess"]
        trial_job_id, ids, kills = asked["trial_job_id"], _kept(instance, "ids", {}), _kept(instance, "kills", [])
        for step, value in asked["steps"]:
            if step < asked.get("from", step):
                continue  # told at an earlier look
            data = {"parameter_id": ids.get(trial_job_id), "trial_job_id": trial_job_id, "type": "PERIODICAL"}
            _handle(instance, "handle_report_metric_data", {**data, "sequence": step, "value": json.dumps(value)})
            if trial_job_id in kills:
                kills.remove(trial_job_id)
                return step
        return None
    return None  # "check": made and restored, nothing more


def _call(instance: Any, call: dict[str, Any]) -> Any:
    if _is_advisor(instance):
        return _advisor_call(instance, call)
    if "generate" in call:
        _phase[0] = "generate_parameters"
        return instance.generate_parameters(call["generate"])
    if "assess" in call:
        _phase[0] = "assess_trial"
        asked = call["assess"]
        history: list[Any] = []
        for step, value in asked["steps"]:
            history.append(value)
            if step < asked.get("from", step):
                continue  # judged at an earlier look
            verdict = instance.assess_trial(asked["trial_job_id"], list(history))
            # NNI's AssessResult.Bad (or a falsy verdict) stops the trial at this step
            if getattr(verdict, "name", None) == "Bad" or verdict is False:
                return step
        return None
    return None  # "check": made and restored, nothing more


def _pickled(instance: Any) -> tuple[str | None, str | None]:
    try:
        data = pickle.dumps(instance)
    except Exception as exc:  # a lock, a file, a thread: the class is made anew next call
        return None, f"its object cannot be pickled ({type(exc).__name__}: {exc})"
    if len(data) > MAX_STATE:
        return None, f"its pickled object is {len(data):,} bytes, over the {MAX_STATE:,} kept"
    return base64.b64encode(data).decode("ascii"), None


def main() -> int:
    answer_path = os.environ["TRIALFLOW_HOST_ANSWER"]
    os.dup2(2, 1)  # the class's prints go to stderr, never into the answer
    request = json.loads(sys.stdin.read())
    try:
        instance, fresh = _restore(request)
        _tell(instance, request["role"], request.get("events", []))
        value = _call(instance, request.get("call", {}))
        waits = value is NO_JOB  # an advisor that sent no parameters: the trial waits
        value = None if waits else value
        json.dumps(value, default=_plain)  # a value JSON cannot carry is the class's error, said as such
        _phase[0] = "pickling its object"
        state, note = _pickled(instance)
        result = {"ok": True, "value": value, "state": state, "note": note, "fresh": fresh, "waits": waits}
    except BaseException as exc:  # the class's own error, with its message and where it was raised
        theirs = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) != __file__]
        place = f" ({os.path.basename(theirs[-1].filename)}:{theirs[-1].lineno})" if theirs else ""
        result = {"ok": False, "phase": _phase[0], "error": f"{type(exc).__name__}: {exc}{place}"}
    with open(answer_path, "w") as answer:
        answer.write(json.dumps(result, default=_plain))
    return 0


def _plain(value: Any) -> Any:
    """NumPy's scalars (what NNI's example tuners return) as Python's; anything else refused."""
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON: return numbers, strings, lists and dicts")


if __name__ == "__main__":
    sys.exit(main())
