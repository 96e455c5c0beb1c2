# Each target bootstraps .venv itself: on a fresh machine `make demo` / `make test` is all you type.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/featstore demo --out runs/demo

test: $(STAMP)
	$(BIN)/ruff check featstore scorers cli tests benchmarks
	$(BIN)/python -m pytest -q tests

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all

lint: $(STAMP)
	$(BIN)/ruff check featstore scorers cli tests benchmarks

clean:
	rm -rf $(VENV) runs build *.egg-info
