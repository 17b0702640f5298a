"""Every config and DAG the documentation shows is loaded, so the docs cannot show what does not run.

The code blocks of README.md and docs/ are read as a reader copies them:

* a YAML block is an experiment config, or a part of one (a section such as ``checkpoints:``):
  a part is put on top of a small complete config, and either is loaded by the config model in a
  folder of its own, as ``trialflow validate`` would (a v1 config alone, converted);
* a Python block that builds a DAG (``@dag``, ``DAG(...)``, ``experiment_dag(...)``, or a
  block headed ``# an Airflow DAG``) is written to a
  DAG file beside the repository's example experiments and parsed in a Python of its own, as
  the dag-processor parses it: it must make at least one DAG. A block that says it is an
  excerpt of a file in dags/ (``# an Airflow DAG (dags/X.py, shortened)``) has that file parsed
  instead;
* every other Python block (trial code, a platform's code, a task, a ``dag.test()`` call) must
  compile.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from trialflow.config import load_config

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXCERPT = re.compile(r"^# an Airflow DAG[^(\n]*\((dags/[\w./-]+\.py)(, shortened)?\)")
BASE = {
    "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
    "trialCommand": "python3 train.py",
    "trialConcurrency": 1,
    "maxTrialNumber": 2,
    "tuner": {"name": "Random"},
    "trainingService": {"platform": "local"},
}
#: What a v1 config part lacks (NNI's v1 keys; its converter reads them).
BASE_V1 = {"trialConcurrency": 1, "searchSpacePath": "space.json", "tuner": {"builtinTunerName": "Random"}}


@dataclass(frozen=True)
class Block:
    file: Path
    line: int
    language: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"

    @property
    def builds_a_dag(self) -> bool:
        return self.language == "python" and bool(
            re.search(r"^@dag\b|^\w+ = experiment_dag\(|\bDAG\(|^# an Airflow DAG", self.text, re.M)
        )


def blocks() -> list[Block]:
    found = []
    for file in DOCS:
        text = file.read_text()
        for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
            if match.group(1) in ("python", "yaml"):
                line = text[: match.start()].count("\n") + 1
                found.append(Block(file, line, match.group(1), match.group(2)))
    return found


BLOCKS = blocks()
CONFIGS = [b for b in BLOCKS if b.language == "yaml"]
DAGS = [b for b in BLOCKS if b.builds_a_dag]
OTHERS = [b for b in BLOCKS if b.language == "python" and not b.builds_a_dag]


def test_the_docs_have_blocks_of_each_kind():
    assert len(CONFIGS) >= 10 and len(DAGS) >= 5 and len(OTHERS) >= 5, (len(CONFIGS), len(DAGS), len(OTHERS))


@pytest.mark.parametrize("block", CONFIGS, ids=lambda b: b.name)
def test_a_config_block_loads(block: Block, tmp_path: Path, monkeypatch):
    shown = yaml.safe_load(block.text)
    assert isinstance(shown, dict), f"{block.name}: a YAML block that is no mapping"
    v1 = "trainingServicePlatform" in shown
    config = {**BASE_V1, **shown} if v1 else {**BASE, **shown}
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "space.json").write_text(json.dumps(BASE["searchSpace"]))
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    platform = (shown.get("trainingService") or {}).get("platform") if not v1 else None
    with _page_platform(block, platform, monkeypatch):
        load_config(path)  # a ConfigError names the key and what was expected


@contextmanager
def _page_platform(block: Block, name: str | None, monkeypatch) -> Iterator[None]:
    """A platform the page itself defines (docs/platforms/your-own.md's example): its config
    model is the page's own Python block, registered as a plugin would be."""
    from trialflow.config import loader, registry

    builtin = registry.platform_entries()
    if name is None or name in builtin:
        yield
        return
    model = None
    for other in BLOCKS:
        if other.file == block.file and other.language == "python" and f'Literal["{name}"]' in other.text:
            namespace: dict[str, object] = {"__name__": "docs_platform_example"}
            exec(compile(other.text, other.name, "exec", dont_inherit=True), namespace)  # as its own module
            fields = {k: getattr(v, "model_fields", {}) for k, v in namespace.items()}
            model = next(namespace[k] for k, f in fields.items() if getattr(f.get("platform"), "default", 0) == name)
    assert model is not None, f"{block.name}: platform {name!r} is neither built in nor defined on its page"
    entries = {**builtin, name: registry.PlatformEntry(name, model, None)}  # type: ignore[arg-type]
    caches = (loader.experiment_model, loader._known_keys)
    for cached in caches:
        cached.cache_clear()
    monkeypatch.setattr(registry, "platform_entries", lambda: entries)
    try:
        yield
    finally:
        monkeypatch.undo()
        for cached in caches:
            cached.cache_clear()


@pytest.mark.parametrize("block", OTHERS, ids=lambda b: b.name)
def test_other_python_blocks_compile(block: Block):
    compile(block.text, block.name, "exec")


PARSE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
found = {}
for path in sys.argv[1:]:
    bag = DagBag(dag_folder=path, safe_mode=False)
    found[path] = {"dags": sorted(bag.dag_ids), "errors": {k: str(v)[-800:] for k, v in bag.import_errors.items()}}
print(json.dumps(found))
"""


@pytest.mark.slow
def test_every_dag_block_parses_to_a_dag(tmp_path: Path):
    """One Python for every DAG block (each imports Airflow: seconds), in a folder beside the
    example experiments (the blocks name ``experiments/digits/...`` relative to their file)."""
    (tmp_path / "experiments").symlink_to(ROOT / "dags" / "experiments")
    files: dict[str, str] = {}
    for i, block in enumerate(DAGS):
        excerpt = EXCERPT.match(block.text)
        if excerpt:  # shortened with "...": the file it comes from is parsed instead
            assert (ROOT / excerpt.group(1)).is_file(), f"{block.name}: no {excerpt.group(1)}"
            files[str(ROOT / excerpt.group(1))] = block.name
            continue
        compile(block.text, block.name, "exec")
        path = tmp_path / f"dag_block_{i}.py"
        path.write_text(block.text)
        files[str(path)] = block.name
    env = {**os.environ, "TRIALFLOW_CACHE_DIR": str(tmp_path / "plans")}
    done = subprocess.run(
        [sys.executable, "-c", PARSE, *files], env=env, cwd=tmp_path, text=True, capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    errors = {files[path]: found["errors"] for path, found in parsed.items() if found["errors"]}
    assert not errors, errors
    empty = [files[path] for path, found in parsed.items() if not found["dags"]]
    assert not empty, f"blocks that make no DAG: {empty}"
