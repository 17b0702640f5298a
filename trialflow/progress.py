"""Terminal display for `trialflow run`: a progress bar while trials run, a table at the end."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trialflow.platforms.base import TERMINAL_STATUSES
from trialflow.tuning.results import TrialRow

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
        self.err.print(message)

    def update(self, rows: list[TrialRow]) -> None:
        counts = Counter(r.status for r in rows)
        done = sum(n for s, n in counts.items() if s in _TERMINAL)
        finals = [r.final_metric for r in rows if r.final_metric is not None and r.counted]
        description = f"trials: {counts.get('RUNNING', 0)} running, {counts.get('FAILED', 0)} failed"
        if self.objectives:  # no single best: how many trials no other beats on every objective
            from trialflow.tuning.pareto import pareto_rows, with_values

            members = pareto_rows(with_values(rows, self.objectives), self.objectives)
            if members:
                description += f", Pareto set {len(members)}"
        else:
            best = (min if self.optimize_mode == "minimize" else max)(finals) if finals else None
            if best is not None:
                description += f", best {best:.6g}"
        self.progress.update(self.task, completed=done, description=description)
        if not self.err.is_terminal:  # plain logs: a line when something changes
            line = f"{done}{'' if self.total is None else f'/{self.total}'} done; {description}"
            if line != self._last_line:
                self.err.print(line)
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
