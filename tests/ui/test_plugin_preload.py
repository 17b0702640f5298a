"""``[trialflow] preload_core``: the plugin imports the core where Airflow loads plugins, and
only when asked (each case in a fresh interpreter: what is imported is the point)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: Each test starts a Python that imports Airflow and the plugin (3-4 s each).
pytestmark = pytest.mark.slow

CHECK = """
import sys
import trialflow.ui.plugin
from optuna.storages._rdb import models
from trialflow.config.loader import experiment_model
print(
    int("trialflow.lifecycle.trial_lifecycle" in sys.modules),
    int(not models.BaseModel.registry._new_mappers),
    # what the task process needed besides: its DAG file's module, the trigger it defers to,
    # what Optuna's samplers import at their first draw, the config model over every platform
    int(all(m in sys.modules for m in ("trialflow.dag", "trialflow.triggers.trial", "numpy.random"))),
    experiment_model.cache_info().currsize,
)
"""


@pytest.mark.parametrize(("setting", "expected"), [(None, "0 0 0 0"), ("False", "0 0 0 0"), ("True", "1 1 1 1")])
def test_the_plugin_preloads_the_core_only_when_asked(setting, expected):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__TRIALFLOW__")}
    if setting is not None:
        env["AIRFLOW__TRIALFLOW__PRELOAD_CORE"] = setting
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1].split() == expected.split()  # Airflow may log before


@pytest.mark.parametrize(("tuners", "expected"), [(None, "0"), ("TPE", "0"), ("GP", "1"), ("TPE, GP", "1")])
def test_gp_s_library_is_preloaded_only_when_named(tuners, expected):
    """``[trialflow] preload_tuners = GP``: scikit-learn's Gaussian process is imported with the
    core (each GP trial task's first ask otherwise imports it: ~0.6 s), and only then."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__TRIALFLOW__")}
    env["AIRFLOW__TRIALFLOW__PRELOAD_CORE"] = "True"
    if tuners is not None:
        env["AIRFLOW__TRIALFLOW__PRELOAD_TUNERS"] = tuners
    check = "import sys, trialflow.ui.plugin; print(int('sklearn.gaussian_process' in sys.modules))"
    out = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expected


def test_a_tuner_with_nothing_to_preload_is_named_in_a_warning():
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__TRIALFLOW__")}
    env.update(AIRFLOW__TRIALFLOW__PRELOAD_CORE="True", AIRFLOW__TRIALFLOW__PRELOAD_TUNERS="GPP, GP")
    check = "import sys, trialflow.ui.plugin; print(int('sklearn.gaussian_process' in sys.modules))"
    out = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "1"  # the known one still preloaded
    assert "preload_tuners: 'GPP' has nothing to preload (known: GP); ignored" in out.stdout + out.stderr
