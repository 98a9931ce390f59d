"""The frontend contract through the real `@gradio/client` (npm) under Node 20.

The Node tests live in tests/js/*.test.mjs; this module starts the system for them (a normal
agent, a slow one paced like a real model for cancel tests, and one whose LLM endpoint is
down) and runs `node --test`, so `make test` covers them.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from testkit.stack import CLIENT_SECRET, Stack, catalog_with_timeouts, stack_on_own_database
from testkit.support import ROOT, free_port

JS = ROOT / "tests" / "js"


@pytest.fixture(scope="module")
def js_stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
             migrated_template: str) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("js")
    # superset_explore_database times out after 2 s here (the timeout test).
    catalog = catalog_with_timeouts(tmp, {"superset_explore_database": 2})
    with stack_on_own_database(pg_server, migrated_template, tmp, catalog_path=catalog) as s:
        s.start_agents(
            # agents[1]: paced like a real model, for cancel and multi-tab tests
            {"AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": "0.05"},
            # agents[2]: a model endpoint that refuses connections
            {"AGENTCHAT_AGENT_LLM": "openai:gpt-4o-mini",
             "AGENTCHAT_AGENT_LLM_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
             "AGENTCHAT_AGENT_LLM_API_KEY": "unused", "AGENTCHAT_AGENT_LLM_TIMEOUT_S": "3"},
            # agents[3]: short card TTL and lease, for expiry and card-outlives-lease tests
            {"AGENTCHAT_AGENT_CONFIRMATION_TTL_S": "3", "AGENTCHAT_AGENT_TUNING__LEASE_S": "1"})
        yield s


def run_node(stack: Stack, *files: str) -> None:
    if not (JS / "node_modules" / "@gradio" / "client").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS,
                       check=True)
    env = stack.node_env()
    env.update(
        SLOW_GRADIO_URL=stack.agents[1].url + "/api/agent/gradio/",
        LLM_DOWN_GRADIO_URL=stack.agents[2].url + "/api/agent/gradio/",
        SHORT_GRADIO_URL=stack.agents[3].url + "/api/agent/gradio/",
        SANDBOX_CLIENT_SECRET=CLIENT_SECRET,
        TOKEN_EXPIRED=stack.token("alice", lifetime_s=-600, now=time.time() - 1200),
    )
    node = shutil.which("node")
    assert node, "Node 20 is required for the frontend-contract tests"
    # --test-force-exit: the client keeps its event streams open after the last test.
    out = subprocess.run([node, "--test", "--test-force-exit", "--test-reporter=spec", *files],
                         cwd=JS, env=env, capture_output=True, text=True, timeout=600)
    print(out.stdout[-20000:])
    print(out.stderr[-5000:])
    assert out.returncode == 0, "Node tests failed (output above)"


def test_chat_contract(js_stack: Stack) -> None:
    run_node(js_stack, "chat.test.mjs")


def test_human_in_the_loop(js_stack: Stack) -> None:
    run_node(js_stack, "hitl.test.mjs")


def test_uploads(js_stack: Stack) -> None:
    run_node(js_stack, "upload.test.mjs")


def test_rejoin_after_the_tab_is_killed(js_stack: Stack) -> None:
    run_node(js_stack, "rejoin.test.mjs")
