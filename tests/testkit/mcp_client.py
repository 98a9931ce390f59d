"""The official MCP SDK's client (`mcp.Client` over its Streamable HTTP transport) against a
running agent, in either protocol era, with a bearer token; and the raw JSON-RPC the
handshake-era revisions speak, for what the SDK client cannot be made to send.

    mcp_token(stack, user)   a dev token for the agent's MCP resource (RFC 8707)
    connect(url, token, …)   an entered `mcp.Client`: mode "2026-07-28" (no initialize) or
                             "legacy" (the initialize handshake, 2025-11-25)
    Confirm(answer)          an elicitation callback answering every form with `confirm`
    rpc(url, token, …)       one raw JSON-RPC POST (any protocol version header)
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from testkit.stack import Stack

MCP_PATH = "/api/agent/mcp"
MODERN = "2026-07-28"
_ids = itertools.count(1)


def mcp_url(stack: Stack, agent: int = 0) -> str:
    return stack.agents[agent].url + MCP_PATH


def mcp_token(stack: Stack, user: str, roles: list[str] | None = None, *, agent: int = 0,
              **mint: Any) -> str:
    """`mint`: the dev issuer's other arguments (lifetime_s, now, extra claims)."""
    extra = {"aud": mcp_url(stack, agent), **mint.pop("extra", {})}
    return stack.token(user, roles, extra=extra, **mint)


class Confirm:
    """An elicitation callback: every form answered `action` (accept with `confirm`)."""

    def __init__(self, action: str = "accept", confirm: bool = True) -> None:
        self.action = action
        self.confirm = confirm
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams,
                       ) -> types.ElicitResult:
        self.asked.append(params)
        content = {"confirm": self.confirm} if self.action == "accept" else None
        return types.ElicitResult(action=self.action, content=content)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def connect(url: str, token: str | None, *, mode: str = MODERN,
                  elicit: Callable[..., Awaitable[Any]] | None = None,
                  headers: dict[str, str] | None = None,
                  client_name: str = "testkit") -> AsyncIterator[Client]:
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(headers=sent, timeout=60) as http:
        transport = streamable_http_client(url, http_client=http)
        client = Client(transport, mode=mode, elicitation_callback=elicit, cache=None,
                        client_info=types.Implementation(name=client_name, version="1.2.3"))
        async with client:
            yield client


def rpc(url: str, token: str | None, method: str, params: dict[str, Any] | None = None, *,
        version: str = "2025-06-18", headers: dict[str, str] | None = None,
        timeout: float = 60) -> httpx.Response:
    """One JSON-RPC request as a handshake-era (or any) client sends it."""
    sent = {"Accept": "application/json, text/event-stream",
            "Content-Type": "application/json", "MCP-Protocol-Version": version,
            **(headers or {})}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
    if params is not None:
        body["params"] = params
    return httpx.post(url, json=body, headers=sent, timeout=timeout)
