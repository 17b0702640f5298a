"""A submitted trial's handle: how to find it again, on whichever platform it runs.

``TrainingPlatform.submit`` returns it; the store keeps it with the trial (JSON); ``poll``,
``stop``, the reconciler and the pages read it back. It is a TypedDict (a plain dict at run
time, so it crosses processes as JSON) naming every platform's keys, so a key read that no
platform writes is a type error; each platform writes its own subset.
"""

from __future__ import annotations

from typing import Required, TypedDict


class TrialHandle(TypedDict, total=False):
    """How to find a submitted trial again: what ``submit`` returns, stored with the trial (JSON),
    and handed back to ``poll``, ``stop`` and the pages. Every platform's keys are named here, so
    a key read that no platform writes is a type error; each platform writes its own subset."""

    platform: Required[str]
    trial_id: str
    experiment_id: str
    #: The trial's folder where Airflow's hosts read it (local; the local side of a mounted
    #: share: OpenPAI, DLTS), or on the remote machine (remote).
    trial_dir: str
    #: The machine or cluster the trial runs on (local: this host's name).
    host: str
    #: When the job was submitted (time.time()): remote and Kubernetes wait a while for it.
    submitted_at: float
    # local: the wrapper's process and its start time (pid reuse is told apart)
    pid: int
    started: float | None
    # remote: the index of the machine in the config's list
    machine: int
    # Kubernetes: the object, its kind and the uid it was created with
    name: str
    namespace: str
    kind: str
    uid: str | None
    # the services' own job: OpenPAI's and Azure ML's name, DLTS's id, OpenPAI's user
    job: str
    job_id: str
    user: str
    #: The service's own page of the job (OpenPAI, DLTS, Azure ML).
    web_url: str | None
    #: Which start of the trial this job is: 0 (absent) the first, n after its n-th restart
    #: from a checkpoint (trialflow.experiment.keeping).
    attempt: int
    # added by TrainingPlatform.describe for the pages
    location: str | None
    log_files: list[str]


def current_handle(given: TrialHandle, stored: TrialHandle | None) -> TrialHandle:
    """The trial's job now: the store's handle where a restart from a checkpoint replaced the
    one a caller was given (a later ``attempt``), else the given one."""
    if stored and stored.get("attempt", 0) > given.get("attempt", 0):
        return stored
    return given
