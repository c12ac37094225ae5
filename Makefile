# The two commands that matter: `make demo` (the main job, on loopback) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint typecheck pytest bench system-deps clean

demo: $(VENV)/.installed system-deps
	$(BIN)/python scripts/demo.py

test: $(VENV)/.installed system-deps lint typecheck pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check src tests bench scripts

typecheck: $(VENV)/.installed
	$(BIN)/mypy --strict

pytest: $(VENV)/.installed
	$(BIN)/pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed system-deps
	$(BIN)/pip install -q -c requirements-dev.lock --build-constraint requirements-dev.lock -e '.[bench]'
	$(BIN)/python -m bench.run $(BENCH_ARGS)

system-deps:
	bash scripts/system-deps.sh

# Every package at the version requirements-dev.lock pins, the build backend of the editable
# install included: a fresh checkout installs the same set whatever PyPI has published since.
$(VENV)/.installed: pyproject.toml requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c requirements-dev.lock pip setuptools
	$(BIN)/pip install -q -c requirements-dev.lock --build-constraint requirements-dev.lock -e '.[test]'
	$(BIN)/python scripts/locks.py --check-installed requirements-dev.lock
	touch $@

clean:
	rm -rf $(VENV) build dist *.egg-info src/*.egg-info .mypy_cache .pytest_cache .ruff_cache
