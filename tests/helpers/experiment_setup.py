"""What many tests set up first: a trial's code folder, and an experiment over a store of its
own (SQLite in the test's folder), each written once here instead of in every test module."""

from __future__ import annotations

from pathlib import Path

from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.store.experiment_store import ExperimentStore, sqlite_url


def code_folder(tmp_path: Path, files: dict[str, str]) -> Path:
    """``tmp_path/code`` holding ``files`` (name -> text): a trial's code directory."""
    folder = tmp_path / "code"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def experiment_with_store(
    config_path: Path, config: str, experiment_id: str, store_path: Path, workdir: Path
) -> tuple[Experiment, ExperimentStore]:
    """``config`` written to ``config_path``, loaded as experiment ``experiment_id`` working in
    ``workdir``, and a new SQLite store at ``store_path`` (not opened: tests open it as they need)."""
    config_path.write_text(config)
    return Experiment(load_config(config_path), experiment_id, workdir), ExperimentStore(sqlite_url(store_path))
