"""Which tests share a worker when the suite runs in parallel (pytest-xdist, ``--dist loadgroup``).

Most of the suite's time is spent waiting: on Airflow's loops, on trials, on servers starting.
Two workers overlap those waits with the CPU-bound unit tests. What must not be paid twice is
a costly fixture that outlives one test: the session's Airflow (``harness``: four components
and its first DAG parse), the package's Celery deployment (``cluster``), the kube-apiserver and
its controller, NNI's real experiment, and any module-scoped fixture (a module's own Airflow or
experiment run). Each of those makes one xdist group, so its tests go to one worker, one after
another, and the fixture is set up once; every other test is a unit of its own, handed to
whichever worker is free. The cheap session servers (PostgreSQL, two sshd, MLflow, Azurite)
may start once per worker: seconds, against minutes of waiting in line. The kube-apiserver is
a module's fixture (tests/conftest.py): each of its four modules is a group of its own.

pytest-xdist's own ``loadgroup`` cannot carry them on pytest 9.2: it writes a group suffix
into ``item._nodeid``, which pytest 9.2 no longer reads (pytest-xdist#1386), so every test was
scheduled alone and each worker started its own Airflow and Celery deployment. Here the
workers write each test's group to a file at collection and the controller's scheduler
(``GroupScheduling``, installed by ``tests/conftest.py``'s ``pytest_xdist_make_scheduler``)
reads it: the same grouping, without the test ids.

The groups run first, longest first, so the long chain (the session's Airflow) starts at once
and the single tests fill the other worker around it; without xdist the order is the one
``tests/conftest.py`` always kept (the Airflow's users last, so it idles beside nothing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

#: Session fixtures too costly to start on each worker, by the group their users form; the
#: first a test uses names its group. In running order: the longest chains first.
SHARED_FIXTURES = (
    ("harness", "airflow"),
    ("cluster", "cluster"),
    ("nni_folder", "nni-experiment"),
)
#: One Airflow for the suite, not one per chain: its tests (tests/integration 28 min, the pages'
#: 21 min, measured 2026-12-01 in one process) form one group on one worker, while the other
#: worker takes everything else (about 34 min). Two chains would end sooner on paper, but two
#: Airflows idling beside the CPU-bound tests (about half a core each, measured) and the load
#: they bring is what made tests wait past their bounds in the run that tried it.
HARNESS_GROUP = "airflow"
_ORDER = {HARNESS_GROUP: 0} | {group: rank + 1 for rank, (_, group) in enumerate(SHARED_FIXTURES[1:])}
#: The folder the controller and its workers share for the groups (set in tests/conftest.py
#: before the workers start, so they inherit it).
GROUPS_DIR_ENV = "TRIALFLOW_XDIST_GROUPS"


def _uses(item: pytest.Item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


def group_of(item: pytest.Item) -> str | None:
    """The xdist group ``item`` must run in, or None: it may run on any worker."""
    names = set(getattr(item, "fixturenames", ()))
    for fixture, group in SHARED_FIXTURES:
        if fixture in names:
            return group
    info = getattr(item, "_fixtureinfo", None)
    for fixture in names:
        for definition in info.name2fixturedefs.get(fixture, ()) if info else ():
            if definition.scope in ("module", "package"):
                return f"module:{item.nodeid.split('::', 1)[0]}"
    return None


def distributed(config: pytest.Config) -> bool:
    """Whether this session hands its tests to xdist workers (in a worker too)."""
    return getattr(config.option, "dist", "no") != "no" or hasattr(config, "workerinput")


def arrange(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the items (xdist) and order them: under xdist, the groups first (longest chains
    first, then the modules' groups) and the single tests after; otherwise the tests of the
    session's Airflow last, the order kept otherwise."""
    if not distributed(config):
        uses = [_uses(item, "harness") for item in items]
        items[:] = [i for i, u in zip(items, uses) if not u] + [i for i, u in zip(items, uses) if u]
        return
    groups = {id(item): group_of(item) for item in items}
    _write_groups(config, {item.nodeid: group for item in items if (group := groups[id(item)]) is not None})

    def rank(item: pytest.Item) -> int:
        group = groups[id(item)]
        if group is None:
            return len(_ORDER) + 1
        return _ORDER.get(group, len(_ORDER))

    items.sort(key=rank)  # stable: collection order within a rank


def _write_groups(config: pytest.Config, groups: dict[str, str]) -> None:
    """A worker's map of test id to group, written whole (renamed into place) so the
    controller never reads half of it; it is written before the worker reports its
    collection, and the scheduler reads it only once every worker has."""
    workerinput = getattr(config, "workerinput", None)
    folder = os.environ.get(GROUPS_DIR_ENV)
    if workerinput is None or not folder:
        return
    path = Path(folder) / f"{workerinput['workerid']}.json"
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(groups))
    partial.replace(path)


def read_groups() -> dict[str, str]:
    """The groups the workers wrote (each collected the same tests; xdist checks that)."""
    folder = os.environ.get(GROUPS_DIR_ENV)
    found = sorted(Path(folder).glob("*.json")) if folder else []
    if not found:
        raise RuntimeError(f"no worker wrote its test groups to ${GROUPS_DIR_ENV} ({folder})")
    groups: dict[str, str] = json.loads(found[0].read_text())
    return groups


class GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling, where a test's scope is its group (``group_of``) and a test
    outside every group is a scope of its own. Scopes are handed out in collection order
    (``--no-loadscope-reorder``), which ``arrange`` made: the longest chain first."""

    _groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            self._groups = read_groups()
        return self._groups.get(nodeid, nodeid)
