# The four jobs of this repository. Every target bootstraps .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
## The CLI keeps its bytecode under .venv/pycache (PYTHONPYCACHEPREFIX), never beside the source: with
## PYTHONDONTWRITEBYTECODE every command recompiled each module it imports (~100 ms of `make materialize`).
MAT := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache $(VENV)/bin/materialize
SERIES ?= series/default.yaml
PROFILE ?= prod
## Tests and the offline suite: nothing may leave a __pycache__ anywhere (a source tree's once broke a deployment).
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: materialize test test-unit test-differential test-offline test-offline-tip test-mutation lint serve serve-check bench bisect report clean venv

## Everything the tests need (every extra, Ray's `fleet` and the dev tools); `make materialize` needs less.
## The editable install is setuptools' compat mode, a plain path .pth: the default (strict) mode
## installs an import finder that costs ~35 ms at every start-up. The stamps carry the mode's name, so
## a venv made before it is reinstalled once.
EDITABLE := --config-settings editable_mode=compat
venv: $(VENV)/.stamp-compat
$(VENV)/.stamp-compat: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check $(EDITABLE) -e '.[offline,serve,bisect,report,fleet,dev,report-test]'
	touch $@ $(VENV)/.stamp-core-compat
$(VENV)/.stamp-core-compat: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check $(EDITABLE) -e .
	touch $@

## Apply the shipped series to the pinned trees; prints the per-patch report and the materialization id.
materialize: $(VENV)/.stamp-core-compat
	$(MAT) apply --series $(SERIES)

## Everything CI runs: lint, the tool's own tests, the offline per-patch suite, serve profile checks.
test: venv lint test-unit test-offline serve-check

lint: venv
	$(VENV)/bin/ruff check materialize ast_tests tests bench

test-unit: venv
	$(PY) -m pytest -q tests

## Real Debian quilt series (small packages, sources cached after the first run) vs `quilt push -a`.
test-differential: venv
	MATERIALIZE_DIFFERENTIAL=1 $(PY) -m pytest -q tests/differential

## Each patch's offline tests at its position: patched must pass, control (without the patch) must fail.
test-offline: venv
	$(PY) -m materialize test-offline --series $(SERIES)

## The same tests re-run on the full series: a later patch that breaks an earlier one is named.
test-offline-tip: venv
	$(PY) -m materialize test-offline --series $(SERIES) --at tip

## Revert each changed block of each patch; which offline tests kill it, by assertion or by error (slow: ~30 min).
test-mutation: venv
	$(PY) -m materialize.offline.mutation --series $(SERIES)

serve-check: venv
	$(MAT) serve check

## Launch a serving profile from the materialized source (needs Tenstorrent devices; fails closed without).
serve: venv
	$(MAT) serve up $(PROFILE)

bench: venv
	$(PY) bench/run_all.py

bisect: venv
	$(MAT) bisect status

## A static HTML page of the series (patches, evidence, bisect, serving plans): build/report/index.html.
report: venv
	$(MAT) report --series $(SERIES) -o build/report

clean:
	rm -rf build work
