"""The generated reference pages are what the code says now, and every link of the docs resolves.

docs/reference_pages.py writes the config model, the command's options, the connections, the JSON
outputs and the REST routes from the code (``make docs`` runs it); a committed page that differs
means a change to the code whose page was not regenerated. MkDocs checks the site's own links
(``make docs``, strict); the README is read on GitHub, outside the site, so its relative links are
checked here.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = runpy.run_path(str(ROOT / "docs" / "reference_pages.py"))


@pytest.mark.parametrize("page", sorted(GENERATOR["PAGES"]))
def test_a_generated_page_is_current(page: str):
    committed = (ROOT / "docs" / page).read_text()
    assert committed == GENERATOR["PAGES"][page](), f"docs/{page} is stale: run `python docs/reference_pages.py`"


def test_the_config_page_names_every_key_a_config_may_hold():
    from trialflow.config import ExperimentConfig

    page = (ROOT / "docs" / "reference" / "config-model.md").read_text()
    keys = [field.alias for name, field in ExperimentConfig.model_fields.items() if not field.exclude]
    assert keys and all(f"| `{key}` |" in page for key in keys)
    assert "### `platform: remote`" in page and "| `sshConnId` |" in page


def test_the_connections_page_names_every_connection_a_config_may_name():
    page = (ROOT / "docs" / "reference" / "connections.md").read_text()
    for key in (
        "`checkpoints.connId`",
        "`mlflow.connId`",
        "machineList[].sshConnId`",
        "platform: kubeflow).kubernetesConnId`",
    ):
        assert key in page
    assert "| `preload_core` | `AIRFLOW__TRIALFLOW__PRELOAD_CORE` | `False` |" in page


def test_every_environment_variable_the_page_names_is_read_by_the_package():
    source = "\n".join(path.read_text() for path in (ROOT / "trialflow").rglob("*.py"))
    unread = [name for name in GENERATOR["ENVIRONMENT"] if f'"{name}"' not in source]
    assert not unread, f"docs/reference_pages.py's ENVIRONMENT names variables nothing reads: {unread}"


def test_the_store_commands_json_shapes_come_from_their_queries():
    page = (ROOT / "docs" / "reference" / "json-outputs.md").read_text()
    for heading in (
        "## `trialflow experiments --json`",
        "## `trialflow trials E --json`",
        "## `trialflow export E --format json`",
    ):
        assert heading in page
    assert '"parameter_source": "algorithm"' in page and '"counts": {' in page and '"space_versions": 0' in page


def test_the_readmes_relative_links_resolve():
    readme = (ROOT / "README.md").read_text()
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", readme) if not t.startswith(("http://", "https://", "#"))]
    assert len(targets) >= 20
    missing = [t for t in targets if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, missing


def test_the_readme_fits_on_a_screen_or_two():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
