# Two entry points for a person on a fresh machine (see README.md):
#   make main   installs everything into .venv and runs the main job on the embedded defaults
#   make test   installs everything into .venv and runs every notebook's tests plus tests/ under pytest
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kgqa_installed
export KGQA_DATA ?= $(abspath ../shared/data)
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install main report test export clean-nbs bench docs readme

$(STAMP): setup.py settings.ini scripts/install_llm.sh scripts/smoke_llm.py scripts/install_engines.sh scripts/install_browser.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, from its CPU wheel, then pinned so that no later install pulls a CUDA build
	$(BIN)/python -m pip install -q torch==2.13.0
	echo 'torch==2.13.0' > $(VENV)/constraints.txt
	$(BIN)/python -m pip install -q -c $(VENV)/constraints.txt -e '.[dev,kge]'
	bash scripts/install_llm.sh $(BIN)/python
	bash scripts/install_engines.sh
	bash scripts/install_browser.sh
	touch $(STAMP)

install: $(STAMP)

export: install
	$(BIN)/nbdev_export

# The main job: CodeAlignKGQA (`single_call_paths`: retrieved demonstrations that fit the question's structure first,
# no extracted facts, KG-level grammar, one LLM call; when its answer is empty, of the wrong kind or leaves out a linked
# entity, the relation path from the linked entity that reads most like the question, ended as the wording asks: the
# best measured on the natural-wording dev set, see outputs/generalization.json) on the demo KQA Pro benchmark with the
# local Qwen2.5-Coder-1.5B (24 questions, timed on a fresh clone: see README). It writes into the git-ignored $(MAIN_DIR),
# never into the committed outputs/, and ends with this run's accuracy and SER next to the committed reference run's.
# Resumable: rerunning skips finished questions. `make main MAIN_N=12` answers fewer questions. Its whole output is also
# in $(MAIN_DIR)/papermill.log; when it fails, scripts/main_failed.sh says why in one line (a dead kernel: smoke run).
MAIN_N ?= 24
MAIN_DIR ?= runs/main
# papermill streams the notebook's output (the per-question bar, the final figures) instead of its cell counter;
# its per-cell markers and the kernel's TCP-transport warning are dropped (papermill starts the kernel on 127.0.0.1)
PAPERMILL_QUIET := --log-output --no-progress-bar
PAPERMILL_NOISE := 'Kernel is running over TCP without encryption|^(Executing|Ending) Cell|IProgress not found|from .autonotebook import tqdm'
main: export
	mkdir -p $(MAIN_DIR)
	set -o pipefail; PATH=$(abspath $(BIN)):$$PATH $(BIN)/papermill --cwd nbs/experiments $(PAPERMILL_QUIET) \
	  nbs/experiments/run_kqapro.ipynb $(MAIN_DIR)/run_kqapro.ipynb -p n_questions $(MAIN_N) \
	  -p out_dir ../../$(MAIN_DIR)/run_kqapro -p reference ../../outputs/run_kqapro/metrics.json 2>&1 \
	  | tee $(MAIN_DIR)/papermill.log | grep -v -E $(PAPERMILL_NOISE) \
	  || bash scripts/main_failed.sh $(MAIN_DIR)/papermill.log $(BIN)/python

# The results page outputs/README.md, regenerated from the committed outputs (maintainers, after a measurement).
report: export
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/papermill --cwd nbs/experiments nbs/experiments/report.ipynb outputs/report.ipynb

# The executor benchmark (ours vs `kopl` vs `kopl-engine`), kept out of the main job.
bench: export
	mkdir -p outputs
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/papermill --cwd nbs/experiments nbs/experiments/bench_executor.ipynb \
	  outputs/bench_executor.ipynb -p quick False

# The documentation site, what `nbdev_docs` builds, without quarto (which cannot be installed here): nbdev's own
# processing of every notebook in nbs/ and nbs/experiments/ (show_doc cells inserted and executed for every exported
# name; the numbered component notebooks' examples run the way nbdev_test runs them, so they show their outputs;
# experiment notebooks are rendered as committed, never executed), then MkDocs + mkdocs-material + mkdocs-jupyter render
# it to static HTML in the git-ignored _docs/ (intermediate files in _proc/). MkDocs rather than bare nbconvert pages:
# its sidebar, page tables of contents and search (material's offline plugin: works from file://) come without writing a
# theme, and all of it installs from PyPI wheels and builds offline. Open _docs/index.html; scripts/build_docs.py says
# more. `make docs DOCS_ARGS=--no-examples` skips running the examples (show_doc signatures only; faster).
DOCS_ARGS ?=
docs: export
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python scripts/build_docs.py $(DOCS_ARGS)

# README.md is generated from nbs/index.ipynb (the home page of the site, settings.ini readme_nb): edit the notebook's
# markdown cells, then run `make readme`. tests/test_docs.py fails when README.md is not that export.
readme:
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) scripts/build_docs.py --readme

test: install
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest tests -q -p no:cacheprovider

clean-nbs: install
	$(BIN)/nbdev_clean
