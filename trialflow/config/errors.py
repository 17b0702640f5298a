"""Config problems that name the file, the key path and what was expected."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PathPart = str | int


def format_key_path(path: Sequence[PathPart]) -> str:
    """Render ``("trainingService", "machineList", 0, "port")`` the way a user reads YAML."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config, precise enough to fix without guessing."""

    file: Path | None
    key_path: tuple[PathPart, ...]
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = str(self.file) if self.file else "<config>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {format_key_path(self.key_path)}: {self.message}"


class ConfigError(ValueError):
    """Raised for an invalid experiment config; carries every problem found, not just the first."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def single(
        cls, file: Path | None, key_path: Sequence[PathPart], message: str, line: int | None = None
    ) -> ConfigError:
        return cls([Problem(file, tuple(key_path), message, line)])
