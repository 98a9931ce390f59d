"""An MCP client session to another team's MCP server (the catalog's `upstreams`), for every
part of the agent that talks to one: a call (upstream_calls.py), the pins' tools/list, the
CLI.

    clients = UpstreamClients(credentials, max_result_bytes=…)
    async with clients.open(catalog, "superset", "prod", user="alice") as session:
        tools = await session.list_tools()          # [MCP Tool JSON, …], every page
        result = await session.call("list_dashboards", {"page": 1})

The URL is the catalog's for that environment, never anything a caller or a model wrote;
the Authorization header is our credential for the upstream (upstream_auth.py), never the
user's token. The official SDK's client speaks either era: the first session to a URL asks
(`server/discover`, else `initialize`), later ones reuse the answer. Every answer is read
through a meter that stops at a byte cap (the SDK reads a JSON answer whole, so its own SSE
event limit alone would not do), and the meter knows whether a `tools/call` left, which
tells "nothing ran" from "it may have run" when something fails. Whatever fails is
`UpstreamFailure` with a reason (docs/protocol.md §2): `upstream_unavailable`,
`upstream_error`, `result_too_large`, `upstream_not_configured`. Deadlines are the caller's
(`anyio.fail_after` around the session); the HTTP timeouts here are the upstream's
`timeout_s`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client as McpClient  # an MCP client; its HTTP one is ours (cookie-free)
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, PARSE_ERROR, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentchat.agent.gate.upstream_auth import UpstreamAuthError, UpstreamCredentials
from agentchat.catalog import Catalog
from agentchat.catalog_upstreams import Upstream
from agentchat.errors import ErrorCode, LocalError
from agentchat.http_clients import no_cookie_client

UNAVAILABLE = "upstream_unavailable"
ERROR = "upstream_error"
TOO_LARGE = "result_too_large"
NOT_CONFIGURED = "upstream_not_configured"
# Statuses a gateway or an overloaded server answers before any tool runs.
GATEWAY = {502, 503, 504}
# Errors the SDK makes up itself when no answer came (the connection closed, its own read
# timeout, a body it could not read): never the server's reply.
SYNTHESIZED = {CONNECTION_CLOSED, REQUEST_TIMEOUT, PARSE_ERROR}
LIST_PAGES = 100  # a paginator that never ends cannot hang a refresh
CLIENT = types.Implementation(name="agentchat", version="0.1.0")


class UpstreamFailure(LocalError):
    """`reason` as in the module's docstring, or `timeout`; `outcome`: `not_run` (the call
    never left, or was refused before it ran), `answered` (the server answered: an error, or
    an answer over the cap) or `unknown` (it left and no answer came: a write may have run)."""

    CODE = ErrorCode.TOOL_FAILURE

    def __init__(self, reason: str, detail: str, *, outcome: str = "not_run") -> None:
        super().__init__(detail)
        self.reason = reason
        self.outcome = outcome


class ResultTooLarge(LocalError, httpx2.StreamError):
    """An upstream's answer over the cap: on the wire (raised inside the SDK's read, where a
    StreamError becomes an error reply rather than a crash; the meter's flag says what it
    was) or as JSON once read (agent/gate/upstream_calls.py)."""

    CODE = ErrorCode.TOOL_FAILURE


class Meter(httpx2.AsyncBaseTransport):
    """One session's view of the shared connection pool: bytes read per answer (at most
    `cap`), whether a tools/call left and what it was answered."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, cap: int) -> None:
        self.inner = inner
        self.cap = cap
        self.exceeded = False
        self.call_sent = False
        self.call_status: int | None = None
        self.statuses: set[int] = set()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        # A redirected call's next POST is the call again (its body is a stream by then).
        redirected = self.call_status is not None and 300 <= self.call_status < 400
        is_call = request.method == "POST" and (redirected
                                                or _rpc_method(request) == "tools/call")
        if is_call:
            self.call_sent = True  # from here on, it may run
        response = await self.inner.handle_async_request(request)
        self.statuses.add(response.status_code)
        if is_call:
            self.call_status = response.status_code
        return httpx2.Response(status_code=response.status_code, headers=response.headers,
                               stream=_Capped(response.stream, self),
                               extensions=response.extensions)

    async def aclose(self) -> None:
        """The pool is shared: closing one session's client leaves it open."""


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, meter: Meter) -> None:
        self.inner = inner
        self.meter = meter

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.meter.cap:
                self.meter.exceeded = True
                raise ResultTooLarge(f"the answer is over {self.meter.cap} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def _rpc_method(request: httpx2.Request) -> str | None:
    try:
        body = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        return None
    return body.get("method") if isinstance(body, dict) else None


def url_for(catalog: Catalog, server: str, env: str | None) -> tuple[Upstream, str]:
    """The upstream and its URL for `env` (None: its only URL), from the catalog alone."""
    upstream = catalog.upstreams.get(server)
    if upstream is None:
        raise UpstreamFailure(NOT_CONFIGURED, f"the catalog names no upstream {server!r}")
    if env is None and len(upstream.url) == 1:
        return upstream, next(iter(upstream.url.values()))
    url = upstream.url.get(env or "")
    if url is None:
        raise UpstreamFailure(NOT_CONFIGURED, f"upstream {server!r} has no URL for "
                              f"environment {env!r}")
    return upstream, url


class UpstreamSession:
    def __init__(self, client: McpClient, meter: Meter) -> None:
        self.client = client
        self.meter = meter

    @property
    def protocol_version(self) -> str:
        return self.client.protocol_version

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the server lists, as MCP `Tool` JSON (what a pin is computed from)."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(LIST_PAGES):
            page = await self.client.list_tools(cursor=cursor, cache_mode="bypass")
            tools += [t.model_dump(by_alias=True, mode="json", exclude_none=True)
                      for t in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """One tools/call, sent once: not the SDK's `call_tool`, which may resend it (after a
        header mismatch, or for an input request) and lists the tools to check its output."""
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=tool, arguments=arguments))
        return await self.client.session.send_request(request, types.CallToolResult)


class UpstreamClients:
    """Sessions to upstreams over one connection pool, with our credentials and the cap."""

    def __init__(self, credentials: UpstreamCredentials, *, max_result_bytes: int) -> None:
        self.credentials = credentials
        # The JSON and its text copy (fastmcp sends both), and the envelope.
        self.wire_cap = 2 * max_result_bytes + 64 * 1024
        self._pool = httpx2.AsyncHTTPTransport(
            limits=httpx2.Limits(max_connections=100, max_keepalive_connections=20))
        self._eras: dict[str, str] = {}  # URL -> the mode that connected to it last

    async def aclose(self) -> None:
        await self._pool.aclose()

    @asynccontextmanager
    async def open(self, catalog: Catalog, server: str, env: str | None = None, *,
                   user: str | None = None) -> AsyncIterator[UpstreamSession]:
        """A session to `server`'s URL for `env`; `user`: the caller's id (a signed JWT's
        user claim). Raises UpstreamFailure."""
        upstream, url = url_for(catalog, server, env)
        try:
            headers = await self.credentials.headers(server, upstream.auth, user=user)
        except UpstreamAuthError as e:
            raise UpstreamFailure(e.reason, e.detail) from None
        meter = Meter(self._pool, self.wire_cap)
        timeout = httpx2.Timeout(upstream.timeout_s, connect=min(5.0, upstream.timeout_s))
        http = no_cookie_client(httpx2.AsyncClient, transport=meter, timeout=timeout,
                                headers={**headers, "User-Agent": "agentchat"})
        mode = self._eras.get(url, "auto")
        client = McpClient(streamable_http_client(url, http_client=http, max_sse_event_size=None),
                        mode=mode, cache=None, client_info=CLIENT,
                        read_timeout_seconds=upstream.timeout_s)
        try:
            async with http, client:
                self._eras[url] = (client.protocol_version if client.protocol_version
                                   in MODERN_PROTOCOL_VERSIONS else "legacy")
                yield UpstreamSession(client, meter)
        except UpstreamFailure:
            raise
        except Exception as e:
            self._eras.pop(url, None)  # ask again next time: the server may have changed
            failure = classify(e, meter)
            if 401 in meter.statuses:
                self.credentials.invalidate(server)  # a client-credentials token: anew
            raise failure from None


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def classify(exc: BaseException, meter: Meter) -> UpstreamFailure:
    """What a failed session means: the meter first (the cap hit, whether the tools/call
    left and its HTTP status), then what the SDK raised."""
    leaves = list(_leaves(exc))
    mcp = next((e for e in leaves if isinstance(e, MCPError)), None)
    why = (mcp.error.message if mcp is not None else type(leaves[0]).__name__)[:200]
    status = meter.call_status if meter.call_sent else None
    if meter.exceeded:
        return UpstreamFailure(TOO_LARGE, f"the upstream's answer is over {meter.cap} bytes",
                               outcome="answered" if meter.call_sent else "not_run")
    if 401 in meter.statuses:
        return UpstreamFailure(NOT_CONFIGURED, "the upstream refused our credential")
    if not meter.call_sent or status in GATEWAY:
        return UpstreamFailure(UNAVAILABLE, f"the upstream cannot be reached ({why})")
    if status is not None and 400 <= status < 500:
        return UpstreamFailure(ERROR, f"the upstream refused the call ({why})")
    if mcp is not None and mcp.error.code == REQUEST_TIMEOUT:
        return UpstreamFailure("timeout", "the upstream did not answer in time",
                               outcome="unknown")
    if (mcp is not None and status is not None and 200 <= status < 300
            and mcp.error.code not in SYNTHESIZED):
        return UpstreamFailure(ERROR, f"the upstream answered an error: {why}",
                               outcome="answered")
    return UpstreamFailure(ERROR, f"the call was sent and no answer came ({why}): it may "
                           "have run", outcome="unknown")
