# Two commands: `make run` (set up, then the default simulation) and `make test`.
# The first Python 3.11+ found; python3 first, so a machine's default interpreter wins.
PYTHON ?= $(shell for p in python3 python3.11 python3.12 python3.13; do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo $$p && break; done)
VENV ?= .venv
BIN := $(VENV)/bin
FMNIST_DIR := /usr/share/datasets/fashion-mnist
export FLWR_TELEMETRY_ENABLED ?= 0
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION ?= 1
export FLWR_DISABLE_UPDATE_CHECK ?= 1

.PHONY: setup data run test test-fast bench docs browser

# The README's commands run in the activated venv: say how, after every set-up.
setup: $(VENV)/.installed $(VENV)/.flower-env
	@echo "fedpfn is set up in $(VENV) (the project, pytest, tensorboardX, tensorboard, wandb and mkdocs-material)."
	@echo "Activate it in each new shell before the README's commands (bash, zsh):"
	@echo "    . $(VENV)/bin/activate"

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: Python 3.11 or newer is needed (flwr 1.42 requires it)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[test]'
	touch $@

# Flower reads its switches from the environment only, so `flwr run` typed in a shell gets this
# project's from the venv's activate: telemetry and per-run dependency installation off, and a
# managed local SuperLink on ports of the user's own (fedpfn/runtime/env.py).
$(VENV)/.flower-env: $(VENV)/.installed fedpfn/runtime/env.py
	$(BIN)/python -m fedpfn.runtime.env --activate $(BIN)/activate
	touch $@

# Debian's Fashion-MNIST package: real data without a download at run time.
data:
	@if [ -d $(FMNIST_DIR) ]; then exit 0; fi; \
	if command -v apt-get >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq dataset-fashion-mnist \
		|| echo "warning: could not install dataset-fashion-mnist; pass --data-root DIR with the Fashion-MNIST IDX files"; \
	else \
		echo "warning: no apt-get here; pass --data-root DIR holding the Fashion-MNIST IDX files"; \
	fi

run: setup data
	$(BIN)/python run_sim.py --config configs/fmnist_default.toml --overwrite
	@echo "To run more (python run_sim.py --help), first: . $(VENV)/bin/activate"

# The suite on two pytest-xdist workers (PYTEST_WORKERS=0: one process): --dist loadfile, which
# tests/conftest.py refines: a module with a module-scoped fixture (a SuperLink, a reference run,
# a Ray cluster) whole on one worker, so it starts once, every other test on its own to whichever
# worker is free, those holding a test marked `slow` first, then the larger ones; then the tests
# marked `alone` (the deployment rehearsal, in tests/deploy: collecting that folder alone saves
# the whole suite's collection), whose rounds have deadlines that a second worker's Ray runs on 2
# cores could make them miss. The folders (tests/unit, integration, deploy, studies) and their figures:
# docs/development/testing.md.
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS)

test: setup data
	$(PYTEST) --dist loadfile -m "not alone"
	$(BIN)/python -m pytest -q -m alone tests/deploy

# The documentation site from docs/ (mkdocs.yml), served at http://127.0.0.1:8000 while it runs;
# with Debian's Chromium, which scripts/check_site.py (and the suite's test of it) opens every page in.
docs: setup browser
	$(BIN)/mkdocs serve

browser:
	@if command -v chromium >/dev/null; then exit 0; fi; \
	if command -v apt-get >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium \
		|| echo "warning: could not install chromium; scripts/check_site.py and its test need it"; \
	else \
		echo "warning: no apt-get here; install Chromium for scripts/check_site.py and its test"; \
	fi

# tests/unit alone (no Ray, no subprocess, no Flower runtime), test by test on the workers: the
# quick check before a commit, under 2 minutes on 2 cores.
test-fast: setup data
	$(PYTEST) tests/unit
