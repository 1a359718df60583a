# Attention, from scratch: the two commands a newcomer needs are `make book` and `make test`.
# Everything runs inside .venv, created from the pinned requirements.txt.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
VENDOR := assets/vendor
BOOK_HTML := _build/html/index.html
# The Jupyter kernel of .venv, registered inside it by `make venv`; `make lab`, `make execute`
# and nbval run the chapters with it (tools/notebooks.py holds the same name).
KERNEL := attnbook
KERNEL_DISPLAY := Python (attnbook)
# `make book HIDE_SOLUTIONS=1` builds the instructors' edition without solutions.
HIDE_SOLUTIONS ?= 0
export ATTNBOOK_HIDE_SOLUTIONS := $(HIDE_SOLUTIONS)

.DEFAULT_GOAL := help
.PHONY: help venv lab assets book student pdf test execute lint format lock sync-url clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

venv: $(STAMP) ## create .venv with the pinned dependencies and attnbook (editable)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed (for the pinned requirements), found " + sys.version.split()[0])'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation --editable .
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "$(KERNEL_DISPLAY)" >/dev/null
	@touch $@

# More options for JupyterLab: on a machine without a desktop or a browser (a server, a
# container), `make lab LAB_ARGS="--no-browser --ip=127.0.0.1"` and open the URL it prints.
# As root (a container), --allow-root is added: JupyterLab refuses to start as root without it.
LAB_ARGS ?=
LAB_ROOT = $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
lab: venv ## open the chapters in JupyterLab (LAB_ARGS="--no-browser --ip=127.0.0.1" on a server)
	$(BIN)/jupyter lab --KernelSpecManager.allowed_kernelspecs=$(KERNEL) \
		--MultiKernelManager.default_kernel_name=$(KERNEL) $(LAB_ROOT) $(LAB_ARGS)

# The parts of MathJax 3 (node_modules/mathjax/es5, 24 MB) that the pages can request, relative
# to es5/; nothing else is copied. The pages load tex-mml-chtml.js (_ext/attnbook_book.py), which
# fetches on demand: the CHTML fonts a formula needs (woff-v2), a TeX extension for a macro
# outside its core (input/tex/extensions, by autoload), and what its context menu offers: the
# accessibility tools (a11y/, with the speech rules of English and Nemeth braille in
# sre/mathmaps/) and the SVG renderer (output/svg*). The browser test fails on any 404.
MATHJAX_PARTS := tex-mml-chtml.js output/chtml/fonts/woff-v2 input/tex/extensions a11y \
	sre/mathmaps/base.json sre/mathmaps/en.json sre/mathmaps/nemeth.json \
	output/svg.js output/svg/fonts

assets: $(VENDOR)/.stamp ## install MathJax, require.js, d3, jQuery, Noto Emoji (offline pages) and axe-core (tests) from npm

$(VENDOR)/.stamp: package.json package-lock.json Makefile
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --no-audit --no-fund --loglevel=error && \
		rm -rf $(VENDOR) && mkdir -p $(VENDOR) && \
		for part in $(MATHJAX_PARTS); do \
			mkdir -p $$(dirname $(VENDOR)/mathjax/$$part) && \
			cp -R node_modules/mathjax/es5/$$part $(VENDOR)/mathjax/$$part || exit 1; \
		done && \
		cp node_modules/mathjax/LICENSE $(VENDOR)/mathjax/LICENSE && \
		cp node_modules/requirejs/require.js $(VENDOR)/require.js && \
		cp node_modules/d3/dist/d3.min.js $(VENDOR)/d3.min.js && \
		cp node_modules/jquery/dist/jquery.min.js $(VENDOR)/jquery.min.js && \
		cp node_modules/axe-core/axe.min.js $(VENDOR)/axe.min.js && \
		mkdir -p $(VENDOR)/noto-emoji && \
		cp node_modules/@fontsource/noto-emoji/files/noto-emoji-*-400-normal.woff2 \
			node_modules/@fontsource/noto-emoji/LICENSE $(VENDOR)/noto-emoji/ && \
		sed -e 's|\./files/||' -e 's|, url([^)]*\.woff) format(.woff.)||' \
			node_modules/@fontsource/noto-emoji/400.css > $(VENDOR)/noto-emoji/noto-emoji.css && \
		touch $@; \
	else \
		echo "npm not found: the book will load MathJax from its CDN and will not render offline."; \
	fi

book: venv assets ## build the HTML book (warnings are errors) and print where it is
	@$(PY) -m tools.sync_repo_url --notice
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	@echo "The book: file://$(CURDIR)/$(BOOK_HTML)"

# `make student` refuses to build while _config.yml has the placeholder URL (owner your-org);
# `make student ALLOW_PLACEHOLDER_URL=1` builds anyway (the tests and CI of this repository).
ALLOW_PLACEHOLDER_URL ?= 0
student: venv assets ## the student edition in _build/student/: notebooks without solutions, a zip, the book
	$(PY) -m tools.make_student $(if $(filter 1,$(ALLOW_PLACEHOLDER_URL)),--allow-placeholder-url)

pdf: venv assets ## the book as one PDF, printed by Chromium (no TeX), checked: _build/pdf/
	$(BIN)/jupyter-book build . --builder singlehtml --warningiserror --nitpick --keep-going
	$(PY) -m tools.build_pdf

test: venv assets ## lint, unit tests, nbval on every chapter, book build, browser test; one summary
	$(PY) -m tools.run_tests

execute: venv ## re-run every chapter notebook in place, top to bottom, in a fresh kernel
	$(PY) -m tools.execute_notebooks chapters/*.ipynb

lint: venv ## ruff check and ruff format --check (notebooks included)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# sync_repo_url rewrites pyproject.toml's Homepage, which .venv's stamp depends on: the
# package's metadata is refreshed here (no dependency changed), and the stamp touched, so
# that the next `make` does not reinstall every requirement.
sync-url: venv ## copy the repository URL from _config.yml to every place that shows it
	$(PY) -m tools.sync_repo_url
	$(PY) -m tools.exercise_inventory --write  # the instructor guide's copy of the Colab cell
	$(PY) -m pip install --quiet --no-deps --no-build-isolation --editable .
	@touch $(STAMP)

lock: ## re-resolve requirements.in into requirements.txt in a throw-away environment
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -r requirements.in
	{ sed -n '1,/^$$/p' requirements.txt; .lock-venv/bin/pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$$/torch==\1/'; } > requirements.txt.new
	mv requirements.txt.new requirements.txt && rm -rf .lock-venv

clean: ## remove the build, caches and vendored front-end files (keeps .venv)
	rm -rf _build $(VENDOR) node_modules .pytest_cache .ruff_cache .test-reports .hypothesis
