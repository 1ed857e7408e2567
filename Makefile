# The two commands of the README:
#   make run   - install into .venv and start an all-in-one pool on this machine
#   make test  - install everything the tests need and run lint, docs and the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run test lint docs bench clean

$(BIN)/python:
	@echo "make: creating the virtualenv $(VENV) and upgrading pip in it (about 10 s)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# the daemon's own dependencies only: what `make run` needs; the install builds HTDA's C kernel in place (a C
# compiler and Python's headers: scripts/install-build-deps), again whenever its source changes
$(VENV)/.runtime: setup.py pyproject.toml constraints.txt htda/coordinator/_adaptive.c htda/simulator/_replay.c htda/_kernel.h | $(BIN)/python
	./scripts/install-build-deps $(BIN)/python
	@echo "make: installing HTDA and what its daemon needs (CherryPy, PycURL, msgspec, SQLAlchemy, htcondor, uproot," \
	      "numpy; about a minute the first time)..."
	$(BIN)/pip install -q -c constraints.txt -e .
	@echo "make: HTDA installed in $(VENV)"
	touch $@

# plus what the tests, the docs and the benches need
$(VENV)/.installed: $(VENV)/.runtime
	@echo "make: installing what the tests, docs and benches need (pytest, hypothesis, schemathesis, matplotlib," \
	      "sphinx, ruff, psycopg2; a few minutes the first time)..."
	$(BIN)/pip install -q -c constraints.txt -e '.[test,docs,postgres]'
	touch $@

run: $(VENV)/.runtime
	@echo "make: starting the all-in-one node on http://127.0.0.1:8740 (Ctrl-C stops it)"
	$(BIN)/htda-node --config config/all-in-one.toml

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy

docs: $(VENV)/.installed
	$(BIN)/sphinx-build -q -W -b html docs docs/_build/html

test: $(VENV)/.installed lint docs
	./scripts/install-system-packages
	./scripts/install-htcondor-deps
	./scripts/start-postgres
	./scripts/run-tests $(BIN)/python $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) docs/_build var .pytest_cache .mypy_cache
