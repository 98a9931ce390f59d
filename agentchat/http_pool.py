"""httpx's transport over httpcore2's connection pool: what `http_clients.async_client` builds.

httpcore 1's pool, under every `httpx.AsyncClient`, costs O(connections) on each request and
each release, with a `poll` of every idle connection's socket, and closes idle connections
whenever the pool holds more than its keep-alive count in total (not idle). At 50 concurrent
MCP calls that was half of the agent's CPU (bench/mcp_gateway.py; 3.0 vs 1.1 ms of client CPU
per request at 50 in flight with idle gaps between them). httpcore2 (the fork that `mcp`
itself depends on) fixes all three: one pass per change, the socket checked only for the
connection about to be used, only idle connections counted.

Everything above the pool stays httpx's: the client, its `AsyncHTTPTransport` (whose
`handle_async_request` OpenTelemetry's httpx instrumentation wraps: client spans and
`traceparent` unchanged), its timeouts, and its exceptions: httpcore2's are raised as the
httpcore exceptions of the same name, which httpx maps as it always did (`httpx.ConnectError`,
`httpx.ReadTimeout`...). Proxies from the environment keep httpx's own transports.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any

import httpcore
import httpcore2
import httpx


@contextlib.contextmanager
def _as_httpcore() -> Iterator[None]:
    """httpcore2's exception as httpcore's of the same name (httpx maps those)."""
    try:
        yield
    except Exception as e:
        for cls in type(e).__mro__:
            if cls.__module__.startswith("httpcore2"):
                same = getattr(httpcore, cls.__name__, None)
                if isinstance(same, type) and issubclass(same, Exception):
                    raise same(str(e)) from e
        raise


class _Body:
    """A response body from httpcore2, read as httpx reads httpcore's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpcore():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        with _as_httpcore():
            await self._stream.aclose()


class _Pool:
    """httpcore2's AsyncConnectionPool behind the interface httpx's transport calls."""

    def __init__(self, pool: httpcore2.AsyncConnectionPool) -> None:
        self._pool = pool

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        url = request.url
        forwarded = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(scheme=url.scheme, host=url.host, port=url.port, target=url.target),
            headers=request.headers,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpcore():
            response = await self._pool.handle_async_request(forwarded)
        return httpcore.Response(
            status=response.status,
            headers=response.headers,
            content=_Body(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        with _as_httpcore():
            await self._pool.aclose()

    async def __aenter__(self) -> _Pool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()


class PooledTransport(httpx.AsyncHTTPTransport):
    """`httpx.AsyncHTTPTransport` with httpcore2's pool; TLS as httpx would set it up."""

    def __init__(self, limits: httpx.Limits | None = None) -> None:
        # Not super().__init__(): it would build an httpcore pool only to drop it.
        limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._pool = _Pool(  # type: ignore[assignment]
            httpcore2.AsyncConnectionPool(
                ssl_context=httpx.create_ssl_context(),
                max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive_connections,
                keepalive_expiry=limits.keepalive_expiry,
            )
        )
