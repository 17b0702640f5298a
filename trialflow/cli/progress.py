"""Terminal display for `trialflow run`: a progress bar while trials run, a table at the end."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trialflow.platforms.base import TERMINAL_STATUSES
from trialflow.store.results import TrialRow

_TERMINAL = {s.value for s in TERMINAL_STATUSES}


def format_parameters(parameters: Any) -> str:
    """``C=0.0202 kernel=rbf``: short enough for a table cell, nested choices inline."""
    if not isinstance(parameters, dict):
        return str(parameters)
    parts = []
    for key, value in parameters.items():
        if isinstance(value, float):
            value = f"{value:.4g}"
        elif isinstance(value, dict):
            value = "{" + format_parameters(value) + "}"
        parts.append(f"{key}={value}")
    return " ".join(parts)


def describe(
    rows: list[TrialRow], optimize_mode: str, objectives: list[dict[str, str]] | None = None
) -> tuple[int, str]:
    """(trials ended, the progress line's words): running and failed counts, the best so far
    (with several objectives, the Pareto set's size: there is no single best)."""
    counts = Counter(r.status for r in rows)
    done = sum(n for s, n in counts.items() if s in _TERMINAL)
    description = f"trials: {counts.get('RUNNING', 0)} running, {counts.get('FAILED', 0)} failed"
    if objectives:
        from trialflow.store.pareto import pareto_rows, with_values

        members = pareto_rows(with_values(rows, objectives), objectives)
        if members:
            description += f", Pareto set {len(members)}"
    else:
        finals = [r.final_metric for r in rows if r.final_metric is not None and r.counted]
        best = (min if optimize_mode == "minimize" else max)(finals) if finals else None
        if best is not None:
            description += f", best {best:.6g}"
    return done, description


class RunDisplay:
    def __init__(
        self,
        total: int | None,
        quiet: bool = False,
        optimize_mode: str = "maximize",
        objectives: list[dict[str, str]] | None = None,
    ):
        """``total``: trials the experiment starts; None when it runs until its duration ends.
        ``objectives``: several: the line shows the Pareto set's size, never a single best."""
        self.total = total
        self.optimize_mode = optimize_mode
        self.objectives = objectives if objectives and len(objectives) > 1 else None
        # Progress goes to stderr so `--json` leaves stdout machine-readable.
        self.err = Console(stderr=True)
        self.out = Console()
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=False,
            disable=quiet or not self.err.is_terminal,
        )
        self.task = self.progress.add_task("trials", total=total)
        self._last_line = ""

    def __enter__(self) -> RunDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def say(self, message: str) -> None:
        self.err.print(message, soft_wrap=True)  # an address stays on one line, to copy

    def update(self, rows: list[TrialRow]) -> None:
        done, description = describe(rows, self.optimize_mode, self.objectives)
        self.progress.update(self.task, completed=done, description=description)
        if not self.err.is_terminal:  # plain logs: a line when something changes
            line = f"{done}{'' if self.total is None else f'/{self.total}'} done; {description}"
            if line != self._last_line:
                self.err.print(line, soft_wrap=True)
                self._last_line = line

    def results(self, result: Any) -> None:
        table = Table(title=f"Experiment {result.experiment_id} ({result.optimize_mode}) — {result.state}")
        for column in ("", "trial", "status", "final", "#intermediate", "parameters"):
            table.add_column(column, justify="right" if column in ("trial", "final", "#intermediate") else "left")
        marked = set(result.pareto) or ({result.best.trial_index} if result.best else set())
        for r in result.rows:
            table.add_row(
                "*" if r.trial_index in marked else "",
                str(r.trial_index),
                r.status or "",
                _final(r),
                str(r.intermediate_count),
                format_parameters(r.parameters),
            )
        self.out.print(table)
        if result.pareto:
            self.out.print(f"Pareto set (*): {len(result.pareto)} trials, no one beaten on every objective")
        elif result.best:
            self.out.print(
                f"Best trial {result.best.trial_id}: {result.best.final_metric:.6g} "
                f"with {format_parameters(result.best.parameters)}"
            )
        self.out.print(f"Files: {result.home}")


def _final(row: TrialRow) -> str:
    """A trial's final result in the table: its values by objective, or its metric."""
    if row.values:
        return " ".join(f"{k}={v:.4g}" for k, v in row.values.items())
    return "" if row.final_metric is None else f"{row.final_metric:.6g}"


class GroupsDisplay(RunDisplay):
    """`trialflow run my_dag.py`: one progress line per experiment of the DAG, then each one's
    table and what the author's own tasks did."""

    def __init__(self, groups: list[tuple[str, int | None, str, list[dict[str, str]] | None]], quiet: bool = False):
        """``groups``: (label, trials it starts or None, optimize mode, objectives) per experiment."""
        super().__init__(None, quiet)
        self.progress.remove_task(self.task)
        self.groups = [(label, total, mode, o if o and len(o) > 1 else None) for label, total, mode, o in groups]
        self.tasks = [self.progress.add_task(label, total=total) for label, total, _, _ in self.groups]
        self._last_lines = [""] * len(self.groups)

    def update_group(self, index: int, rows: list[TrialRow]) -> None:
        label, total, mode, objectives = self.groups[index]
        done, description = describe(rows, mode, objectives)
        self.progress.update(self.tasks[index], completed=done, description=f"{label}: {description}")
        if not self.err.is_terminal:
            line = f"{label}: {done}{'' if total is None else f'/{total}'} done; {description}"
            if line != self._last_lines[index]:
                self.err.print(line, soft_wrap=True)
                self._last_lines[index] = line

    def dag_results(self, result: Any) -> None:
        for label, experiment in result.experiments:
            self.out.print(label, markup=False, style="bold")
            self.results(experiment)
        if result.tasks:
            table = Table(title="Your tasks")
            table.add_column("task")
            table.add_column("state")
            for task in result.tasks:
                table.add_row(task.task_id, task.state)
            self.out.print(table)
            for task in result.tasks:
                if task.log_tail:
                    self.out.print(f"{task.task_id} failed; the end of its log:", markup=False)
                    for line in task.log_tail:
                        self.out.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
        self.out.print(f"DAG {result.dag_id}, run {result.run_id}: {result.state}", soft_wrap=True)
