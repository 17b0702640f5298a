# Two entry points: `make demo` runs the example experiment end to end on a private Airflow,
# `make test` runs the whole test suite. Both set up .venv from uv.lock first.
PYTHON ?= python3
VENV := .venv
export UV_PYTHON_DOWNLOADS := never
# Precompiled .pyc: imports of Airflow, SQLAlchemy and Optuna then cost a fraction (every task and
# trial process pays them, and some environments set PYTHONDONTWRITEBYTECODE).
export UV_COMPILE_BYTECODE := 1

.PHONY: demo docs test test-extended test-fast test-unit test-lowest lint venv bench bench-task bench-tuners bench-ui bench-parse bench-scale bench-ingest bench-kube bench-remote ui clean

$(VENV)/.synced: pyproject.toml uv.lock Makefile
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m pip install -q uv
	uv sync --frozen --compile-bytecode --extra examples --extra ssh --extra kubernetes --extra azure --group dev --python $(PYTHON)
	@touch $@

# The checkout is installed editable, so uv's --compile-bytecode leaves its own modules alone;
# where PYTHONDONTWRITEBYTECODE is set, every task process compiled trialflow from source
# (a wheel install compiles at install time). compileall only rewrites what changed.
venv: $(VENV)/.synced
	@$(VENV)/bin/python -m compileall -q -j 0 trialflow

# --new: every demo runs the experiment (without it, a second run would resume the first).
demo: venv
	$(VENV)/bin/trialflow run --new dags/experiments/digits/config.yml

# Two pytest-xdist workers by default (TEST_WORKERS=0: one process). The tests that share a costly
# fixture go to one worker each (tests/helpers/parallel.py, its own scheduler): the session's
# Airflow on one, everything else beside it. Measured 2026-12-06 on 2 cores, idle: 44:01 in one
# process (28 % of the CPU used: the suite mostly waits on Airflow's loops), 32:16 with two.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder)
test: venv
	$(VENV)/bin/python -m pytest -ra -m "not extended" --durations=40 $(XDIST)

# The longest end-to-end scenarios (about 16 minutes together on a 2-core machine): three of the
# cluster fault suite's (trialflow 0.1.0 -> current mid-experiment, the whole deployment
# SIGKILLed, trial tasks queued in Celery when Redis dies) and the second AML seed config; and,
# since 2026-12-02, six whose logic a faster test covers (each names it above its def): the
# remote machine's sshd stopped under the deployment, MLflow stopped mid-experiment under the
# scheduler, PBT on kubeflow under the scheduler, OpenPAI's v1 seed, `trialflow run` of several
# objectives, steering one of two task groups. Kept out of make test so CI stays inside its 90
# minutes; run them before a release and after a change to recovery, the store schema, tracking
# or a platform.
test-extended: venv
	$(VENV)/bin/python -m pytest -ra -m extended

# The inner loops run on every core (pytest-xdist; FAST_WORKERS=0: one process). They start no
# Airflow or browser, so unlike make test they are mostly CPU: measured 2026-12-02 on 2 cores,
# test-fast 4:55 -> 3:08 and test-unit 73 -> 54 s with two workers.
FAST_WORKERS ?= auto
FAST_XDIST = $(if $(filter 0,$(FAST_WORKERS)),-p no:xdist,-n $(FAST_WORKERS) --dist loadgroup --no-loadscope-reorder)

# The inner loop: the core, the store, the DAG and the platforms' builders and local/SSH/
# Kubernetes-free parts, without starting Airflow's components, a browser, nni's venv or the
# kube-apiserver (their tests are marked integration, ui, nni, kube), nor the tests marked slow
# (seconds each: graces, outages, Pythons importing Airflow). make test runs everything.
test-fast: venv
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider $(FAST_XDIST) \
		-m "not integration and not ui and not nni and not kube and not slow"

# The inner loop of the core (under a minute here): config, tuning, runs, steering and the read
# models, on SQLite, without the tests marked slow or that need PostgreSQL (marked postgresql by
# tests/conftest.py). make test-fast adds the rest of the package; make test runs everything.
UNIT_TESTS := tests/config tests/store tests/tuning tests/runs tests/steering tests/queries
test-unit: venv
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider $(FAST_XDIST) \
		-m "not integration and not ui and not nni and not kube and not slow and not postgresql" $(UNIT_TESTS)

# pyproject's lower bounds, tested: the lowest versions its ranges allow (uv's lowest-direct
# resolution; what they need themselves at their newest), in a virtualenv of their own, and the
# tests that call those libraries: the config (pydantic, PyYAML), the store and the tuners
# (SQLAlchemy, alembic, Optuna, SQLite and PostgreSQL), the DAG and its plan (Airflow), the local
# platform (psutil). Not the tests marked slow (a model fitted per ask, many processes at once:
# make test runs them at the newest versions), nor the trial side (any Python 3, no pinned library).
# Measured 2026-12-02 on 2 cores: every test of those folders took 557 s in CI, this selection 138 s here.
LOWEST := .lowest
LOWEST_TESTS := tests/config tests/store tests/tuning tests/queries/test_queries.py tests/experiment/test_experiment.py \
	tests/authoring/test_plan.py tests/test_dag.py tests/platforms/test_local.py tests/security/test_yaml.py
test-lowest:
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m pip install -q uv
	mkdir -p $(LOWEST)
	uv pip compile pyproject.toml -q --resolution lowest-direct --extra postgres --extra tuners \
		--python $(PYTHON) -o $(LOWEST)/requirements.txt
	uv venv -q --allow-existing --python $(PYTHON) $(LOWEST)/venv
	uv pip install -q -p $(LOWEST)/venv/bin/python -r $(LOWEST)/requirements.txt pytest pytest-timeout pytest-xdist
	uv pip install -q -p $(LOWEST)/venv/bin/python --no-deps -e .
	@grep -iE '^(alembic|apache-airflow|apache-airflow-providers-standard|optuna|pydantic|pyyaml|pathspec|psutil|rich|sqlalchemy|tenacity)==' $(LOWEST)/requirements.txt
	TRIALFLOW_TEST_TIMES=$(LOWEST)/test-times.txt $(LOWEST)/venv/bin/python -m pytest -q -m "not integration and not slow" \
		--deselect tests/config/test_nni_examples.py $(XDIST) $(LOWEST_TESTS)
	@cat $(LOWEST)/test-times.txt | head -n 12

# The documentation site (mkdocs.yml, docs/): the reference pages generated from the code first
# (docs/reference_pages.py; tests/docs checks the committed ones are current), then built into
# site/ with every warning an error: a broken link or anchor, a page missing from nav.
docs: venv
	$(VENV)/bin/python docs/reference_pages.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# ruff (lint and format), mypy and the layer contract (import-linter), all configured in
# pyproject.toml, on the package, and that tests/ mirrors the package (tests/helpers/mirror.py);
# .ci/run runs it.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python -m tests.helpers.mirror

bench: venv
	$(VENV)/bin/python bench/overhead.py

# One trial task's own CPU, SQL statements and commits (no scheduler); SOURCE=<checkout> compares.
bench-task: venv
	$(VENV)/bin/python bench/trial_task.py $(if $(SOURCE),--source $(SOURCE))

bench-tuners: venv
	$(VENV)/bin/python bench/tuners.py

bench-ui: venv
	$(VENV)/bin/python bench/ui.py

bench-parse: venv
	$(VENV)/bin/python bench/parse.py

# Issue 30's targets at scale (20,000 trials, 1,000,000 results, 200 deferred, 50 asking at once,
# 1,000 trials beside NNI), each section beside its baseline: ~1 hour; ONLY="pages asks" picks some.
bench-scale: venv
	$(VENV)/bin/python bench/scale.py $(if $(ONLY),--only $(ONLY))

# A real trial reporting 1,000,000 intermediate results, on SQLite then PostgreSQL (started here).
bench-ingest: venv
	$(VENV)/bin/python bench/ingest.py
	$(VENV)/bin/python bench/ingest.py --postgres local

# Needs the kube-apiserver that tests/helpers/kube/build-apiserver.sh builds.
bench-remote: venv
	$(VENV)/bin/python bench/remote.py

bench-kube: venv
	$(VENV)/bin/python bench/kube.py --trials 200 --airflow 200

# Rebuild the experiment pages' bundle (committed; a test checks it is the build of ui/src).
ui:
	cd ui && npm ci --no-audit --no-fund && npm run build

clean:
	rm -rf $(VENV) $(LOWEST) dags/experiments/digits/.trialflow .pytest_cache
