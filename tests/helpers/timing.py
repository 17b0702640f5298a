"""Where the suite's time goes: a table of each test folder's time, written when a session ends.

The suite's cost is paid forever, so it is measured on every run rather than guessed: each
test's setup, call and teardown are added to its folder (tests/ui, tests/integration, ...), and
the table (tests, seconds and the slowest test of each folder, with the session's wall time)
is written to ``TRIALFLOW_TEST_TIMES`` (default: ``.test-times.txt`` in the checkout), which
`.ci/run` prints at its end, followed by the slowest tests. It is rewritten every
``REWRITE_SECONDS`` while the session runs, so a run killed at CI's time limit still says
where its time went (CI once printed the previous step's table instead). Under pytest-xdist
the reports reach the controller, so one table covers every worker; the folders' seconds
then add up to more than the wall time.
A session-scoped fixture's setup (an Airflow, a PostgreSQL) counts toward the first test that
asked for it: that is where a run waits for it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: How often the table is rewritten during a session, and how many of the slowest tests it lists.
REWRITE_SECONDS = 30.0
SLOWEST = 40


@dataclass
class FolderTime:
    tests: int = 0
    seconds: float = 0.0
    slowest: tuple[float, str] = (0.0, "")


class SuiteTimes:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.started = time.monotonic()
        self.folders: dict[str, FolderTime] = {}
        self.per_test: dict[str, float] = {}
        self.written = time.monotonic()

    @staticmethod
    def folder(nodeid: str) -> str:
        parts = nodeid.split("::", 1)[0].split("/")
        return "/".join(parts[:2]) if len(parts) > 2 else parts[0]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.folders.setdefault(self.folder(report.nodeid), FolderTime())
        entry.seconds += report.duration
        total = self.per_test.get(report.nodeid, 0.0) + report.duration
        self.per_test[report.nodeid] = total
        if total > entry.slowest[0]:
            entry.slowest = (total, report.nodeid)
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            entry.tests += 1
        if report.when == "teardown" and time.monotonic() - self.written > REWRITE_SECONDS:
            self.write()

    def table(self) -> str:
        wall = time.monotonic() - self.started
        rows = sorted(self.folders.items(), key=lambda kv: -kv[1].seconds)
        total = sum(f.seconds for _, f in rows)
        lines = [
            f"test time by folder (wall {wall / 60:.1f} min; tests' own time {total / 60:.1f} min, "
            f"xdist workers: {self.workers or 'none'})",
            f"{'folder':<28} {'tests':>6} {'seconds':>9} {'share':>6}  slowest test",
        ]
        for name, f in rows:
            share = f"{100 * f.seconds / total:.0f}%" if total else "-"
            slow = f"{f.slowest[0]:.0f} s {f.slowest[1].split('/', 1)[-1][:90]}"
            lines.append(f"{name:<28} {f.tests:>6} {f.seconds:>9.0f} {share:>6}  {slow}")
        lines += ["", f"the {SLOWEST} slowest tests (setup + call + teardown, seconds)"]
        for nodeid, seconds in sorted(self.per_test.items(), key=lambda kv: -kv[1])[:SLOWEST]:
            lines.append(f"{seconds:7.1f}  {nodeid[:150]}")
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        self.written = time.monotonic()
        target = Path(os.environ.get("TRIALFLOW_TEST_TIMES", ROOT / ".test-times.txt"))
        try:
            target.write_text(self.table(), encoding="utf-8")
        except OSError as exc:
            print(f"\nthe test time table could not be written to {target}: {exc}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # an xdist worker: the controller writes it
            return
        self.write()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        workers = getattr(config.option, "numprocesses", None) if getattr(config.option, "dist", "no") != "no" else 0
        config.pluginmanager.register(SuiteTimes(int(workers or 0)), "trialflow-suite-times")
