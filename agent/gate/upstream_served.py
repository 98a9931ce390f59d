"""What an upstream MCP server serves, against what the catalog pinned: its `tools/list` read
whole (every page), each tool's definition as the pin covers it, and the catalog tools it no
longer matches (`Drift`). The pin watcher (agent/gate/upstream_pins.py) and the CLI's
`agentchat mcp pin | check` (agent/gate/upstream_review.py) read a server the same way, so a
pin the CLI prints is the pin the agent checks.

A server is read through a session (`Opener`: agent/gate/upstream_client.py opens one with
the upstream's URL for an environment and our credential for it). Anything that keeps a list
from being read (a connection error, a timeout, an MCP error) is `Unreachable`: never a
drift, since an unreadable list says nothing about a definition. A list past the client's
page cap is cut there: a tool beyond it looks gone, and is quarantined (fail closed).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from mcp import Client
from mcp.client.subscriptions import Subscription, SubscriptionLost
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentchat.agent.gate.upstream_client import UpstreamSession
from agentchat.catalog import Catalog, Tool
from agentchat.catalog_upstreams import definition_pin, pinned_definition
from agentchat.errors import LocalError

# Opens a session to (server, environment); entering it connects, leaving it closes.
Opener = Callable[[str, str], AbstractAsyncContextManager[UpstreamSession]]


class Unreachable(LocalError):
    """An upstream's tools/list could not be read whole: why, in a line (never a secret)."""


@dataclass(frozen=True)
class Drift:
    """A catalog tool whose pinned definition the server does not serve in `env`."""

    name: str  # the catalog's name (`superset__list_dashboards`)
    server: str
    tool: str  # its name on the server
    pin: str
    env: str
    observed: str | None  # the served definition's pin; None: the tool is gone
    definition: dict[str, Any] | None  # the served definition's pinned fields

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.server, self.tool, self.pin)


def upstream_tools(catalog: Catalog) -> dict[str, list[Tool]]:
    """The catalog's upstream tools by server, in the catalog's order."""
    out: dict[str, list[Tool]] = {}
    for t in catalog.tools:
        if t.upstream is not None:
            out.setdefault(t.upstream.server, []).append(t)
    return out


async def list_served(opener: Opener, server: str, env: str,
                      timeout_s: float) -> dict[str, dict[str, Any]]:
    """One environment's whole list, within `timeout_s`; Unreachable otherwise."""
    try:
        async with asyncio.timeout(timeout_s):
            async with opener(server, env) as session:
                return {t["name"]: pinned_definition(t) for t in await session.list_tools()}
    except Unreachable:
        raise
    except TimeoutError:
        raise Unreachable(f"no whole tools/list within {timeout_s:g} s") from None
    except Exception as e:  # the transport's, the SDK's, an MCP error: all unreadable
        raise Unreachable(f"{type(e).__name__}: {str(e)[:200]}") from None


def drifts(tools: list[Tool], env: str, served: dict[str, dict[str, Any]]) -> list[Drift]:
    """The tools (one server's) whose pin `served` (that server's list in `env`) fails."""
    out = []
    for t in tools:
        ref = t.upstream
        assert ref is not None
        got = served.get(ref.tool)
        observed = definition_pin(got) if got is not None else None
        if observed != ref.pin:
            out.append(Drift(t.name, ref.server, ref.tool, ref.pin, env, observed, got))
    return out


@contextlib.asynccontextmanager
async def _changes(client: Client) -> AsyncIterator[Subscription | None]:
    """The server's tools/list_changed events on this session, or None when it has none to
    give: a handshake-era session has no `subscriptions/listen` (on a stateless server no
    stream to send them on either), and a server that does not declare `tools.listChanged`
    never sends them."""
    tools = client.server_capabilities.tools
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS or not (tools and
                                                                       tools.list_changed):
        yield None
        return
    async with client.listen(tools_list_changed=True) as sub:
        yield sub


async def watch_changes(opener: Opener, server: str, env: str,
                        changed: Callable[[], Awaitable[None]]) -> bool:
    """Call `changed` at each tools/list_changed the server sends on one session, until the
    stream ends (True: it was open) or the session cannot carry one (False). A stream does
    not replay what changed while none was open: the timer's refresh finds that."""
    async with opener(server, env) as session, _changes(session.client) as events:
        if events is None:
            return False
        try:
            async for _ in events:
                await changed()
        except SubscriptionLost:
            pass
        return True
