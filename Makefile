# Each target bootstraps .venv itself: on a fresh machine `make demo` / `make test` is all you type.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test test-blas bench bench-quick lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,slurm,ray]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/featstore demo --out runs/demo

test: $(STAMP)
	@# system packages the tests use (WordNet 3.0 for protocols, Chromium for the report test,
	@# Slurm + munge for the executor test, which starts its own localhost cluster as root);
	@# CI runs as root; elsewhere install them yourself (the WordNet tests fail with the
	@# install command; the Chromium and Slurm tests are skipped)
	@if [ "$$(id -u)" = 0 ]; then \
	  missing=""; \
	  test -d /usr/share/wordnet || missing="$$missing wordnet-base wordnet-sense-index"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  command -v slurmctld >/dev/null || missing="$$missing slurm-wlm"; \
	  command -v munged >/dev/null || missing="$$missing munge"; \
	  if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq $$missing; fi; \
	fi
	$(BIN)/ruff check featstore scorers cli tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n auto tests

# The suite under every OpenBLAS kernel family this CPU can run (Prescott, Haswell, Zen,
# SkylakeX, ... as its flags allow) with 1 and 2 BLAS threads: six runs of the suite on an
# AVX2 machine; ONLY=tests/scorers runs a subset. Table: benchmarks/out/suite_across_blas.md.
test-blas: $(STAMP)
	$(BIN)/python -m benchmarks.suite_across_blas $(if $(ONLY),--only $(ONLY))

# Every benchmark at full size, one after the other (about 4-6 h on 2 cores, most of it
# bench_scaling; see benchmarks/README.md); `make bench ONLY=bench_metrics,bench_scaling` runs
# a subset. Markdown: benchmarks/out/latest.md; plots: benchmarks/plots/.
bench: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python -m benchmarks.run_all $(if $(ONLY),--only $(ONLY))

# Every speed goal (logit and GEMM floors, pytorch-ood from its own cache, sweeps, approximate
# KNN) at reduced N in one run, side by side (benchmarks/README.md gives its duration).
bench-quick: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python -m benchmarks.bench_quick

# ruff, then mypy over featstore/ and scorers/ (what it checks, and how strictly: pyproject.toml
# [tool.mypy])
lint: $(STAMP)
	$(BIN)/ruff check featstore scorers cli tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) runs build *.egg-info
