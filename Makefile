# The two README commands. Each creates the project virtualenv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
STAMP  := $(VENV)/.installed-stamp
# MinAtar's core needs only numpy; its metadata also asks for pandas, seaborn and scipy,
# which nothing here uses: installed without its dependencies.
MINATAR := minatar==1.0.15

.PHONY: train test test-all lint clean

$(STAMP): setup.py Makefile scripts/install_render_libs.sh
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -e '.[dev,bench,atari,mujoco]'
	$(VENV)/bin/pip install --quiet --no-deps $(MINATAR)
	scripts/install_render_libs.sh
	touch $(STAMP)

## Train CartPole-v1 on a local cluster (1 ps + 2 workers). Extra flags: make train ARGS="..."
train: $(STAMP)
	scripts/launch_cluster.sh $(ARGS)

## Lint, then the test suite (long runs marked slow are left out; make test-all runs them),
## in a random order: replay one with PYTEST_ARGS=--random-order-seed=N (the seed it printed).
## Two processes share the files (pytest-xdist): most tests wait on subprocesses, and a
## file's tests stay together, so a module's fixture (a Slurm cluster, a trained run) is made
## once. PARALLEL= runs them in this one process. Tests marked alone load every core on their
## own (16 workers): they run after the others, by themselves.
PARALLEL ?= -n 2 --dist loadfile
test: $(STAMP) lint
	$(VENV)/bin/pytest -m "not slow and not alone" $(PARALLEL) $(PYTEST_ARGS)
	$(VENV)/bin/pytest -m "alone and not slow" $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: none chosen

test-all: $(STAMP) lint
	$(VENV)/bin/pytest $(PYTEST_ARGS)

## ruff, and import-linter's check that every import points down the layers
## (docs/architecture.md; the contracts are in pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) *.egg-info
