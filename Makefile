# biosrecall: the two set-up commands (`make demo`, `make test`) each build their own virtual environment.
# torch is pinned to the CPU build first: an unpinned torch would pull a multi-GB CUDA build.

VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0

# torch comes from pip (which finds the CPU build); the project and its extras from uv, which resolves
# and downloads them in parallel (40 s against pip's 150 s for every extra on a 2-core machine), and
# compiles their bytecode as pip does (without it, where Python may not cache bytecode, every process
# would compile pandas and transformers anew). uv keeps the installed torch, which satisfies the
# project's range. Where uv cannot be had or fails, pip installs the same requirements, only slower.
# EXTRAS: the extras of each target, set beside it.
define install
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet uv && $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) -e '.[$(EXTRAS)]' \
		|| $(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
endef

.PHONY: demo test test-fast lint format bench docs clean

$(VENV)/.installed: EXTRAS = dev
$(VENV)/.installed: pyproject.toml
	$(install)
	touch $@

# The optional extras (transformers, lm-eval, trackers, datasets) and the docs tools: every test runs
# with them installed (tests/test_docs.py builds the site), in one resolution: a fresh `make test` is
# the CI path.
$(VENV)/.extras: EXTRAS = dev,all,docs
$(VENV)/.extras: pyproject.toml
	$(install)
	touch $(VENV)/.installed $(VENV)/.bench $@

# The benchmarks' peer: bench_step.py trains a GPT-2 with transformers.Trainer (transformers,
# accelerate, datasets) beside the package's own update, so `make bench` installs those extras.
$(VENV)/.bench: EXTRAS = dev,hf,datasets
$(VENV)/.bench: $(VENV)/.installed
	$(install)
	touch $@

$(VENV)/.docs: EXTRAS = docs
$(VENV)/.docs: $(VENV)/.installed
	$(install)
	touch $@

venv: $(VENV)/.installed

## The main job on a small default: the whole Figure-1 study at its quick size (dataset, three
## schedules at one budget, recall to K=64, serving, plot, claims), each step printed as it goes.
demo: $(VENV)/.installed
	$(VENV)/bin/biosrecall figure1 --preset quick --out runs/demo

## Lint, format check, then every test (slow ones included), with every optional extra installed.
## Two workers (pytest-xdist), each test file on one of them so its module fixtures are built once:
## the tests run single-threaded (tests/conftest.py), so two use both cores of a laptop-class machine.
## The multi-process (gloo) tests run afterwards on their own: on an oversubscribed CPU a gloo rank
## can be starved long enough to hang its peer.
## The suite starts hundreds of Python processes: where the environment forbids bytecode caches
## (PYTHONDONTWRITEBYTECODE), each would compile the package, and pytest rewrite the test modules, anew.
test: $(VENV)/.extras
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -n 2 --dist loadfile -m "not distributed" --durations=25
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -m distributed

## Everyday loop while developing: skip tests marked slow.
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -m "not slow"

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## Every benchmark under benchmarks/, one table of side-by-side ratios (with the Hugging Face peer).
bench: $(VENV)/.bench
	$(PY) benchmarks/run_all.py

## The documentation site into site/, in strict mode: a broken link, a missing page or a failing
## reference (CLI or API) fails the build.
docs: $(VENV)/.docs
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache
