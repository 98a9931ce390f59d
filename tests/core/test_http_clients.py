"""Every outbound HTTP client of the product keeps no cookie (agentchat/http_clients.py,
docs/protocol.md §7): a real server sets one on every answer and echoes the `Cookie` it got;
the second request of each client carries none. The agent's shared client (ss-tools, the
sidecar, the webhook, the service token, the llm-status probe) is driven through the running
agent in tests/system/test_cross_site.py; here the model's and the embeddings' clients, as
the product builds them, and a scan that no product module builds a client any other way.
"""

from __future__ import annotations

import ast
import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentchat.agent.graph.model import make_llm
from agentchat.agent.selection.embeddings import OpenAIEmbedder
from agentchat.agent.settings import AgentSettings
from agentchat.http_clients import async_client, sync_client

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "agentchat", "policy", "operator")


class CookieServer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"cookie": self.headers.get("Cookie")}).encode()
        self.send_response(200)
        self.send_header("Set-Cookie", "session=alice.secret; Path=/; HttpOnly")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), CookieServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _twice_sync(client: httpx.Client, url: str) -> list[str | None]:
    got = [client.get(url) for _ in range(2)]
    assert got[0].cookies.get("session") == "alice.secret"  # the server did set one
    return [r.json()["cookie"] for r in got]


async def _twice_async(client: httpx.AsyncClient, url: str) -> list[str | None]:
    got = [await client.get(url) for _ in range(2)]
    assert got[0].cookies.get("session") == "alice.secret"
    return [r.json()["cookie"] for r in got]


def test_a_plain_httpx_client_would_send_it_back(url: str) -> None:
    """What the test guards against: httpx keeps a client's cookies by default."""
    with httpx.Client() as plain:
        assert _twice_sync(plain, url) == [None, "session=alice.secret"]


def test_the_helpers_clients_send_no_cookie(url: str) -> None:
    with sync_client() as client:
        assert _twice_sync(client, url) == [None, None]
        assert list(client.cookies.jar) == []

    async def go() -> list[str | None]:
        async with async_client() as client:
            return await _twice_async(client, url)
    assert asyncio.run(go()) == [None, None]


def test_the_models_clients_send_no_cookie(url: str) -> None:
    """langchain-openai's default clients are cached per endpoint and keep cookies; the
    agent gives ChatOpenAI its own (agent/graph/model.py)."""
    llm: Any = make_llm(AgentSettings(mode="dev", llm="openai:gpt-4o-mini", llm_api_key="k",
                                      llm_base_url=url + "v1"))
    assert _twice_sync(llm.root_client._client, url) == [None, None]
    assert asyncio.run(_twice_async(llm.root_async_client._client, url)) == [None, None]


def test_the_embeddings_client_sends_no_cookie(url: str) -> None:
    embedder = OpenAIEmbedder(url + "v1", "e5")
    assert _twice_sync(embedder._client._client, url) == [None, None]


def _constructions(path: Path) -> list[tuple[int, str]]:
    """httpx clients and `openai` SDK clients built in a module, by the name called."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name.split(".")[-1] in ("Client", "AsyncClient", "OpenAI", "AsyncOpenAI"):
            if not any(k.arg == "http_client" for k in node.keywords):
                out.append((node.lineno, name))
    return out


def test_no_product_module_builds_a_client_any_other_way() -> None:
    found = [f"{p.relative_to(ROOT)}:{line}: {name}" for top in PRODUCT
             for p in sorted((ROOT / top).rglob("*.py"))
             if p.name != "http_clients.py" for line, name in _constructions(p)]
    assert found == []
