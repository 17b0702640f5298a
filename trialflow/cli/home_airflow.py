"""A home's private Airflow, shared between `trialflow run`s: is one up, who uses it, who stops it.

Starting the private Airflow is most of a short run's time (about 10 s before the run is
triggered, measured). So an Airflow a run started stays up while other runs of the same home
use it, `trialflow up` (or `run --keep-running`) keeps it up after its last user, and every
`trialflow run` of the home attaches to a live one instead of starting its own.

What is shared lives in ``<home>/airflow/running.json``, read and written under an exclusive
lock (``running.lock``): the api-server's port, each component's pid with its start time (a
pid the system gave to another process since is not ours), whether it is kept, and the runs
using it (pid and start time too). It is level-triggered: whoever takes the lock compares the
record with the processes that exist, and a record whose components are not all alive (a
crash, a reboot, a killed scheduler) is stale: what is left of it is killed and a new Airflow
is started, never waited on. A run that dies without leaving is dropped from the users the
next time anyone looks, so the last live user (or `trialflow down`) stops an Airflow nobody
keeps.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

#: The record's layout; a record of another version is treated as stale (replaced).
RECORD_VERSION = 1
#: A record is bounded: anything larger was not written by trialflow.
MAX_RECORD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Proc:
    """A process as the record keeps it: its pid and when it started (seconds since the epoch,
    as psutil reports it), so a reused pid is told apart."""

    pid: int
    started: float

    @classmethod
    def of(cls, pid: int) -> Proc:
        return cls(pid, psutil.Process(pid).create_time())

    def alive(self) -> bool:
        try:
            process = psutil.Process(self.pid)
            return abs(process.create_time() - self.started) < 0.01 and process.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False


@dataclass
class Running:
    """The record of a home's live Airflow."""

    port: int
    components: dict[str, Proc]
    #: The DAGs folder it parses: the home's own (configs), or a DAG file's folder.
    dags_folder: str
    #: `trialflow up` / `--keep-running`: stays up when its last user leaves.
    keep: bool = False
    users: list[Proc] = field(default_factory=list)

    def alive(self) -> bool:
        return bool(self.components) and all(p.alive() for p in self.components.values())

    def live_users(self) -> list[Proc]:
        return [u for u in self.users if u.alive()]

    def to_json(self) -> str:
        return json.dumps({"version": RECORD_VERSION} | asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Running | None:
        """The record, or None when it is not one this trialflow wrote (stale, replaced)."""
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or raw.get("version") != RECORD_VERSION:
                return None
            return cls(
                port=int(raw["port"]),
                components={str(k): Proc(int(v["pid"]), float(v["started"])) for k, v in raw["components"].items()},
                dags_folder=str(raw["dags_folder"]),
                keep=bool(raw.get("keep", False)),
                users=[Proc(int(u["pid"]), float(u["started"])) for u in raw.get("users", [])],
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def record_path(airflow_home: Path) -> Path:
    return airflow_home / "running.json"


def read(airflow_home: Path) -> Running | None:
    path = record_path(airflow_home)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_RECORD_BYTES:
        return None
    return Running.from_json(data.decode("utf-8", "replace"))


def write(airflow_home: Path, running: Running) -> None:
    airflow_home.mkdir(parents=True, exist_ok=True)
    path = record_path(airflow_home)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(running.to_json())
    os.replace(temporary, path)


def forget(airflow_home: Path) -> None:
    record_path(airflow_home).unlink(missing_ok=True)


@contextmanager
def locked(airflow_home: Path) -> Iterator[None]:
    """The home's lock: one process at a time decides whether to start, attach or stop."""
    airflow_home.mkdir(parents=True, exist_ok=True)
    with (airflow_home / "running.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def me() -> Proc:
    return Proc.of(os.getpid())
