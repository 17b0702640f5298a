"""trialflow.config's names load on first use (PEP 562): each is the defining module's own
object, an unknown name is an AttributeError, and importing a small module of the package
(inline.py's mark, as a DAG parse with a kept plan does) loads neither the loader nor the model."""

from __future__ import annotations

import subprocess
import sys

import pytest

import trialflow.config as config


@pytest.mark.parametrize("name", config.__all__)
def test_each_public_name_is_its_modules_own(name):
    import importlib

    module = importlib.import_module(f"trialflow.config.{config._WHERE[name]}")
    assert getattr(config, name) is getattr(module, name)


def test_the_lazy_table_and_all_agree_and_an_unknown_name_is_refused():
    assert sorted(config.__all__) == sorted(config._WHERE)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        config.no_such_name  # noqa: B018


def test_the_inline_mark_alone_loads_neither_the_loader_nor_the_model():
    probe = (
        "import sys; from trialflow.config.inline import MARK; "
        "print(sorted(m for m in sys.modules if m in ('trialflow.config.loader', 'trialflow.config.model')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
