"""A stored MCP call's page (`/api/agent/ui/calls/{call_id}`, the `approve_url` of a call its
requester answers; docs/protocol.md §12) in headless Chromium against the real stack
(call.test.mjs): an MCP client without elicitation asks for an ss-dev deploy, the call waits;
another user's page learns nothing; the requester confirms on the page; the deploy runs once
and `agentchat_call_result` tells the client it is done.

Debian's /usr/bin/chromium through playwright-core (tests/js/node_modules, `make js`); without
a browser the test skips and says why, except under CI=true, where that is a failure.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from agentchat.settings import PACKAGE_DATA
from testkit.browser import require_browser
from testkit.mcp_client import connect, mcp_token, mcp_url
from testkit.stack import Stack, stack_on_own_database
from testkit.support import ROOT

HERE = Path(__file__).resolve().parent
DEPLOY = {"dashboard_id": 42, "env_id": "ss-dev"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    require_browser("the call page's browser test")
    assert (ROOT / "web" / "build" / "index.html").is_file(), "run `make web`"
    with stack_on_own_database(pg_server, migrated_template, tmp_path_factory.mktemp("call"),
                               policy_env={"AGENTCHAT_POLICY_DIR": str(PACKAGE_DATA / "policy")}
                               ) as s:
        yield s


def _call(stack: Stack, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """One tools/call as alice's MCP client (no elicitation), its structuredContent."""
    async def go() -> dict[str, Any]:
        async with connect(mcp_url(stack), mcp_token(stack, "alice")) as client:
            out = await client.call_tool(name, args)
            assert out.is_error is False, out.structured_content
            return dict(out.structured_content or {})

    return asyncio.run(go())


def _deploys(stack: Stack) -> list[dict[str, Any]]:
    return [a for a in stack.audit(operation="deploy_dashboard")
            if a["env"] == "ss-dev" and a["outcome"] in ("ok", "replayed")]


def test_the_requester_confirms_on_the_call_page(stack: Stack, tmp_path: Path) -> None:
    pending = _call(stack, "deploy_dashboard", DEPLOY)
    assert pending["status"] == "confirmation_required", pending
    path = urlsplit(pending["approve_url"]).path
    assert path == "/api/agent/ui/calls/" + pending["call_id"]
    page = httpx.get(stack.agent.url + path, timeout=30)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    # Anything else under calls/ is an unknown path.
    assert httpx.get(stack.agent.url + "/api/agent/ui/calls/nope", timeout=30).status_code == 404
    assert _deploys(stack) == []

    node = shutil.which("node")
    assert node, "Node 20 is required for the browser tests"
    env = {**stack.node_env(), "CHROMIUM": str(require_browser("the browser tests")),
           "PAGE_SHOTS": str(tmp_path / "screenshots"),
           "CALL_URL": stack.agent.url + path,
           "CALL_PROMPT": pending["prompt"]}
    out = subprocess.run([node, "--test", "--test-force-exit", "--test-reporter=spec",
                          "call.test.mjs"], cwd=HERE, env=env, capture_output=True, text=True,
                         timeout=240)
    print(out.stdout[-20000:], out.stderr[-5000:])
    assert out.returncode == 0, "call.test.mjs failed (output above)"

    deadline = time.monotonic() + 30
    while (status := _call(stack, "agentchat_call_result", {"call_id": pending["call_id"]})
           )["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status["status"] == "done", status
    assert len(_deploys(stack)) == 1
