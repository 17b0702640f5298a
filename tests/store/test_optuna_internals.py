"""Optuna's private parts stay behind trialflow/store/optuna_internals.py, within the tested range.

A new Optuna that moves one of them fails here, naming it, instead of at every experiment's ask.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import optuna
import pytest
from optuna.storages import RDBStorage
from packaging.requirements import Requirement
from packaging.version import Version

from trialflow.queries import tables
from trialflow.store import optuna_internals as internals

ROOT = Path(__file__).resolve().parents[2]


def test_the_tested_range_is_pyprojects_and_holds_the_installed_optuna():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (optuna_req,) = [Requirement(r) for r in project["project"]["dependencies"] if Requirement(r).name == "optuna"]
    assert str(optuna_req.specifier) == str(Requirement(f"optuna{internals.TESTED}").specifier)
    assert optuna_req.specifier.contains(Version(optuna.__version__)), (
        f"Optuna {optuna.__version__} is outside {internals.TESTED}: run the suite on it, then move the range "
        "in pyproject.toml and optuna_internals.TESTED together"
    )
    assert any(clause.operator == "<" for clause in optuna_req.specifier), "the range must be capped"


@pytest.mark.parametrize(
    "owner, names",
    [
        (RDBStorage, internals.RDB_STORAGE_MEMBERS),
        (internals.CachedStorage, internals.CACHED_STORAGE_MEMBERS),
    ],
)
def test_every_private_member_used_still_exists(owner, names, tmp_path):
    storage = RDBStorage(f"sqlite:///{tmp_path / 'x.db'}")
    instance = storage if owner is RDBStorage else internals.CachedStorage(storage)
    missing = [name for name in names if not hasattr(instance, name)]
    assert not missing, f"Optuna {optuna.__version__}'s {owner.__name__} has no {missing}"


def test_the_version_managers_wrapped_method_exists_and_new_stores_share_one_script_directory(tmp_path):
    from optuna.storages._rdb.storage import _VersionManager

    import trialflow.store.optuna_storage  # noqa: F401  (wraps the method at import)

    assert all(hasattr(_VersionManager, name) for name in internals.VERSION_MANAGER_MEMBERS)
    first, second = (RDBStorage(f"sqlite:///{tmp_path / name}") for name in ("a.db", "b.db"))
    scripts = [s._version_manager._create_alembic_script() for s in (first, second)]
    assert scripts[0] is scripts[1]
    internals.share_alembic_scripts()  # twice: still one wrapper, one directory
    assert first._version_manager._create_alembic_script() is scripts[0]
    # Each database is still stamped at Optuna's head revision and passes Optuna's own check.
    for storage in (first, second):
        assert storage._version_manager.get_current_version() == storage._version_manager.get_head_version()
        storage._version_manager.check_table_schema_compatibility()


def test_a_new_trials_storage_id_is_read_where_optuna_keeps_it(tmp_path):
    storage = RDBStorage(f"sqlite:///{tmp_path / 'x.db'}")
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    assert all(hasattr(trial, name) for name in internals.TRIAL_MEMBERS)
    assert internals.trial_storage_id(trial) == storage.get_trial_id_from_study_id_trial_number(
        study._study_id, trial.number
    )


def test_optunas_tables_are_named_one_way():
    """Issue 48: Optuna's tables were reached two ways (its models in the store's reader, copies
    declared by hand, on a MetaData of their own, in the read models). Every module that names
    one now takes it from optuna_tables, which takes it from Optuna's models; no module of
    trialflow builds a table of Optuna's name itself, but for the one index trialflow puts on
    Optuna's trials (store/tables.py names the two columns it covers; it reads nothing)."""
    from trialflow.store import optuna_tables

    optuna_names = set(internals.models.BaseModel.metadata.tables)
    for name in optuna_tables.__all__:
        table = getattr(optuna_tables, name)
        assert table.metadata is internals.models.BaseModel.metadata, name
        assert getattr(tables, name, table) is table, f"queries.tables.{name} is not Optuna's"
    offenders = []
    for path in (ROOT / "trialflow").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) == "Table"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in optuna_names
                and (str(path.relative_to(ROOT)), node.args[0].value) != ("trialflow/store/tables.py", "trials")
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_no_other_module_imports_optunas_private_modules():
    offenders = []
    for path in (ROOT / "trialflow").rglob("*.py"):
        if path.name == "optuna_internals.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n.startswith("optuna") and any(part.startswith("_") for part in n.split(".")) for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
