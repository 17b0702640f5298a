"""The private Airflow: a fresh home starts from a migrated template, and that copy is a
database Airflow itself finds fully migrated; its components stop without leaving a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from trialflow import embedded
from trialflow.embedded import EmbeddedAirflow, database_template


def test_a_fresh_home_copies_the_migrated_template_and_airflow_accepts_it(tmp_path, monkeypatch):
    monkeypatch.setenv(embedded.TEMPLATE_ENV, str(tmp_path / "templates"))
    first = EmbeddedAirflow(tmp_path / "first", tmp_path / "dags")
    first.migrate()  # migrates for real, then keeps the result
    template = database_template()
    assert template.is_file() and template.parent == tmp_path / "templates"

    second = EmbeddedAirflow(tmp_path / "second", tmp_path / "dags")
    second.migrate()
    assert (second.home / "airflow.db").read_bytes() == template.read_bytes()
    # each home has its own secrets, written before any component could race to make its own
    configs = [(a.home / "airflow.cfg") for a in (first, second)]
    assert all(c.stat().st_mode & 0o077 == 0 for c in configs)
    secrets = [dict(line.split(" = ", 1) for line in c.read_text().splitlines() if " = " in line) for c in configs]
    assert secrets[0].keys() >= {"fernet_key", "jwt_secret"} and secrets[0] != secrets[1]
    assert not (second.home / "logs" / "db-migrate.log").exists()  # no migration ran
    check = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "check-migrations", "-t", "0"],
        env=second.env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_existing_database_is_migrated_not_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv(embedded.TEMPLATE_ENV, str(tmp_path / "templates"))
    template = database_template()
    template.parent.mkdir(parents=True)
    template.write_bytes(b"template")
    airflow = EmbeddedAirflow(tmp_path / "home", tmp_path / "dags")
    (airflow.home).mkdir()
    (airflow.home / "airflow.db").write_bytes(b"")  # a home that has its database (resume)
    calls: list[Path] = []
    monkeypatch.setattr(EmbeddedAirflow, "_run_migrate", lambda self: calls.append(self.home))
    airflow.migrate()
    assert calls == [airflow.home] and (airflow.home / "airflow.db").read_bytes() == b""
    assert template.read_bytes() == b"template"  # an existing home never becomes the template


def test_the_template_is_named_by_the_installed_airflow_distributions(monkeypatch, tmp_path):
    from importlib import metadata

    monkeypatch.setenv(embedded.TEMPLATE_ENV, str(tmp_path))

    class Dist:
        def __init__(self, name: str, version: str):
            self.metadata = {"Name": name}
            self.version = version

    installed = [Dist("apache-airflow", "3.3.2"), Dist("apache-airflow-providers-fab", "2.0"), Dist("numpy", "1")]
    monkeypatch.setattr(metadata, "distributions", lambda: installed)
    name = database_template().name
    installed[2] = Dist("numpy", "2")  # not Airflow's: same template
    assert database_template().name == name
    installed[1] = Dist("apache-airflow-providers-fab", "2.1")  # a provider upgrade: another one
    assert database_template().name != name


def _sessions_alive(sids: set[int]) -> list[psutil.Process]:
    alive = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) in sids and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except (ProcessLookupError, psutil.Error):
            pass
    return alive


def test_stop_ends_every_component_with_its_children(tmp_path, monkeypatch):
    """The four real components, healthy, then stopped: Airflow's own exit first, then the
    whole process groups, so no scheduler worker, trigger runner or gunicorn child outlives
    the run; and the Execution API answered the warm-up before any task asked it."""
    monkeypatch.setenv(embedded.TEMPLATE_ENV, str(tmp_path / "templates"))
    airflow = EmbeddedAirflow(tmp_path / "home", tmp_path / "dags")
    (tmp_path / "dags").mkdir()
    airflow.migrate()
    airflow.start()
    sids = {proc.pid for proc in airflow.processes.values()}
    try:
        airflow.wait_serving()
        airflow.warm_up()
        airflow.wait_healthy()
        assert airflow._warm_up is not None
        airflow._warm_up.join(timeout=120)
        assert not airflow._warm_up.is_alive()
        children = [p for p in _sessions_alive(sids) if p.pid not in sids]
        assert children, "the components run children (LocalExecutor workers, trigger runner)"
    finally:
        airflow.stop(grace=15)
    assert all(proc.poll() is not None for proc in airflow.processes.values())
    assert _sessions_alive(sids) == []
