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
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m bench.run $(BENCH_ARGS)

system-deps:
	bash scripts/system-deps.sh

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

clean:
	rm -rf $(VENV) build dist *.egg-info src/*.egg-info .mypy_cache .pytest_cache .ruff_cache
