# Every target installs what it needs, so a fresh clone needs only `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
BASE   := $(VENV)/.installed-base
DEV    := $(VENV)/.installed-dev
UI     := $(VENV)/.installed-ui
DOCS   := $(VENV)/.installed-docs

.PHONY: demo ui docs test test-quick lint bench bench-quick bench-peers reliability system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,ui,temporal,docs]'
	touch $@ $(BASE) $(UI) $(DOCS)

$(UI): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[ui]'
	touch $@ $(BASE)

$(DOCS): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@ $(BASE)

demo: $(BASE)
	$(BIN)/zincir demo

ui: $(UI)
	$(BIN)/zincir ui

# The documentation site (mkdocs.yml, docs/) into ./site; --strict fails on a page, link or
# API reference that does not resolve. `mkdocs serve` serves it while you edit.
docs: $(DOCS)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

system-deps:
	@scripts/install-system-deps.sh

lint: $(DEV)
	$(BIN)/ruff check src tests examples benchmarks reliability deploy
	$(BIN)/ruff format --check src tests examples benchmarks reliability deploy
	$(BIN)/mypy

# The suite waits on servers and child processes as much as it computes: one worker per CPU
# (at most four, each with its own PostgreSQL and Temporal servers) halves its time.
TEST_WORKERS ?= $(shell n=$$(nproc); [ $$n -gt 4 ] && n=4; echo $$n)

test: $(DEV) system-deps lint docs
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

# The edit loop: no root, no browser, no Temporal server, SQLite only (`make test` runs
# everything, every store test on PostgreSQL too).
test-quick: $(DEV)
	ZINCIR_TEST_BACKENDS=sqlite $(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not browser and not temporal"

# The long-run section stores the same conversation on LangGraph's SqliteSaver in the peers'
# venv and plots both (docs/operations/performance/long-run.png, with matplotlib installed into the venv for it).
# The run's figures go to benchmarks/results.json and from there into the table of
# docs/operations/performance/index.md (benchmarks/docs_table.py).
bench: $(DEV) .venv-peers/.installed
	$(BIN)/python -m pip install --quiet matplotlib
	$(BIN)/python benchmarks/run.py --temporal --json benchmarks/results.json
	$(BIN)/python benchmarks/docs_table.py benchmarks/results.json

# Instructions per step, agent turn and LangGraph super-step under valgrind's callgrind
# (about 10 minutes): the figure to judge a change to zincir's own code by, where
# wall-clock figures drift.
.PHONY: bench-instructions
bench-instructions: $(DEV) .venv-peers/.installed
	@command -v valgrind >/dev/null || { echo "valgrind is needed: apt-get install valgrind"; exit 1; }
	$(BIN)/python benchmarks/instructions.py

bench-quick: $(DEV)
	$(BIN)/python benchmarks/run.py --quick

# The long-horizon recovery benchmark: a task killed with SIGKILL at seeded points and
# restarted, per durability, context strategy and verification policy; rewrites
# docs/operations/performance/recovery.md and its plots (matplotlib is installed into the venv for them); the
# same task on LangGraph and DBOS runs in the peers' venv.
.PHONY: bench-recovery
bench-recovery: $(DEV) .venv-peers/.installed
	$(BIN)/python -m pip install --quiet matplotlib
	$(BIN)/python -m benchmarks.recovery.run

# Every fault-injection scenario at full counts; rewrites RELIABILITY.md (`make test` runs
# the same scenarios at short counts).
reliability: $(DEV) system-deps
	$(BIN)/python -m reliability --write RELIABILITY.md

# The peers run in a virtualenv of their own, at the versions the reference figures used.
.venv-peers/.installed:
	$(PYTHON) -m venv .venv-peers
	.venv-peers/bin/python -m pip install --quiet dbos==3.4.0 langgraph==1.2.24 \
	    langgraph-checkpoint==4.3.2 langgraph-checkpoint-sqlite==3.1.2 \
	    'pydantic-ai-slim[dbos]==2.68.0'
	touch $@

bench-peers: $(DEV) .venv-peers/.installed
	$(BIN)/python -m pip install --quiet matplotlib
	$(BIN)/python benchmarks/run.py --peers --temporal --json benchmarks/results.json
	$(BIN)/python benchmarks/docs_table.py benchmarks/results.json

clean:
	rm -rf $(VENV) .venv-peers output site zincir.db zincir.db-wal zincir.db-shm test-artifacts
