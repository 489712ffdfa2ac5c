# GraphEngine: `make run` serves, `make test` tests. Both build what they need first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 50051

NATIVE_SOURCES := $(shell find runtime_ext proto -type f 2>/dev/null) CMakeLists.txt pyproject.toml

.PHONY: all install run test lint bench clean

all: install

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Build requirements are read from pyproject.toml so that the list lives in one place.
$(VENV)/.deps: $(PY) pyproject.toml
	$(PY) -m pip install -q $$($(PY) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml','rb'))['build-system']['requires']))")
	touch $@

# Editable install: Python sources are used in place; the native runtime and the proto
# stubs are rebuilt (incrementally, in build/) whenever their sources change.
$(VENV)/.installed: $(VENV)/.deps $(NATIVE_SOURCES)
	flock $(VENV)/.install.lock $(PY) -m pip install -q --no-build-isolation -e '.[test]'
	touch $@

install: $(VENV)/.installed

examples/models/mlp.onnx: install examples/make_examples.py
	$(PY) examples/make_examples.py examples/models

run: install examples/models/mlp.onnx
	$(VENV)/bin/graphengine serve --port $(PORT)

test: install
	$(PY) -m ruff check engine server clients runtime_ext/python tests benchmarks examples
	$(PY) -m pytest -q tests

lint: install
	$(PY) -m ruff check engine server clients runtime_ext/python tests benchmarks examples

bench: install
	$(PY) -m pip install -q torch==2.13.0
	$(PY) benchmarks/run.py

clean:
	rm -rf build $(VENV) examples/models
